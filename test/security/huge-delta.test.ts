/**
 * A provider that sends its whole answer, and its reasoning, as one enormous delta: each became one
 * live update of that size for every reader and a slot of the session's replay ring. The deltas
 * reach readers in pieces of at most `MAX_DELTA_CHARS`, in order, a surrogate pair never split;
 * the stored answer is the whole text. See docs/security.md, "Attack round 5".
 */
import { describe, expect, it } from 'vitest';
import { MAX_DELTA_CHARS } from '../../src/services/model/stream-events.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { harness } from '../support/harness.js';

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));

describe('one enormous delta', () => {
  it('reaches every reader in pieces of at most MAX_DELTA_CHARS, in order, surrogate pairs whole; the answer is whole', async () => {
    // A pair across the first cut, then 256 Ki characters more.
    const text = `${'a'.repeat(MAX_DELTA_CHARS - 1)}\u{1F600}${'b'.repeat(256 * 1024)}`;
    const reasoning = 'r'.repeat(3 * MAX_DELTA_CHARS + 5);
    const h = await harness(storage, [{ text, reasoning, chunk: text.length }]);
    const { outcome } = await h.run('go');
    expect(outcome).toEqual({ status: 'completed', finalText: text });
    const texts = h.updates.flatMap((e) => (e.update.type === 'text_delta' ? [e.update.delta] : []));
    const thoughts = h.updates.flatMap((e) => (e.update.type === 'reasoning_delta' ? [e.update.delta] : []));
    expect(texts.join('')).toBe(text);
    expect(thoughts.join('')).toBe(reasoning);
    expect(Math.max(...texts.map((d) => d.length), ...thoughts.map((d) => d.length))).toBeLessThanOrEqual(MAX_DELTA_CHARS);
    // 16,383 characters, then 256 Ki + 2 in pieces of 16 Ki.
    expect(texts).toHaveLength(1 + Math.ceil((text.length - (MAX_DELTA_CHARS - 1)) / MAX_DELTA_CHARS));
    expect(thoughts).toHaveLength(4);
    // The first cut moved back one character to keep the pair whole.
    expect(texts[0]).toBe('a'.repeat(MAX_DELTA_CHARS - 1));
    expect(texts[1]!.startsWith('\u{1F600}')).toBe(true);
  }, 60_000);
});
