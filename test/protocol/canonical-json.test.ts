/**
 * canonicalJson (issue 14, perf-alloc): the replacer returns an object whose keys are already in
 * order unchanged instead of rebuilding it. The text must be exactly the text of the rebuild-every-
 * object form it replaced (the trace's payload hashes and the doom-loop signatures depend on it).
 */
import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../../src/protocol/canonical-json.js';
import { fuzzSeeds, fuzzSeedsTimeout, seededRandom } from '../support/fuzz.js';

/** The former implementation: every plain object rebuilt with its entries sorted. */
function rebuilt(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      return Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    }
    return v;
  });
}

const KEYS = ['a', 'b', 'B', 'z', '10', '9', '0', '', 'é', 'aa', 'a b', '\u{1F600}', '__proto__', 'toJSON_', '-1', '01'];

function value(next: () => number, depth: number): unknown {
  const r = next();
  if (depth > 3 || r < 0.35) {
    const leaves = [null, true, false, 0, -1.5, 1e21, NaN, Infinity, 'x', '', 'é\n"', undefined, new Date(0)];
    return leaves[Math.floor(next() * leaves.length)];
  }
  if (r < 0.55) return Array.from({ length: Math.floor(next() * 4) }, () => value(next, depth + 1));
  const object: Record<string, unknown> = {};
  const count = Math.floor(next() * 6);
  for (let i = 0; i < count; i += 1) {
    // Defined, not assigned: `__proto__` is then an own key, as JSON.parse makes it.
    Object.defineProperty(object, KEYS[Math.floor(next() * KEYS.length)]!, { value: value(next, depth + 1), enumerable: true, writable: true, configurable: true });
  }
  return object;
}

describe('canonicalJson', () => {
  it('sorts keys at every depth', () => {
    expect(canonicalJson({ b: 1, a: { d: [{ z: 1, y: 2 }], c: null } })).toBe('{"a":{"c":null,"d":[{"y":2,"z":1}]},"b":1}');
  });

  it('gives the text of the rebuild-every-object form for edge cases', () => {
    const cases: unknown[] = [
      { 10: 'a', 9: 'b', x: 1 },
      { 1: 'a', a: 'b' },
      { a: undefined, b: () => 1, c: Symbol('s') },
      new Map([['a', 1]]),
      { s: new String('ab'), n: new Number(3), t: new Boolean(false) },
      new String('ab'),
      { date: new Date(86_400_000), nested: { toJSON: () => ({ b: 1, a: 2 }) } },
      Object.assign(Object.create({ inherited: 1 }), { own: 2 }),
      JSON.parse('{"z":1,"__proto__":{"b":1,"a":2},"a":3}'),
      [undefined, { b: 1, a: 1 }],
      'plain',
      null,
    ];
    for (const c of cases) expect(canonicalJson(c)).toBe(rebuilt(c));
  });

  it('gives the text of the rebuild-every-object form for 2,000 random values', () => {
    for (const seed of fuzzSeeds(2000)) {
      const v = value(seededRandom(seed), 0);
      expect(canonicalJson(v), `seed ${seed}`).toBe(rebuilt(v));
    }
  }, fuzzSeedsTimeout(2000, 2));
});
