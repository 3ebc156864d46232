/**
 * @module session-handle/update-stream
 * The updates of one session as the host sees them: each is buffered (the last 512, for
 * `replayUpdates`), emitted on the session's own stream and on the core's stream of all sessions.
 */
import { Observable, Subject } from 'rxjs';
import { CommandError, InputError } from '../errors.js';
import type { SessionUpdateEnvelope } from '../protocol/updates.js';
import { UpdateRingBuffer } from '../services/updates/ring-buffer.js';

/** The update stream and replay buffer of one session handle. */
export class UpdateStream {
  /** Every update of this session, in sequence order. Read-only. */
  readonly updates$: Observable<SessionUpdateEnvelope>;
  private readonly subject = new Subject<SessionUpdateEnvelope>();
  private readonly buffer = new UpdateRingBuffer(512);
  private lastSequence = 0;

  constructor(private readonly global: Subject<SessionUpdateEnvelope>) {
    this.updates$ = this.subject.asObservable();
  }

  /** Buffers one sequenced update, then emits it to this session's and the core's subscribers. */
  publish(envelope: SessionUpdateEnvelope): void {
    this.lastSequence = envelope.sequence;
    this.buffer.push(envelope);
    // A subscriber that throws never reaches the loop: RxJS reports it asynchronously. A Subject
    // with no observer does nothing on `next` but allocate its call's closure and iterator, so it is
    // not called (neither Subject is ever unsubscribed, the one case where `next` would throw).
    if (this.subject.observed) this.subject.next(envelope);
    if (this.global.observed) this.global.next(envelope);
  }

  /** The sequence of the last update this stream published (0 before the first). */
  get lastPublishedSequence(): number {
    return this.lastSequence;
  }

  /** Updates after `afterSequence` from the 512-entry ring buffer; `snapshot_required` when it no longer reaches back. */
  replay(afterSequence: number): SessionUpdateEnvelope[] {
    if (!Number.isInteger(afterSequence) || afterSequence < 0) {
      throw new InputError('invalid_request', 'afterSequence must be a non-negative integer');
    }
    const updates = afterSequence > this.lastSequence ? null : this.buffer.after(afterSequence);
    if (updates === null) {
      throw new CommandError('snapshot_required', `updates after ${afterSequence} are no longer buffered; read the snapshot`, {
        details: { lastUpdateSequence: this.lastSequence, oldestBufferedSequence: this.buffer.oldestSequence ?? null },
      });
    }
    return updates;
  }

  /** Ends this session's stream (the core's stream goes on). */
  complete(): void {
    this.subject.complete();
  }
}
