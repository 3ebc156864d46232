/**
 * The bounded queue of one update reader (seed 000 §7, tokio broadcast semantics): FIFO while the
 * reader keeps up, the oldest dropped once it is full, one lag reported with the count and the
 * sequences to recover by, then the oldest held; checked against a plain array model of it.
 */
import { describe, expect, it } from 'vitest';
import type { SessionUpdateEnvelope } from '../../src/protocol/updates.js';
import { SESSION_READER_CAPACITY, UpdateReaderQueue, type UpdateLag } from '../../src/services/updates/reader-queue.js';

const envelope = (sequence: number): SessionUpdateEnvelope => ({
  version: 7,
  sessionId: 's',
  turnId: 't',
  sequence,
  occurredAtMs: 0,
  update: { type: 'text_delta', delta: String(sequence) },
});

const takeAll = (queue: UpdateReaderQueue) => {
  const out: Array<number | UpdateLag> = [];
  for (;;) {
    const lag = queue.takeLag();
    if (lag !== null) out.push(lag);
    const taken = queue.take();
    if (taken === undefined) return out;
    out.push(taken.sequence);
  }
};

describe('update reader queue', () => {
  it('is a FIFO while the reader keeps up, and holds 512 by default', () => {
    const queue = new UpdateReaderQueue();
    expect(queue.capacity).toBe(SESSION_READER_CAPACITY);
    expect(SESSION_READER_CAPACITY).toBe(512);
    queue.push(envelope(1));
    queue.push(envelope(2));
    expect(queue.take()).toEqual(envelope(1));
    queue.push(envelope(3));
    expect(takeAll(queue)).toEqual([2, 3]);
    expect(queue.takeLag()).toBeNull();
    expect(queue.take()).toBeUndefined();
  });

  it('drops the oldest once full, then reports the lag once, then the oldest held', () => {
    const queue = new UpdateReaderQueue(4);
    queue.push(envelope(10));
    expect(queue.take()).toEqual(envelope(10));
    for (let s = 11; s <= 20; s += 1) queue.push(envelope(s));
    expect(queue.size).toBe(4);
    expect(takeAll(queue)).toEqual([{ skipped: 6, resumeAfterSequence: 10, nextSequence: 17 }, 17, 18, 19, 20]);
  });

  it('a reader that took nothing resumes after the sequence before the first dropped one', () => {
    const queue = new UpdateReaderQueue(2);
    for (let s = 5; s <= 9; s += 1) queue.push(envelope(s));
    expect(takeAll(queue)).toEqual([{ skipped: 3, resumeAfterSequence: 4, nextSequence: 8 }, 8, 9]);
  });

  it('agrees with an array model under any interleaving of pushes and takes, across wraps', () => {
    let seed = 7;
    const random = () => ((seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31);
    for (const capacity of [1, 2, 3, 8]) {
      const queue = new UpdateReaderQueue(capacity);
      let model: number[] = [];
      let skipped = 0;
      let resumeAfter = 0;
      let lastTaken: number | null = null;
      let lastDropped = 0;
      let next = 1;
      for (let step = 0; step < 2_000; step += 1) {
        if (random() < 0.6) {
          if (model.length === capacity) {
            if (skipped === 0) resumeAfter = lastTaken ?? model[0]! - 1;
            skipped += 1;
            lastDropped = model[0]!;
            model = model.slice(1);
          }
          model.push(next);
          queue.push(envelope(next));
          next += 1;
        } else {
          const taken = queue.takeLag() ?? queue.take();
          if (skipped > 0) {
            expect(taken).toEqual({ skipped, resumeAfterSequence: resumeAfter, nextSequence: model[0] });
            skipped = 0;
            lastTaken = lastDropped;
          } else if (model.length === 0) {
            expect(taken).toBeUndefined();
          } else {
            lastTaken = model.shift()!;
            expect(taken).toEqual(envelope(lastTaken));
          }
        }
        expect(queue.size).toBe(model.length);
      }
    }
  });

  it('a second gap before the reader took anything after a lag resumes after the first gap, not before it', () => {
    const queue = new UpdateReaderQueue(2);
    queue.push(envelope(1));
    expect(queue.take()).toEqual(envelope(1));
    for (let s = 2; s <= 6; s += 1) queue.push(envelope(s));
    expect(queue.takeLag()).toEqual({ skipped: 3, resumeAfterSequence: 1, nextSequence: 5 });
    expect(queue.takeLag()).toBeNull();
    for (let s = 7; s <= 8; s += 1) queue.push(envelope(s));
    expect(takeAll(queue)).toEqual([{ skipped: 2, resumeAfterSequence: 4, nextSequence: 7 }, 7, 8]);
  });

  it('clear drops everything, lag included', () => {
    const queue = new UpdateReaderQueue(2);
    for (let s = 1; s <= 5; s += 1) queue.push(envelope(s));
    queue.clear();
    expect(queue.takeLag()).toBeNull();
    expect(queue.take()).toBeUndefined();
    queue.push(envelope(6));
    expect(takeAll(queue)).toEqual([6]);
  });
});
