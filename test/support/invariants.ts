/**
 * Invariants checked on every recorded model request and on the stored rows of a session.
 */
import { expect } from 'vitest';
import type { ModelRequest } from '../../src/services/model/port.js';
import type { SessionStorage } from '../../src/storage/storage.js';
import type { SessionUpdateEnvelope } from '../../src/protocol/updates.js';

/** Each tool call has exactly one result, right after its assistant message, in provider order; no orphans. */
export function assertRequestInvariants(request: ModelRequest): void {
  const messages = request.messages;
  for (let i = 0; i < messages.length; i += 1) {
    const m = messages[i]!;
    if (m.role === 'tool') {
      throw new Error(`request message ${i}: tool result ${m.callId} does not follow an assistant message's calls`);
    }
    if (m.role !== 'assistant') continue;
    const calls = m.content.filter((b) => b.type === 'tool_call');
    for (const [k, call] of calls.entries()) {
      const result = messages[i + 1 + k];
      if (!result || result.role !== 'tool' || result.callId !== (call as { callId: string }).callId) {
        throw new Error(`request message ${i}: call ${(call as { callId: string }).callId} lacks its result at position ${i + 1 + k}`);
      }
    }
    i += calls.length;
  }
}

export function assertAllRequests(requests: readonly ModelRequest[]): void {
  for (const request of requests) assertRequestInvariants(request);
}

/** Sequences start at 1 (per actor incarnation), with no gap and no repeat. */
export function assertSequences(envelopes: readonly SessionUpdateEnvelope[]): void {
  const bySession = new Map<string, number[]>();
  for (const e of envelopes) bySession.set(e.sessionId, [...(bySession.get(e.sessionId) ?? []), e.sequence]);
  for (const [, seqs] of bySession) {
    for (let i = 1; i < seqs.length; i += 1) expect(seqs[i]).toBe(seqs[i - 1]! + 1);
  }
}

/** The stored facts of a session are consistent (issue 6 invariants). */
export async function assertStoredInvariants(storage: SessionStorage, sessionId: string): Promise<void> {
  const [turns, messages] = await Promise.all([storage.listTurns(sessionId), storage.listMessages(sessionId)]);
  expect(turns.filter((t) => t.status === 'running').length).toBeLessThanOrEqual(1);
  for (const turn of turns) {
    expect(turn.modelSubmissionCount).toBeGreaterThanOrEqual(turn.modelCallCount);
    const calls = messages
      .filter((m) => m.turnId === turn.id && m.role === 'assistant')
      .flatMap((m) => m.content.filter((b) => b.type === 'tool_call'));
    expect(turn.toolCallCount).toBe(calls.length);
  }
  // Results follow their calls, in provider order, at most one each.
  const seen = new Set<string>();
  let open: string[] = [];
  for (const m of messages) {
    if (m.role === 'assistant') {
      open = m.content.filter((b) => b.type === 'tool_call').map((b) => `${m.turnId}:${(b as { callId: string }).callId}`);
    } else if (m.role === 'tool') {
      const key = `${m.turnId}:${m.providerCallId}`;
      expect(seen.has(key), `duplicate result ${key}`).toBe(false);
      seen.add(key);
      expect(open[0], `result ${key} out of provider order`).toBe(key);
      open.shift();
    } else if (open.length > 0) {
      // A user-role message inside an open batch is only possible after a crash; then the batch stays open.
      open = [];
    }
  }
}
