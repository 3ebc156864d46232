/**
 * Request assembly normalises only what was appended since its last call on the same conversation
 * array (issue 14, perf-alloc). Whatever the history, the appends, an in-place change of an item or
 * a moved prune watermark, every call must give exactly what normalising a fresh copy of the array
 * gives, and a result already returned must never change afterwards.
 */
import { describe, expect, it } from 'vitest';
import type { StoredMessage } from '../../../src/protocol/content.js';
import type { ConversationItem } from '../../../src/services/context/chat-state.js';
import { SYSTEM_PART_MAX_TOKENS, assembleRequest, normalizeConversation } from '../../../src/services/context/assemble.js';
import type { SystemPart } from '../../../src/services/model/port.js';
import { fuzzSeeds, fuzzSeedsTimeout, seededRandom } from '../../support/fuzz.js';

let seq = 0;
function msg(partial: Partial<StoredMessage> & Pick<StoredMessage, 'role' | 'content'>): StoredMessage {
  seq += 1;
  return { id: `m${seq}`, sessionId: 's', turnId: 't', sequence: seq, kind: 'normal', createdAt: '2026-01-01T00:00:00.000Z', ...partial };
}
const user = (text: string) => msg({ role: 'user', content: [{ type: 'text', text }] });
const assistant = (...ids: string[]) => msg({ role: 'assistant', content: [{ type: 'text', text: 'x' }, ...ids.map((id) => ({ type: 'tool_call' as const, callId: id, name: 'echo', arguments: '{}' }))] });
const result = (id: string, text = 'ok') => msg({ role: 'tool', providerCallId: id, toolName: 'echo', content: [{ type: 'tool_result', callId: id, status: 'succeeded', text }] });
const syntheticItem = (text: string): ConversationItem => ({ message: user(text), synthetic: { reason: 'system_reminder', compactionId: 'c' } });

/** The same call on a fresh copy of the array, which no earlier call has seen. */
const fresh = (items: readonly (ConversationItem | StoredMessage)[], options = {}) => normalizeConversation([...items], options);

describe('incremental request normalisation', () => {
  it('gives what a fresh copy gives after every append, and never changes a result it returned', () => {
    for (const run of fuzzSeeds(60)) {
      const next = seededRandom(run);
      const pick = <T,>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)]!;
      const items: Array<ConversationItem | StoredMessage> = [];
      const returned: Array<{ result: ReturnType<typeof normalizeConversation>; text: string }> = [];
      for (let step = 0; step < 40; step += 1) {
        const r = next();
        const long = next() < 0.2 ? 'L'.repeat(3000) : 'ok';
        const item =
          r < 0.15 ? user('u') : r < 0.4 ? assistant(...Array.from({ length: Math.floor(next() * 3) }, () => pick(['a', 'b', 'c']))) : r < 0.9 ? result(pick(['a', 'b', 'c', 'z']), long) : syntheticItem('reminder');
        items.push(next() < 0.5 && !('message' in item) ? { message: item } : item);
        const options = { pruneWatermark: run % 3 === 0 ? Math.floor(seq / 2) : null, spillDir: run % 2 === 0 ? '/spill' : null };
        const got = normalizeConversation(items, options);
        expect(got, `seed ${run} step ${step}`).toEqual(fresh(items, options));
        returned.push({ result: got, text: JSON.stringify(got) });
      }
      for (const { result: r, text } of returned) expect(JSON.stringify(r)).toBe(text);
    }
  }, fuzzSeedsTimeout(60, 80));

  it('starts again when an item it covered was replaced in place or the watermark moved', () => {
    const items: StoredMessage[] = [user('go'), assistant('a'), result('a', 'R'.repeat(3000)), user('next'), assistant('b'), result('b')];
    normalizeConversation(items);
    items[2] = result('a', 'changed');
    expect(normalizeConversation(items)).toEqual(fresh(items));
    expect(normalizeConversation(items).messages[2]).toMatchObject({ role: 'tool', text: 'changed' });
    const watermark = items[3]!.sequence;
    const pruned = normalizeConversation(items, { pruneWatermark: watermark, spillDir: null });
    expect(pruned).toEqual(fresh(items, { pruneWatermark: watermark, spillDir: null }));
    expect(normalizeConversation(items)).toEqual(fresh(items));
  });

  it('lets results appended later join the last assistant message', () => {
    const items: StoredMessage[] = [user('go'), assistant('a', 'b')];
    expect(normalizeConversation(items).messages.map((m) => (m.role === 'tool' ? m.status : m.role))).toEqual(['user', 'assistant', 'interrupted', 'interrupted']);
    items.push(result('b'));
    expect(normalizeConversation(items).messages.map((m) => (m.role === 'tool' ? `${m.callId}:${m.status}` : m.role))).toEqual(['user', 'assistant', 'a:interrupted', 'b:success']);
    items.push(result('a'), user('more'));
    expect(normalizeConversation(items).messages.map((m) => (m.role === 'tool' ? `${m.callId}:${m.status}` : m.role))).toEqual(['user', 'assistant', 'a:success', 'b:success', 'user']);
    items.push(result('a'));
    expect(normalizeConversation(items)).toEqual(fresh(items));
  });

  it('checks a system part again when its content changed since the last call', () => {
    const part: SystemPart = { key: 'core/agent-system', content: 'You are a test agent.' };
    const system = [part];
    expect(assembleRequest({ system, conversation: [], tools: [] }).estimate.systemContextTokens).toBeGreaterThan(0);
    part.content = 'x'.repeat(SYSTEM_PART_MAX_TOKENS * 4);
    expect(() => assembleRequest({ system: [part], conversation: [], tools: [] })).toThrow(/tokens, limit/);
    part.content = '   ';
    expect(() => assembleRequest({ system: [part], conversation: [], tools: [] })).toThrow(/is empty/);
    part.content = 'fine again';
    expect(() => assembleRequest({ system: [part, { ...part }], conversation: [], tools: [] })).toThrow(/duplicate system context key/);
  });

  it('puts results in call order, the first of duplicates, for short and long runs of results alike', () => {
    for (const calls of [3, 12]) {
      const ids = Array.from({ length: calls }, (_, i) => `c${i}`);
      const results = ids.flatMap((id) => [result(id, `first ${id}`), result(id, `second ${id}`)]).reverse();
      // Reversed: every second result comes first; the one kept is the first in the items.
      const items = [user('go'), assistant(...ids), result('orphan'), ...results, user('next')];
      const texts = normalizeConversation(items).messages.flatMap((m) => (m.role === 'tool' ? [m.text] : []));
      expect(texts).toEqual(ids.map((id) => `second ${id}`));
      const emptyId = [user('go'), assistant(''), result('', 'empty id')];
      expect(normalizeConversation(emptyId).messages[2]).toMatchObject({ status: 'interrupted' });
    }
  });
});
