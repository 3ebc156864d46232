/**
 * storableValue (issue 14, perf-alloc): a value that is already storable is read through first and
 * returned as the same object, with no copy; any other gives exactly what the copy-as-you-go form
 * gave (NULs and unpaired surrogates, in keys too, replaced by U+FFFD).
 */
import { describe, expect, it } from 'vitest';
import { REPLACEMENT_CHARACTER, storableText, storableValue } from '../../src/protocol/storable-text.js';
import { fuzzSeeds, fuzzSeedsTimeout, seededRandom } from '../support/fuzz.js';

/** The former form: every array and plain object copied, the original returned when nothing changed. */
function copying(value: unknown): unknown {
  if (typeof value === 'string') return storableText(value);
  if (Array.isArray(value)) {
    let changed = false;
    const out = value.map((v) => {
      const c = copying(v);
      if (c !== v) changed = true;
      return c;
    });
    return changed ? out : value;
  }
  if (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    let changed = false;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      const key = storableText(k);
      const c = copying(v);
      if (key !== k || c !== v) changed = true;
      out[key] = c;
    }
    return changed ? out : value;
  }
  return value;
}

const STRINGS = ['ok', '', 'é✓', '\u0000', 'a\ud800', '\udc00b', '\ud83d\ude00', 'x\ud83d'];

function value(next: () => number, depth: number): unknown {
  const r = next();
  if (depth > 3 || r < 0.4) return [null, 1, true, undefined, new Date(0), ...STRINGS][Math.floor(next() * (5 + STRINGS.length))];
  if (r < 0.6) return Array.from({ length: Math.floor(next() * 4) }, () => value(next, depth + 1));
  const object: Record<string, unknown> = {};
  for (let i = Math.floor(next() * 4); i > 0; i -= 1) object[STRINGS[Math.floor(next() * STRINGS.length)]!] = value(next, depth + 1);
  return object;
}

describe('storableValue', () => {
  it('returns a storable value itself, at every depth', () => {
    const v = { a: ['x', { b: 'é✓', c: [1, null] }], d: '\ud83d\ude00' };
    expect(storableValue(v)).toBe(v);
    expect(storableValue({ k: ['\u0000'] })).toEqual({ k: [REPLACEMENT_CHARACTER] });
    expect(storableValue({ 'k\ud800': 1 })).toEqual({ [`k${REPLACEMENT_CHARACTER}`]: 1 });
  });

  it('gives what the copying form gave, and the same object exactly when it did, for 3,000 random values', () => {
    for (const seed of fuzzSeeds(3000)) {
      const v = value(seededRandom(seed), 0);
      const expected = copying(v);
      const got = storableValue(v);
      expect(got, `seed ${seed}`).toEqual(expected);
      expect(got === v, `seed ${seed}`).toBe(expected === v);
    }
  }, fuzzSeedsTimeout(3000, 2));
});
