/**
 * @module services/updates/ring-buffer
 * The last N update envelopes of a session (seed 000 §7: 512), for `replayUpdates(afterSequence)`.
 */
import type { SessionUpdateEnvelope } from '../../protocol/updates.js';

export class UpdateRingBuffer {
  /**
   * Grows by push until it holds `capacity` entries, then wraps. It is not allocated up front: an
   * idle loaded session that never sent an update would otherwise hold 4 kB of empty slots, a
   * third of what such a session costs (issue 14.5).
   */
  private readonly items: Array<SessionUpdateEnvelope | undefined> = [];
  private next = 0;
  private count = 0;

  constructor(readonly capacity = 512) {}

  push(envelope: SessionUpdateEnvelope): void {
    if (this.items.length < this.capacity) this.items.push(envelope);
    else this.items[this.next] = envelope;
    this.next = (this.next + 1) % this.capacity;
    this.count = Math.min(this.count + 1, this.capacity);
  }

  /** The oldest sequence still held, or undefined when empty. */
  get oldestSequence(): number | undefined {
    if (this.count === 0) return undefined;
    return this.items[(this.next - this.count + this.capacity) % this.capacity]!.sequence;
  }

  /**
   * Envelopes with a sequence greater than `afterSequence`, oldest first; `null` when the buffer no
   * longer reaches back that far (the caller must read the snapshot instead).
   */
  after(afterSequence: number): SessionUpdateEnvelope[] | null {
    const oldest = this.oldestSequence;
    if (oldest === undefined) return [];
    if (afterSequence < oldest - 1) return null;
    const out: SessionUpdateEnvelope[] = [];
    for (let i = 0; i < this.count; i += 1) {
      const envelope = this.items[(this.next - this.count + i + this.capacity) % this.capacity]!;
      if (envelope.sequence > afterSequence) out.push(envelope);
    }
    return out;
  }
}
