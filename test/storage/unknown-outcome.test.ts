/**
 * A fact write whose outcome is unknown (integrity3): the server commits the statement and its
 * answer is lost with the connection (`test/support/wire-cut-proxy.ts` drops the answer, then the
 * connection, on the real wire). Attacks through the storage API a core uses, on a real Postgres
 * server: each fact on a step's path answers as if the answer had arrived, and nothing is written
 * twice (no second message, no counter moved twice, the turn's end once); a fenced fact under a
 * lost lease is still refused; a taken message id with other content is not mistaken for this fact.
 */
import { execFileSync } from 'node:child_process';
import { beforeAll, describe, expect, inject, it } from 'vitest';
import type { NewMessage } from '../../src/protocol/content.js';
import type { WriteFence } from '../../src/storage/fence.js';
import { postgresStorage } from '../../src/storage/postgres.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { createTestDatabase } from '../support/databases.js';
import { uid, userMessage as user, toolResultMessage as toolResult } from '../support/storage-fixtures.js';
import { startWireCutProxy, type WireCutProxy } from '../support/wire-cut-proxy.js';
import { useProxiedPostgres } from '../support/proxied-postgres.js';

const usage = { inputTokens: 10, outputTokens: 5, cachedInputTokens: 1, reasoningTokens: 2 };
const LEASE_MS = 60_000;

function assistant(callId: string): NewMessage {
  return { id: uid('msg'), role: 'assistant', kind: 'normal', content: [{ type: 'tool_call', callId, name: 'echo', arguments: '{}' }] };
}

function answer(text: string): NewMessage {
  return { id: uid('msg'), role: 'assistant', kind: 'normal', content: [{ type: 'text', text }] };
}

function testFence(ownerId: string): WriteFence & { tokens: Map<string, number>; refusals: Array<{ sessionId: string; token: number | null }> } {
  const tokens = new Map<string, number>();
  const refusals: Array<{ sessionId: string; token: number | null }> = [];
  return { ownerId, tokens, refusals, tokenOf: (id) => tokens.get(id), refused: (sessionId, token) => refusals.push({ sessionId, token }) };
}

describe('a fact statement committed whose answer was lost, on a Postgres server', () => {
  const bed = useProxiedPostgres(startWireCutProxy);
  let proxy: WireCutProxy;
  let storage: SqlSessionStorage;
  let direct: SqlSessionStorage;
  let fence: ReturnType<typeof testFence>;

  beforeAll(() => {
    ({ proxy, direct } = bed);
    storage = bed.open({ max: 2, timeouts: { statementMs: 2_000, answerMs: 3_000, connectMs: 3_000 } });
    fence = testFence(uid('owner'));
    storage.attachFence(fence);
  });

  /** Runs `write` with the answer of the statement named `marker` lost after its commit. */
  async function lostAnswer<T>(marker: string, write: () => Promise<T>): Promise<T> {
    const before = proxy.cuts;
    proxy.cutAfterAnswer(marker);
    const result = await write();
    expect(proxy.cuts, `the answer of ${marker} was cut`).toBe(before + 1);
    return result;
  }

  async function leasedSession(): Promise<{ sessionId: string; token: number }> {
    const sessionId = uid('ses');
    await storage.createSession({ id: sessionId, workingDirectory: '/work' });
    const acquired = await storage.leases.acquire(sessionId, fence.ownerId, LEASE_MS);
    if (acquired.type !== 'acquired') throw new Error(`lease not acquired: ${acquired.type}`);
    fence.tokens.set(sessionId, acquired.token);
    return { sessionId, token: acquired.token };
  }

  function begin(sessionId: string, turnId: string, messages: NewMessage[], reserveModelCall = false) {
    return storage.beginTurn({ turnId, sessionId, clientRequestId: `req-${turnId}`, modelId: 'scripted/m', resolvedProviderId: 'scripted', resolvedModelName: 'm', appVersion: 'test', messages, reserveModelCall });
  }

  it('every fact of a step answers as stored, once: begin, model call, assistant message, tool result with a reserved call, plan, contextual messages, final answer', async () => {
    const { sessionId } = await leasedSession();
    const turnId = uid('turn');
    const first = [user('skill'), user('hello')];
    const begun = await lostAnswer('ow_begin_turn', () => begin(sessionId, turnId, first, true));
    expect(begun.map((m) => [m.id, m.sequence, m.turnId])).toEqual([
      [first[0]!.id, 1, turnId],
      [first[1]!.id, 2, turnId],
    ]);
    expect(await direct.getTurn(turnId)).toMatchObject({ status: 'running', modelCallCount: 1, modelSubmissionCount: 1 });

    const call = assistant('c1');
    const stored = await lostAnswer('ow_commit_assistant', () => storage.commitAssistantMessage(turnId, call, usage, 1));
    expect(stored).toMatchObject({ id: call.id, sequence: 3, turnId, sessionId, content: call.content });

    const result = toolResult('c1');
    const storedResult = await lostAnswer('ow_commit_tool_result', () => storage.commitToolResult(turnId, result, 2));
    expect(storedResult).toMatchObject({ id: result.id, sequence: 4, providerCallId: 'c1' });

    const plan = { explanation: 'why', steps: [{ step: 'a', status: 'pending' as const }], updatedAt: new Date().toISOString() };
    const planResult = toolResult('c2');
    expect(await lostAnswer('ow_commit_plan', () => storage.commitPlanUpdate(turnId, plan, planResult))).toMatchObject({ id: planResult.id, sequence: 5 });

    const steer = [user('steer 1'), user('steer 2')];
    const appended = await lostAnswer('ow_append_messages', () => storage.appendTurnMessages(turnId, steer));
    expect(appended.map((m) => [m.id, m.sequence])).toEqual([
      [steer[0]!.id, 6],
      [steer[1]!.id, 7],
    ]);

    await lostAnswer('ow_model_call_start', () => storage.recordModelCallStart(turnId, 3));

    // The final answer's statement also ends the turn: the repeat finds it ended by this very answer.
    const last = answer('the end');
    expect(await lostAnswer('ow_commit_assistant', () => storage.commitAssistantMessage(turnId, last, usage, 0, { planUnfinishedStepCount: 1 }))).toMatchObject({ id: last.id, sequence: 8 });

    const messages = await direct.listMessages(sessionId);
    expect(messages.map((m) => m.id)).toEqual([...first, call, result, planResult, ...steer, last].map((m) => m.id));
    expect(await direct.loadSessionTurnPlans(sessionId)).toMatchObject([{ turnId, explanation: 'why' }]);
    // Counted once each: the tokens of two answers, one tool call, calls 1 (begin), 2 (reserved by the
    // result), 3 (the start record), and three submissions: the start record's repeat recognises its
    // committed first attempt by the submission count it had before (integrity-outage, point 3).
    expect(await direct.getTurn(turnId)).toMatchObject({
      status: 'completed',
      inputTokens: 20,
      outputTokens: 10,
      cachedInputTokens: 2,
      reasoningTokens: 4,
      toolCallCount: 1,
      modelCallCount: 3,
      modelSubmissionCount: 3,
      planUnfinishedStepCount: 1,
    });
    expect(fence.refusals).toEqual([]);
  });

  it('a model-call start (a resubmission) is counted once whether its lost first attempt committed or never arrived', async () => {
    const { sessionId } = await leasedSession();
    const turnId = uid('turn');
    await begin(sessionId, turnId, [user('hi')], true);
    // Committed, its answer lost: the repeat finds the count one past the one it had, and writes nothing.
    await lostAnswer('ow_model_call_start', () => storage.recordModelCallStart(turnId, 1));
    expect(await direct.getTurn(turnId)).toMatchObject({ status: 'running', modelCallCount: 1, modelSubmissionCount: 2 });
    // Never arrived (every pooled connection forgotten by a middlebox, the write reset on its first
    // bytes): the repeat finds the count as it was, and counts.
    proxy.severSilently();
    await storage.recordModelCallStart(turnId, 2);
    expect(await direct.getTurn(turnId)).toMatchObject({ status: 'running', modelCallCount: 2, modelSubmissionCount: 3 });
    // And the next lost answer is keyed by the count the repeat left.
    await lostAnswer('ow_model_call_start', () => storage.recordModelCallStart(turnId, 2));
    expect(await direct.getTurn(turnId)).toMatchObject({ status: 'running', modelCallCount: 2, modelSubmissionCount: 4 });
    await storage.finishTurn(turnId, { status: 'completed', errorCode: null, errorMessage: null, planUnfinishedStepCount: null });
    expect(await direct.getTurn(turnId)).toMatchObject({ status: 'completed', modelSubmissionCount: 4 });
    // The lease pool's one connection was severed too (nothing of it is a fact to run again): a look
    // at the database finds it dead and discards it, for the tests after this one.
    await storage.leases.ping().catch(() => undefined);
  });

  it('the end of a turn and an interrupt whose answers were lost report recorded, once', async () => {
    const { sessionId } = await leasedSession();
    const ended = uid('turn');
    await begin(sessionId, ended, [user('a')], true);
    const end = { status: 'failed' as const, errorCode: 'model_error', errorMessage: 'boom', planUnfinishedStepCount: null, unmadeModelCall: 1 };
    expect(await lostAnswer('model_submission_count - CASE', () => storage.finishTurn(ended, end))).toBe(true);
    // The reserved call was taken back once: not below zero, the constraint would have refused it.
    expect(await direct.getTurn(ended)).toMatchObject({ status: 'failed', errorCode: 'model_error', modelCallCount: 0, modelSubmissionCount: 0 });

    const interrupted = uid('turn');
    await begin(sessionId, interrupted, [user('b')]);
    expect(await lostAnswer('COMMIT', () => storage.interruptTurn(interrupted, { errorCode: 'persistence_error', errorMessage: 'end unrecorded' }))).toBe(true);
    expect(await direct.getTurn(interrupted)).toMatchObject({ status: 'interrupted', errorCode: 'persistence_error' });
  });

  it('a repeat under a lease lost meanwhile is still refused: ownership_lost, nothing stored', async () => {
    const { sessionId, token } = await leasedSession();
    const turnId = uid('turn');
    await begin(sessionId, turnId, [user('hello')]);
    await storage.leases.release(sessionId, fence.ownerId, token);
    const before = await direct.listMessages(sessionId);
    // The refusal's own answer (no row) is what is lost; the repeat is refused again and says so.
    await expect(lostAnswer('ow_commit_tool_result', () => storage.commitToolResult(turnId, toolResult('c1')))).rejects.toMatchObject({ code: 'ownership_lost' });
    await expect(lostAnswer('ow_commit_assistant', () => storage.commitAssistantMessage(turnId, answer('late'), usage, 0, { planUnfinishedStepCount: null }))).rejects.toMatchObject({
      code: 'ownership_lost',
    });
    await expect(lostAnswer('ow_begin_turn', () => begin(sessionId, uid('turn'), [user('late')]))).rejects.toMatchObject({ code: 'ownership_lost' });
    expect(await direct.listMessages(sessionId)).toEqual(before);
    expect(await direct.getTurn(turnId)).toMatchObject({ status: 'running' });
    fence.refusals.length = 0;
  });

  it('a message id stored with other content is not taken for the lost fact: the repeat fails typed', async () => {
    const { sessionId } = await leasedSession();
    const turnId = uid('turn');
    await begin(sessionId, turnId, [user('hello')]);
    const taken = toolResult('c9');
    await direct.commitToolResult(turnId, taken);
    // The same id, another content, and the answer (its key's refusal) lost: the repeat meets the key
    // and must not answer the other row as this fact's.
    const other: NewMessage = { ...taken, content: [{ type: 'tool_result', callId: 'c9', status: 'failed', text: 'other' }] };
    const cuts = proxy.cuts;
    proxy.cutAfterAnswer('ow_commit_tool_result');
    await expect(storage.commitToolResult(turnId, other)).rejects.toMatchObject({ code: 'persistence_error', message: expect.stringContaining('already stored with other content') });
    expect(proxy.cuts).toBe(cuts + 1);
    expect((await direct.listMessages(sessionId)).map((m) => m.content)).toEqual([expect.anything(), taken.content]);
  });
});

describe('the lease connection died unnoticed before a renewal, on a Postgres server', () => {
  it('the renewal runs again at once on a fresh connection: the leases are renewed, not left to expire', async () => {
    const url = await createTestDatabase();
    const application = `lease_victim_${Date.now()}`;
    const storage = postgresStorage({ connectionString: url, max: 2, pool: { application_name: application } });
    try {
      await storage.migrate();
      const sessionId = uid('ses');
      await storage.createSession({ id: sessionId, workingDirectory: '/work' });
      const acquired = await storage.leases.acquire(sessionId, 'owner_r', 2_000);
      if (acquired.type !== 'acquired') throw new Error('lease not acquired');
      // Synchronous, so that the pool has not read the backends' goodbye when the renewal is sent.
      const killed = execFileSync(
        'psql',
        [inject('databaseUrl'), '-Atc', `SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity WHERE application_name = '${application}'`],
        { encoding: 'utf8' },
      );
      expect(Number(killed.trim())).toBeGreaterThan(0);
      expect(await storage.leases.renew('owner_r', [sessionId], 60_000)).toEqual([{ sessionId, token: acquired.token }]);
      const { rows } = await storage.db.query<{ left: number }>(
        `SELECT extract(epoch FROM expires_at - now())::float8 AS left FROM session_leases WHERE session_id = $1`,
        [sessionId],
      );
      expect(rows[0]!.left).toBeGreaterThan(30);
    } finally {
      await storage.close();
    }
  });
});
