/**
 * The runtime's ids (issue 14, the Postgres side of a step): `prefix_` and a time-ordered UUID
 * (RFC 9562 version 7), so that a new message, turn or session key lands at the right edge of its
 * B-tree instead of on a random leaf page (a full-page image in the WAL after every checkpoint).
 */
import { describe, expect, it } from 'vitest';
import { isoNow, isoString, randomIds, timeOrderedUuid } from '../../src/services/clock.js';

const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('time-ordered ids', () => {
  it('are version 7 UUIDs carrying the current millisecond', () => {
    const before = Date.now();
    const id = timeOrderedUuid();
    const after = Date.now();
    expect(id).toMatch(V7);
    const ms = parseInt(id.replace(/-/g, '').slice(0, 12), 16);
    expect(ms).toBeGreaterThanOrEqual(before);
    expect(ms).toBeLessThanOrEqual(after + 1);
  });

  it('increase strictly within a process, also thousands within one millisecond, and never repeat', () => {
    const ids = Array.from({ length: 10_000 }, () => randomIds.next('msg'));
    expect(ids.filter((id) => !id.startsWith('msg_'))).toEqual([]);
    expect(new Set(ids).size).toBe(ids.length);
    // Byte order (the C collation, and every collation for these fixed-shape hex strings).
    const outOfOrder = ids.filter((id, i) => i > 0 && !(ids[i - 1]! < id));
    expect(outOfOrder).toEqual([]);
  });

  it('keep 62 random bits: two processes minting in the same millisecond do not collide', () => {
    // The random tail differs between any two ids, not only the counter.
    const tails = new Set(Array.from({ length: 1_000 }, () => timeOrderedUuid().slice(19)));
    expect(tails.size).toBe(1_000);
  });
});

describe('isoString', () => {
  it('formats every time as Date#toISOString does', () => {
    const times = [0, 1, 999, 1000, 86_399_999, 86_400_000, 951_782_400_000, 951_868_799_999, 4_107_542_400_000, 253_402_300_799_999, 253_402_300_800_000, -1, 1.5, Date.now()];
    // Random times over the whole supported range, and the days around each month's and leap year's edges.
    let seed = 7;
    const random = () => ((seed = (seed * 48271) % 2147483647) / 2147483647);
    for (let i = 0; i < 20_000; i += 1) times.push(Math.floor(random() * 253_402_300_800_000));
    for (let day = 0; day < 366 * 8; day += 1) times.push(day * 86_400_000 - 1, day * 86_400_000, 946_684_800_000 + day * 86_400_000 + 43_210_987);
    // Runs within one second and back and forth across seconds: the kept text of a second is reused only for its own.
    const now = Date.now();
    for (let i = 0; i < 3_000; i += 1) times.push(now + (i % 7) * 1_000 + (i % 997), now + i, now - i * 333);
    const wrong = times.filter((t) => isoString(t) !== new Date(t).toISOString()).slice(0, 5);
    expect(wrong).toEqual([]);
  });
});

describe('isoNow', () => {
  it('is never before notBefore, as Date.parse reads it, whether notBefore was given out lately or not', () => {
    let t = 1_764_700_000_000;
    const clock = { now: () => t };
    let seed = 11;
    const random = () => ((seed = (seed * 48271) % 2147483647) / 2147483647);
    const given: string[] = [];
    const wrong: string[] = [];
    for (let i = 0; i < 20_000; i += 1) {
      // The clock moves forward, and sometimes back (a start later than the end's clock reading).
      t += Math.floor(random() * 2_000) - (random() < 0.1 ? 5_000 : 0);
      if (random() < 0.5 || given.length === 0) {
        given.push(isoNow(clock));
        continue;
      }
      // A start given out lately, one long gone from any cache, or a text isoNow never gave out.
      const pick = random();
      const notBefore =
        pick < 0.6 ? given[given.length - 1 - Math.floor(random() * Math.min(given.length, 20))]!
        : pick < 0.8 ? given[Math.floor(random() * given.length)]!
        : new Date(t + Math.floor(random() * 4_000) - 2_000).toISOString().replace('.000Z', 'Z');
      const expected = isoString(Math.max(t, Date.parse(notBefore)));
      if (isoNow(clock, notBefore) !== expected) wrong.push(`${t} ${notBefore}`);
    }
    expect(wrong.slice(0, 5)).toEqual([]);
  });
});
