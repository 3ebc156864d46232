/**
 * @module services/updates/reader-queue
 * The updates waiting for one reader that takes them at its own pace (`session.stream`, and through
 * it `toSSE`/`toResponse`), bounded as seed 000 §7 bounds a session's broadcast: 512 updates (the
 * core's stream of all sessions has no buffering reader in the library; one would take 4,096, the
 * seed's global capacity). It follows tokio's broadcast: when a reader falls more than
 * the capacity behind, the oldest updates it has not taken are dropped, and what it is told next is
 * an {@link UpdateLag} saying how many and from where to recover (reference §8.5: `replayUpdates`,
 * else the snapshot); then it takes the oldest update still held. Updates are not durable
 * facts (the transcript is in the store), so dropping them for a reader that does not keep up loses
 * nothing but that reader's live view.
 */
import type { SessionUpdateEnvelope } from '../../protocol/updates.js';

/** Capacity of a reader of one session's updates (seed 000 §7: the per-session broadcast). */
export const SESSION_READER_CAPACITY = 512;

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
      if (++this.head === this.capacity) this.head = 0;
      return;
    }
    const tail = this.head + this.count;
    // Until the buffer first wraps, every entry was appended, so the tail is the array's end.
    if (tail === this.items.length && tail < this.capacity) this.items.push(envelope);
    else this.items[tail >= this.capacity ? tail - this.capacity : tail] = envelope;
    this.count += 1;
  }

  /**
   * The lag, once, when updates were dropped since the reader's last take; else null. The reader
   * asks this before {@link take}: a reader that keeps up pays one comparison for it.
   */
  takeLag(): UpdateLag | null {
    if (this.skipped === 0) return null;
    const lag: UpdateLag = { skipped: this.skipped, resumeAfterSequence: this.resumeAfter, nextSequence: this.items[this.head]!.sequence };
    this.skipped = 0;
    // The reader now knows of everything up to the last dropped update: a later gap starts after it.
    this.lastTaken = this.lastDropped;
    return lag;
  }

  /** The oldest update held, or `undefined` when there is none. */
  take(): SessionUpdateEnvelope | undefined {
    if (this.count === 0) return undefined;
    const envelope = this.items[this.head]!;
    this.items[this.head] = undefined;
    if (++this.head === this.capacity) this.head = 0;
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
