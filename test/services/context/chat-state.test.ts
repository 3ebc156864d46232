/**
 * ChatState's append check (issue 14, perf-alloc): `assertAppendable` no longer copies the set of
 * open tool calls for every append; it keeps what earlier messages of the same batch opened and
 * closed apart. It must refuse and accept exactly what the copying check did, batch by batch, and a
 * refused batch must leave the conversation unchanged.
 */
import { describe, expect, it } from 'vitest';
import type { StoredMessage } from '../../../src/protocol/content.js';
import { ChatState, ChatStateError } from '../../../src/services/context/chat-state.js';
import { fuzzSeeds, fuzzSeedsTimeout, seededRandom } from '../../support/fuzz.js';

/**
 * The former check, a copy of the open calls updated message by message, plus the rule of branch
 * attack5: a call id is used once per turn (`used`, every call id ever opened, by turn).
 */
class CopyingCheck {
  readonly open = new Set<string>();
  readonly used = new Set<string>();

  accepts(messages: readonly StoredMessage[]): boolean {
    const open = new Set(this.open);
    const used = new Set(this.used);
    for (const message of messages) {
      if (message.role === 'tool') {
        const key = `${message.turnId}:${message.providerCallId}`;
        if (!open.has(key)) return false;
        open.delete(key);
      }
      if (message.role === 'assistant') {
        const ids = message.content.flatMap((b) => (b.type === 'tool_call' ? [b.callId] : []));
        if (new Set(ids).size !== ids.length) return false;
        for (const id of ids) {
          if (used.has(`${message.turnId}:${id}`)) return false;
          used.add(`${message.turnId}:${id}`);
          open.add(`${message.turnId}:${id}`);
        }
      }
    }
    return true;
  }

  append(messages: readonly StoredMessage[]): void {
    for (const message of messages) {
      if (message.role === 'assistant') {
        for (const b of message.content) {
          if (b.type !== 'tool_call') continue;
          this.open.add(`${message.turnId}:${b.callId}`);
          this.used.add(`${message.turnId}:${b.callId}`);
        }
      } else if (message.role === 'tool' && message.providerCallId) {
        this.open.delete(`${message.turnId}:${message.providerCallId}`);
      }
    }
  }
}

let sequence = 0;
function message(role: StoredMessage['role'], turnId: string, extra: Partial<StoredMessage> = {}): StoredMessage {
  sequence += 1;
  return { id: `m${sequence}`, sessionId: 's', turnId, sequence, role, kind: 'normal', content: [], createdAt: '2026-01-01T00:00:00.000Z', ...extra };
}
const assistant = (turnId: string, callIds: string[]) =>
  message('assistant', turnId, { content: callIds.map((callId) => ({ type: 'tool_call' as const, callId, name: 't', arguments: '{}' })) });
const result = (turnId: string, callId: string) =>
  message('tool', turnId, { providerCallId: callId, content: [{ type: 'tool_result', callId, status: 'succeeded', text: 'ok' }] });

describe('ChatState.assertAppendable', () => {
  it('refuses a second result for one call within one batch, and a result for a call opened and closed in it', () => {
    const chat = new ChatState();
    chat.append([assistant('t', ['a'])]);
    expect(() => chat.append([result('t', 'a'), result('t', 'a')])).toThrow(ChatStateError);
    expect(chat.length).toBe(1);
    expect(() => chat.append([assistant('t', ['b']), result('t', 'b'), result('t', 'b')])).toThrow(ChatStateError);
    expect(() => chat.append([assistant('t', ['c', 'c'])])).toThrow('unique');
    expect(chat.length).toBe(1);
    // A call id answered earlier in the turn is not opened again (attack5: its result could not be stored).
    expect(() => chat.append([result('t', 'a'), assistant('t', ['a']), result('t', 'a')])).toThrow('already used in this turn');
    expect(chat.length).toBe(1);
    chat.append([result('t', 'a')]);
    expect(() => chat.append([assistant('t', ['a'])])).toThrow('already used in this turn');
    expect(() => chat.append([assistant('t', ['x']), assistant('t', ['x'])])).toThrow('already used in this turn');
    // The next turn may use it again, and a compaction's replace does not forget the turn's ids.
    chat.append([assistant('t2', ['a']), result('t2', 'a')]);
    chat.replace([]);
    expect(() => chat.append([assistant('t2', ['a'])])).toThrow('already used in this turn');
    expect(chat.length).toBe(0);
    expect(() => chat.append([result('t', 'a')])).toThrow(ChatStateError);
  });

  it('accepts and refuses exactly what the copying check did, over 3,000 random batches', () => {
    // One generator per run, so a failure names the seed that reproduces it alone.
    for (const run of fuzzSeeds(100, 7)) {
      const next = seededRandom(run);
      const pick = <T,>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!;
      const chat = new ChatState();
      const reference = new CopyingCheck();
      // Turns follow each other, as in a session (one running at a time).
      let turn = 1;
      for (let step = 0; step < 30; step += 1) {
        if (next() < 0.15) turn += 1;
        const batch = Array.from({ length: 1 + Math.floor(next() * 4) }, () => {
          const turnId = `t${turn}`;
          return next() < 0.4 ? assistant(turnId, Array.from({ length: Math.floor(next() * 3) }, () => pick(['a', 'b', 'c']))) : result(turnId, pick(['a', 'b', 'c']));
        });
        const accepts = reference.accepts(batch);
        const before = chat.length;
        if (accepts) {
          expect(() => chat.append(batch), `seed ${run} step ${step}`).not.toThrow();
          reference.append(batch);
          expect(chat.length, `seed ${run} step ${step}`).toBe(before + batch.length);
        } else {
          expect(() => chat.append(batch), `seed ${run} step ${step}`).toThrow(ChatStateError);
          expect(chat.length).toBe(before);
        }
      }
    }
  }, fuzzSeedsTimeout(100, 40));
});
