/**
 * Invariants checked on every recorded model request and on the stored rows of a session (issue 6):
 * after every generated path, fuzz case and crash.
 */
import { expect } from 'vitest';
import { INTERRUPTED_RESULT_TEXT } from '../../src/services/context/assemble.js';
import type { ModelRequest } from '../../src/services/model/port.js';
import type { SessionStorage, TurnRecord } from '../../src/storage/storage.js';
import type { SessionUpdateEnvelope } from '../../src/protocol/updates.js';
import type { StoredMessage, ToolCallBlock } from '../../src/protocol/content.js';

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
export function assertSequences(envelopes: readonly SessionUpdateEnvelope[], options: { fromOne?: boolean } = {}): void {
  const bySession = new Map<string, number[]>();
  for (const e of envelopes) bySession.set(e.sessionId, [...(bySession.get(e.sessionId) ?? []), e.sequence]);
  for (const [sessionId, seqs] of bySession) {
    if (options.fromOne) expect(seqs[0], `first update sequence of ${sessionId}`).toBe(1);
    for (let i = 1; i < seqs.length; i += 1) expect(seqs[i], `update sequence of ${sessionId} after ${seqs[i - 1]}`).toBe(seqs[i - 1]! + 1);
  }
}

function callsOf(message: StoredMessage): ToolCallBlock[] {
  return message.content.filter((b): b is ToolCallBlock => b.type === 'tool_call');
}

/** The stored facts of a session are consistent (issue 6 invariants). */
export async function assertStoredInvariants(storage: SessionStorage, sessionId: string): Promise<{ turns: TurnRecord[]; messages: StoredMessage[] }> {
  const [turns, messages] = await Promise.all([storage.listTurns(sessionId), storage.listMessages(sessionId)]);
  expect(turns.filter((t) => t.status === 'running').length, 'running turns of one session').toBeLessThanOrEqual(1);
  for (const turn of turns) {
    expect(turn.modelSubmissionCount, `turn ${turn.id}: submissions >= model calls`).toBeGreaterThanOrEqual(turn.modelCallCount);
    const calls = messages.filter((m) => m.turnId === turn.id && m.role === 'assistant').flatMap(callsOf);
    expect(turn.toolCallCount, `turn ${turn.id}: tool_call_count = tool calls written`).toBe(calls.length);
    const assistants = messages.filter((m) => m.turnId === turn.id && m.role === 'assistant').length;
    // Every assistant message is the response of one counted model call.
    expect(turn.modelCallCount, `turn ${turn.id}: model calls >= assistant messages`).toBeGreaterThanOrEqual(assistants);
  }
  // Results follow their calls, in provider order, at most one each.
  const seen = new Set<string>();
  let open: string[] = [];
  for (const m of messages) {
    if (m.role === 'assistant') {
      open = callsOf(m).map((b) => `${m.turnId}:${b.callId}`);
    } else if (m.role === 'tool') {
      const key = `${m.turnId}:${m.providerCallId}`;
      expect(seen.has(key), `duplicate result ${key}`).toBe(false);
      seen.add(key);
      // A call whose result write failed stays without one; the results that exist keep provider order.
      const at = open.indexOf(key);
      expect(at, `result ${key} does not answer an open call in provider order (open: ${open.join(', ')})`).toBeGreaterThanOrEqual(0);
      open = open.slice(at + 1);
    } else if (open.length > 0) {
      // A user-role message inside an open batch: only after its turn ended without some results.
      const turn = turns.find((t) => `${t.id}:` === open[0]!.slice(0, t.id.length + 1));
      expect(turn?.status, `message ${m.id} interrupts the open calls ${open.join(', ')} of a turn still running`).not.toBe('running');
      open = [];
    }
  }
  return { turns, messages };
}

/** One model request as the port saw it, with the turn that made it. */
export interface TurnRequest {
  request: ModelRequest;
  turnId: string | null;
}

/**
 * No model call is made before every result of the calls before it is written: a request never
 * carries a synthesized result for a call of its own turn, and each turn made exactly as many
 * requests as it counted submissions.
 */
export function assertRequestsFollowResults(requests: readonly TurnRequest[], stored: { turns: TurnRecord[]; messages: StoredMessage[] }): void {
  const turnOfCall = new Map<string, string>();
  for (const m of stored.messages) if (m.role === 'assistant') for (const c of callsOf(m)) turnOfCall.set(c.callId, m.turnId!);
  for (const [i, { request, turnId }] of requests.entries()) {
    assertRequestInvariants(request);
    for (const m of request.messages) {
      if (m.role !== 'tool' || !m.synthetic) continue;
      expect(m.text).toBe(INTERRUPTED_RESULT_TEXT);
      expect(turnOfCall.get(m.callId), `request ${i + 1} of turn ${turnId}: synthesized result for its own call ${m.callId}`).not.toBe(turnId);
    }
  }
  for (const turn of stored.turns) {
    const made = requests.filter((r) => r.turnId === turn.id).length;
    // A submission is counted before the provider call; a cancel that lands during that write
    // ends the turn before the call, so the count may be one ahead of what was sent.
    expect(made, `turn ${turn.id}: model requests made <= model_submission_count`).toBeLessThanOrEqual(turn.modelSubmissionCount);
    expect(made, `turn ${turn.id}: model requests made >= model_submission_count - 1`).toBeGreaterThanOrEqual(turn.modelSubmissionCount - 1);
  }
}

/**
 * At rest: no turn is running, except one whose end write failed (the session reports
 * `system_error`; its next turn start, or the next process's startup correction, writes it).
 */
export function assertNoRunningAfterTerminal(turns: readonly TurnRecord[], status: { type: string }, failedEnds: ReadonlySet<string> = new Set()): void {
  const running = turns.filter((t) => t.status === 'running').map((t) => t.id);
  expect(running.length, 'running turns at rest').toBeLessThanOrEqual(1);
  const allowed = status.type === 'system_error' || status.type === 'not_loaded' ? running.filter((id) => failedEnds.has(id) || status.type === 'system_error') : [];
  expect(running, 'running turns at rest').toEqual(allowed);
}
