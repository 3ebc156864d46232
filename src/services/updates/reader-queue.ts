/**
 * @module services/updates/reader-queue
 * The updates waiting for one reader that takes them at its own pace (`session.stream`, and through
 * it `toSSE`/`toResponse`), bounded as seed 000 §7 bounds its broadcasts: a session's broadcast
 * holds 512 updates, the core's 4,096. It follows tokio's broadcast: when a reader falls more than
 * the capacity behind, the oldest updates it has not taken are dropped, and its next take is a
 * {@link UpdateLag} saying how many and from where to recover (reference §8.5: `replayUpdates`,
 * else the snapshot); the take after that is the oldest update still held. Updates are not durable
 * facts (the transcript is in the store), so dropping them for a reader that does not keep up loses
 * nothing but that reader's live view.
 */
import type { SessionUpdateEnvelope } from '../../protocol/updates.js';

/** Capacity of a reader of one session's updates (seed 000 §7: the per-session broadcast). */
export const SESSION_READER_CAPACITY = 512;
/** Capacity of a reader of every session's updates (seed 000 §7: the core's global broadcast). */
export const CORE_READER_CAPACITY = 4_096;

/** What a reader is told when it fell behind: the updates it missed, and where to pick up. */
export interface UpdateLag {
  /** How many updates were dropped for this reader since it last took one. */
  skipped: number;
  /**
   * The sequence to hand to `replayUpdates` to fetch what was dropped: the last update this reader
   * took (or was told of by an earlier lag) before the gap; the one before the first dropped update
   * when it had taken none.
   */
  resumeAfterSequence: number;
  /** The sequence of the update the reader takes next (the oldest still held). */
  nextSequence: number;
}

/** A bounded FIFO of update envelopes that drops its oldest entries and remembers that it did. */
export class UpdateReaderQueue {
  /**
   * A circular buffer that grows by push until it holds `capacity` entries, like the session's ring
   * buffer: a reader that keeps up never allocates more than the few slots it uses.
   */
  private readonly items: Array<SessionUpdateEnvelope | undefined> = [];
  private head = 0;
  private count = 0;
  private skipped = 0;
  private resumeAfter = 0;
  /** The last sequence the reader has accounted for: taken, or dropped and reported as a lag. */
  private lastTaken: number | null = null;
  private lastDropped = 0;

  constructor(readonly capacity = SESSION_READER_CAPACITY) {}

  /** How many updates wait to be taken. */
  get size(): number {
    return this.count;
  }

  /** Adds an update; when the queue is full, the oldest one is dropped for this reader. */
  push(envelope: SessionUpdateEnvelope): void {
    if (this.count === this.capacity) {
      const dropped = this.items[this.head]!;
      if (this.skipped === 0) this.resumeAfter = this.lastTaken ?? dropped.sequence - 1;
      this.skipped += 1;
      this.lastDropped = dropped.sequence;
      this.items[this.head] = envelope;
      this.head = (this.head + 1) % this.capacity;
      return;
    }
    const tail = this.head + this.count;
    // Until the buffer first wraps, every entry was appended, so the tail is the array's end.
    if (tail === this.items.length && tail < this.capacity) this.items.push(envelope);
    else this.items[tail % this.capacity] = envelope;
    this.count += 1;
  }

  /**
   * The next thing for the reader: the lag, once, when updates were dropped since its last take;
   * else the oldest update held; `undefined` when there is none.
   */
  take(): SessionUpdateEnvelope | UpdateLag | undefined {
    if (this.skipped > 0) {
      const lag: UpdateLag = { skipped: this.skipped, resumeAfterSequence: this.resumeAfter, nextSequence: this.items[this.head]!.sequence };
      this.skipped = 0;
      // The reader now knows of everything up to the last dropped update: a later gap starts after it.
      this.lastTaken = this.lastDropped;
      return lag;
    }
    if (this.count === 0) return undefined;
    const envelope = this.items[this.head]!;
    this.items[this.head] = undefined;
    this.head = (this.head + 1) % this.capacity;
    this.count -= 1;
    this.lastTaken = envelope.sequence;
    return envelope;
  }

  /** Drops everything held (the reader left). */
  clear(): void {
    this.items.length = 0;
    this.head = 0;
    this.count = 0;
    this.skipped = 0;
  }
}

/** Whether a take is a lag rather than an update. */
export function isUpdateLag(taken: SessionUpdateEnvelope | UpdateLag): taken is UpdateLag {
  return !('update' in taken);
}
