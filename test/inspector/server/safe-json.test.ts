/**
 * safeStringify never throws on what machine context can hold.
 */
import { describe, expect, it } from 'vitest';
import { safeStringify } from '../../../src/inspector/server/safe-json.js';

describe('safeStringify', () => {
  it('turns cycles, bigints, functions, errors, maps, sets and non-finite numbers into JSON', () => {
    const node: Record<string, unknown> = { name: 'n' };
    node.self = node;
    function namedAction() {}
    const value = {
      node,
      big: 12n,
      fn: namedAction,
      assign: Object.assign(() => undefined, { type: 'xstate.assign' }),
      error: Object.assign(new Error('bad'), { code: 'persistence_error' }),
      map: new Map([['a', 1]]),
      set: new Set([1, 2]),
      nan: Number.NaN,
      gone: undefined,
      list: [undefined, 1],
      date: new Date('2026-01-01T00:00:00.000Z'),
    };
    expect(JSON.parse(safeStringify(value))).toEqual({
      node: { name: 'n', self: '[Circular]' },
      big: '12',
      fn: { type: 'namedAction' },
      assign: { type: 'xstate.assign' },
      error: { name: 'Error', message: 'bad', code: 'persistence_error' },
      map: { a: 1 },
      set: [1, 2],
      nan: 'NaN',
      list: [null, 1],
      date: '2026-01-01T00:00:00.000Z',
    });
  });

  it('stops at the depth limit, and shared (non-cyclic) references are written twice', () => {
    const shared = { x: 1 };
    expect(JSON.parse(safeStringify({ a: { b: { c: { d: 1 } } }, l: [[[1]]] }, { depthLimit: 2 }))).toEqual({ a: { b: '[Object]' }, l: ['[Array]'] });
    expect(JSON.parse(safeStringify({ p: shared, q: shared }))).toEqual({ p: { x: 1 }, q: { x: 1 } });
    const throwing = { toJSON: () => { throw new Error('no'); } };
    expect(JSON.parse(safeStringify({ t: throwing }))).toEqual({ t: '[Unserializable]' });
  });
});
