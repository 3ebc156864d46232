/**
 * Issue 14: the end of a turn in its final answer's statement, on PGlite and a real Postgres server.
 * When the Turn knows the answer it stores ends the turn (no tool calls, no steering input waiting,
 * no stop asked, no judged output), the chart asks for the end with the message, and the fact
 * statement writes both: a committed final answer is never left on a running turn, and the end costs
 * no round trip of its own. Every other end (cancelled, failed, a judged answer) is written the old
 * way, by `finishTurn`. The fence of the folded statement is attacked in fenced-facts.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { NewMessage } from '../../src/protocol/content.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { backends, useBackend } from '../support/databases.js';
import { faultyStorage, type FaultyStorage } from '../support/faults.js';
import { harness } from '../support/harness.js';
import { beginRunningTurn, countRoundTrips, uid } from '../support/storage-fixtures.js';

const usage = { inputTokens: 10, outputTokens: 5, cachedInputTokens: 1, reasoningTokens: 2 };

function answer(text: string, id = uid('msg')): NewMessage {
  return { id, role: 'assistant', kind: 'normal', content: [{ type: 'text', text }] };
}

/** The fact writes a runtime made through `faulty`, in order (reads and the trace left out). */
function factWrites(faulty: FaultyStorage): Array<[string, unknown]> {
  const facts = new Set(['beginTurn', 'recordModelCallStart', 'commitAssistantMessage', 'commitToolResult', 'appendTurnMessages', 'finishTurn', 'interruptTurn']);
  return faulty.calls.filter((c) => facts.has(c.method)).map((c) => [c.method, c.method === 'commitAssistantMessage' ? (c.args[4] ?? null) : c.method === 'finishTurn' ? (c.args[1] as { status: string }).status : null]);
}

/** The statements `fn` sends that are not the trace's or the lease keeper's: the facts' round trips. */
async function factStatements(storage: SqlSessionStorage, fn: () => Promise<unknown>): Promise<string[]> {
  const db = storage.db;
  const query = db.query.bind(db);
  const seen: string[] = [];
  db.query = ((...args: Parameters<typeof query>) => {
    const first = args[0] as string | { name?: string; text?: string };
    const label = typeof first === 'string' ? first.replace(/\s+/g, ' ').trim().slice(0, 40) : (first.name ?? first.text ?? '?');
    if (!/trace|span|session_leases|lease/i.test(label)) seen.push(label);
    return query(...args);
  }) as typeof db.query;
  try {
    await fn();
  } finally {
    db.query = query;
  }
  return seen;
}

describe.each(backends)('the end of a turn in its final answer\'s statement on $name', (backend) => {
  let storage: SqlSessionStorage;
  useBackend(backend, (s) => (storage = s));

  it('storage: an answer with an end is one statement and completes the turn as finishTurn would; refused, it leaves the turn running', async () => {
    const { sessionId, turnId } = await beginRunningTurn(storage);
    const first = answer('almost');
    await storage.commitAssistantMessage(turnId, first, usage, 0);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'running', endedAt: null });
    // The same message id again, with an end: the insert fails, so the end must not land either.
    await expect(storage.commitAssistantMessage(turnId, answer('again', first.id), usage, 0, { planUnfinishedStepCount: 1 })).rejects.toMatchObject({ sqlState: '23505' });
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'running', endedAt: null, inputTokens: 10 });

    const final = answer('done');
    expect(await countRoundTrips(storage, () => storage.commitAssistantMessage(turnId, final, usage, 0, { planUnfinishedStepCount: 2 }))).toEqual({ queries: 1, transactions: 0 });
    const turn = await storage.getTurn(turnId);
    expect(turn).toMatchObject({ status: 'completed', errorCode: null, errorMessage: null, planUnfinishedStepCount: 2, inputTokens: 20, outputTokens: 10 });
    expect(turn!.endedAt).not.toBeNull();
    expect((await storage.listMessages(sessionId)).map((m) => m.id).at(-1)).toBe(final.id);
    // The turn is ended: nothing more lands on it, and finishTurn finds nothing to end.
    await expect(storage.commitAssistantMessage(turnId, answer('late'), usage, 0, { planUnfinishedStepCount: null })).rejects.toMatchObject({ code: 'persistence_error' });
    expect(await storage.finishTurn(turnId, { status: 'completed', planUnfinishedStepCount: null })).toBe(false);
  });

  it('storage: a single-message fact returns only what it decided, and the message it hands back is the one read back', async () => {
    const { sessionId, turnId } = await beginRunningTurn(storage);
    const call: NewMessage = { id: uid('msg'), role: 'assistant', kind: 'normal', content: [{ type: 'text', text: 'let me look' }, { type: 'tool_call', callId: 'c1', name: 'echo', arguments: '{"text":"hi"}' }] };
    const result: NewMessage = { id: uid('msg'), role: 'tool', kind: 'normal', content: [{ type: 'tool_result', callId: 'c1', status: 'succeeded', text: 'hi' }], providerCallId: 'c1', toolName: 'echo' };
    const plan: NewMessage = { id: uid('msg'), role: 'tool', kind: 'normal', content: [{ type: 'tool_result', callId: 'c2', status: 'succeeded', text: 'planned' }], providerCallId: 'c2', toolName: 'update_plan' };
    const handed = [
      await storage.commitAssistantMessage(turnId, call, usage, 1),
      await storage.commitToolResult(turnId, result),
      await storage.commitPlanUpdate(turnId, { explanation: null, steps: [{ step: 'a', status: 'pending' }], updatedAt: new Date().toISOString() }, plan),
      await storage.commitAssistantMessage(turnId, answer('done'), usage, 0, { planUnfinishedStepCount: 1 }),
    ];
    const read = await storage.listMessages(sessionId);
    expect(handed).toEqual(read.slice(1));
    expect(handed.map((m) => m.sequence)).toEqual([2, 3, 4, 5]);
  });

  it('a final answer ends its turn in its own statement: no end write follows, one round trip a turn fewer', async () => {
    const faulty = faultyStorage(storage);
    const h = await harness(faulty, [{ toolCalls: [{ name: 'echo', arguments: { text: 'x' } }] }, { text: 'done' }]);
    let outcome: unknown;
    let turnId = '';
    const statements = await factStatements(storage, async () => {
      ({ turnId, outcome } = await h.run('go'));
    });
    expect(outcome).toEqual({ status: 'completed', finalText: 'done' });
    // The tool call's message carries no end; the final answer carries it, and no finishTurn follows.
    expect(factWrites(faulty)).toEqual([
      ['beginTurn', null],
      ['commitAssistantMessage', null],
      ['commitToolResult', null],
      ['commitAssistantMessage', { planUnfinishedStepCount: null }],
    ]);
    // Begin, the tool call, its result (reserving the next call), the answer with the end: four round trips (five before).
    expect(statements).toHaveLength(4);
    const turn = await storage.getTurn(turnId);
    expect(turn).toMatchObject({ status: 'completed', toolCallCount: 1, modelCallCount: 2, modelSubmissionCount: 2, planUnfinishedStepCount: null });
    expect(turn!.endedAt).not.toBeNull();
    expect(h.session.status()).toEqual({ type: 'idle' });
  });

  it('a cancelled turn ends the old way, with finishTurn', async () => {
    const faulty = faultyStorage(storage);
    let release!: () => void;
    const h = await harness(faulty, [{ gate: new Promise<void>((r) => (release = r)), step: { text: 'never' } }]);
    const turnId = await h.start('go');
    // Cancelled while the model call is out (the request was made and its answer is held).
    while (h.model.requests.length === 0) await new Promise((r) => setTimeout(r, 5));
    await h.session.cancelTurn(turnId);
    expect(await h.session.waitForTurn(turnId)).toMatchObject({ status: 'cancelled' });
    release();
    expect(factWrites(faulty)).toEqual([['beginTurn', null], ['finishTurn', 'cancelled']]);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'cancelled' });
  });

  it('a final answer whose write fails fails the turn, and that end is written the old way', async () => {
    const faulty = faultyStorage(storage);
    faulty.failOn('commitAssistantMessage', 1);
    const h = await harness(faulty, [{ text: 'lost' }]);
    const { turnId, outcome } = await h.run('go');
    expect(outcome).toMatchObject({ status: 'failed', code: 'persistence_error' });
    expect(factWrites(faulty)).toEqual([['beginTurn', null], ['commitAssistantMessage', { planUnfinishedStepCount: null }], ['finishTurn', 'failed']]);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'persistence_error' });
    expect((await storage.listMessages(h.session.sessionId)).map((m) => m.role)).toEqual(['user']);
  });

  it('a cancel or steering input that arrives while the final answer is written comes after the end: completed, the input goes to the next turn', async () => {
    const faulty = faultyStorage(storage);
    const h = await harness(faulty, [{ text: 'answer' }, { text: 'next' }]);
    const held = faulty.hold('commitAssistantMessage');
    const turnId = await h.start('go');
    await held.reached;
    await h.session.steerTurn(turnId, [{ type: 'text', text: 'one more thing' }]);
    await h.session.cancelTurn(turnId);
    held.release();
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'answer' });
    expect(factWrites(faulty).map(([m]) => m)).toEqual(['beginTurn', 'commitAssistantMessage']);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'completed' });
    // The steering input was not lost: the next turn takes it, after its own input (as steering
    // input that missed its turn always is).
    await h.run('after');
    const texts = (await storage.listMessages(h.session.sessionId)).filter((m) => m.role === 'user').map((m) => (m.content[0] as { text: string }).text);
    expect(texts).toEqual(['go', 'after', 'one more thing']);
  });

  it('a judged answer (outputSchema) ends the old way; when that end fails, the next turn writes it first', async () => {
    const faulty = faultyStorage(storage);
    faulty.failOn('finishTurn', 1);
    const h = await harness(faulty, [{ text: '{"ok":true}' }, { text: 'back' }]);
    const judged = await h.session.run('judge', { outputSchema: z.object({ ok: z.boolean() }) });
    expect(judged.outcome).toEqual({ status: 'completed', finalText: '{"ok":true}' });
    expect(judged.output).toEqual({ ok: true });
    expect(factWrites(faulty)).toEqual([['beginTurn', null], ['commitAssistantMessage', null], ['finishTurn', 'completed']]);
    expect(h.session.status()).toMatchObject({ type: 'system_error' });
    const turnId = (await h.session.turns())[0]!.id;
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'running' });
    expect((await h.run('again')).outcome).toEqual({ status: 'completed', finalText: 'back' });
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'completed', errorCode: null });
  });
});
