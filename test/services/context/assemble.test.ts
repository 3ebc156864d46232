import { describe, expect, it } from 'vitest';
import type { StoredMessage } from '../../../src/protocol/content.js';
import { INTERRUPTED_RESULT_TEXT, assembleRequest, buildSystemContext, normalizeConversation, projectToolResultText } from '../../../src/services/context/assemble.js';
import { estimateTokens } from '../../../src/services/context/estimate.js';

let seq = 0;
function msg(partial: Partial<StoredMessage> & Pick<StoredMessage, 'role' | 'content'>): StoredMessage {
  seq += 1;
  return { id: `m${seq}`, sessionId: 's', turnId: 't', sequence: seq, kind: 'normal', createdAt: '2026-01-01T00:00:00.000Z', ...partial };
}
const call = (id: string, name = 'echo') => ({ type: 'tool_call' as const, callId: id, name, arguments: '{}' });
const result = (id: string, text = 'ok') =>
  msg({ role: 'tool', providerCallId: id, toolName: 'echo', content: [{ type: 'tool_result', callId: id, status: 'succeeded', text }] });

describe('request assembly', () => {
  it('synthesizes the interrupted result for a call without one, with constant bytes', () => {
    const history = [msg({ role: 'user', content: [{ type: 'text', text: 'go' }] }), msg({ role: 'assistant', content: [call('a'), call('b')] }), result('a')];
    const one = normalizeConversation(history).messages;
    const two = normalizeConversation(history).messages;
    expect(one.slice(1)).toEqual([
      { role: 'assistant', content: [call('a'), call('b')] },
      { role: 'tool', callId: 'a', toolName: 'echo', status: 'success', text: 'ok' },
      { role: 'tool', callId: 'b', toolName: 'echo', status: 'interrupted', text: INTERRUPTED_RESULT_TEXT, synthetic: true },
    ]);
    expect(JSON.stringify(one)).toBe(JSON.stringify(two));
  });

  it('drops misplaced, duplicate and orphan results and puts results in call order', () => {
    const history = [
      msg({ role: 'user', content: [{ type: 'text', text: 'go' }] }),
      result('orphan'),
      msg({ role: 'assistant', content: [call('a'), call('b')] }),
      result('b', 'second'),
      result('a', 'first'),
      result('a', 'duplicate'),
      msg({ role: 'user', content: [{ type: 'text', text: 'next' }] }),
      result('b', 'misplaced'),
    ];
    const out = normalizeConversation(history).messages;
    expect(out.map((m) => (m.role === 'tool' ? `${m.callId}:${m.text}` : m.role))).toEqual(['user', 'assistant', 'a:first', 'b:second', 'user']);
  });

  it('maps result statuses to the model-visible ones', () => {
    const statuses = ['succeeded', 'failed', 'outcome_unknown', 'denied', 'cancelled'] as const;
    const history = [
      msg({ role: 'assistant', content: statuses.map((_, i) => call(`c${i}`)) }),
      ...statuses.map((status, i) =>
        msg({ role: 'tool', providerCallId: `c${i}`, toolName: 'echo', content: [{ type: 'tool_result', callId: `c${i}`, status, text: 'x' }] }),
      ),
    ];
    const out = normalizeConversation(history).messages.filter((m) => m.role === 'tool').map((m) => (m as { status: string }).status);
    expect(out).toEqual(['success', 'error', 'error', 'denied', 'interrupted']);
  });

  it('projects a single tool result over 8,000 tokens to head 75% and tail 25%', () => {
    const text = `HEAD${'a'.repeat(40_000)}${'b'.repeat(40_000)}TAIL`;
    const projected = projectToolResultText(text);
    expect(projected.truncated).toBe(true);
    expect(projected.text.startsWith('HEAD')).toBe(true);
    expect(projected.text.endsWith('TAIL')).toBe(true);
    expect(Buffer.byteLength(projected.text)).toBeLessThanOrEqual(32_000);
    const head = projected.text.split('\n')[0]!;
    expect(head.length).toBeGreaterThan(23_000);
    expect(projectToolResultText('short')).toEqual({ text: 'short', truncated: false });
  });

  it('leaves a result at the tools\' 32,000-byte cap alone, even with many newlines (the limits are aligned)', () => {
    const atCap = 'line\n'.repeat(6_400);
    expect(Buffer.byteLength(atCap)).toBe(32_000);
    expect(projectToolResultText(atCap)).toEqual({ text: atCap, truncated: false });
    const multibyte = 'é'.repeat(16_001);
    expect(projectToolResultText(multibyte).truncated).toBe(true);
  });

  it('estimates exactly ceil(JSON bytes / 4) per region, and the same sources give the same bytes', () => {
    const system = buildSystemContext('You are a test agent.', '## Rules\n- be brief');
    const tools = [{ name: 'echo', description: 'echo', parameters: { type: 'object' } }];
    const history = [msg({ role: 'user', content: [{ type: 'text', text: 'héllo ✓' }] }), msg({ role: 'assistant', content: [call('z')] }), result('z', 'ünïcode')];
    const a = assembleRequest({ system, conversation: history, tools, maxOutputTokens: 1000 });
    const b = assembleRequest({ system, conversation: [...history], tools, maxOutputTokens: 1000 });
    expect(a.estimate).toEqual({
      systemContextTokens: estimateTokens(a.request.system),
      conversationTokens: estimateTokens(a.request.messages),
      toolSurfaceTokens: estimateTokens(a.request.tools),
      estimatedInputTokens: estimateTokens(a.request.system) + estimateTokens(a.request.messages) + estimateTokens(a.request.tools),
      reservedOutputTokens: 1000,
    });
    expect(JSON.stringify(a.request)).toBe(JSON.stringify(b.request));
    expect(a.request.system).toEqual([{ key: 'core/agent-system', content: 'You are a test agent.\n\n## Rules\n- be brief' }]);
  });

  it('refuses a system message, a duplicate or empty system key and an oversized part', () => {
    const ok = buildSystemContext('p', '');
    expect(() => assembleRequest({ system: [...ok, ...ok], conversation: [], tools: [] })).toThrow(/duplicate system context key/);
    expect(() => assembleRequest({ system: [{ key: '', content: 'x' }], conversation: [], tools: [] })).toThrow(/key is empty/);
    expect(() => assembleRequest({ system: [{ key: 'k', content: 'x'.repeat(40_000) }], conversation: [], tools: [] })).toThrow(/limit 10000/);
    const system = msg({ role: 'system' as never, content: [{ type: 'text', text: 'no' }] });
    expect(() => assembleRequest({ system: ok, conversation: [system], tools: [] })).toThrow(expect.objectContaining({ code: 'model_protocol_error' }));
  });
});
