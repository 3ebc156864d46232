import { describe, expect, it } from 'vitest';
import { UpdateRingBuffer } from '../../src/services/updates/ring-buffer.js';
import type { SessionUpdateEnvelope } from '../../src/protocol/updates.js';

const envelope = (sequence: number): SessionUpdateEnvelope => ({
  version: 7,
  sessionId: 's',
  turnId: 't',
  sequence,
  occurredAtMs: 0,
  update: { type: 'text_delta', delta: String(sequence) },
});

describe('update ring buffer', () => {
  it('keeps the last N envelopes and answers null once it no longer reaches back', () => {
    const buffer = new UpdateRingBuffer(4);
    expect(buffer.after(0)).toEqual([]);
    expect(buffer.oldestSequence).toBeUndefined();
    buffer.push(envelope(1));
    buffer.push(envelope(2));
    expect(buffer.oldestSequence).toBe(1);
    expect(buffer.after(1)!.map((e) => e.sequence)).toEqual([2]);
    for (let i = 3; i <= 6; i += 1) buffer.push(envelope(i));
    expect(buffer.oldestSequence).toBe(3);
    expect(buffer.after(2)!.map((e) => e.sequence)).toEqual([3, 4, 5, 6]);
    expect(buffer.after(4)!.map((e) => e.sequence)).toEqual([5, 6]);
    expect(buffer.after(6)).toEqual([]);
    expect(buffer.after(1)).toBeNull();
  });
});
