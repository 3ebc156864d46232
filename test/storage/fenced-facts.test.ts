/**
 * Issue 15 merged with issue 14: the single fact statements of a step (`step-sql.ts`) carry the
 * lease fence in the same statement. Attacks through the storage API a core uses, on PGlite and a
 * real Postgres server: a write under a lease this core no longer holds must be refused with
 * `ownership_lost` and write nothing, still in one statement (no extra round trip on success).
 *
 * The turn-keyed attack releases the lease while the turn still runs: a takeover also ends the turn
 * (`interrupted`), which the status check alone would refuse; only the fence refuses a write to a
 * running turn whose lease is gone. The session-keyed attack is a stale owner beginning a turn after
 * another owner took the session over.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NewMessage } from '../../src/protocol/content.js';
import type { WriteFence } from '../../src/storage/fence.js';
import { postgresStorage } from '../../src/storage/postgres.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { backends, createTestDatabase } from '../support/databases.js';
import { countRoundTrips, uid, userMessage as user, toolResultMessage as toolResult, recordStatementNames } from '../support/storage-fixtures.js';

function assistant(callId: string): NewMessage {
  return { id: uid('msg'), role: 'assistant', kind: 'normal', content: [{ type: 'tool_call', callId, name: 'echo', arguments: '{}' }] };
}

const usage = { inputTokens: 10, outputTokens: 5, cachedInputTokens: 1, reasoningTokens: 2 };
const LEASE_MS = 60_000;

/** A core's fence as the lease keeper is one: the tokens it was given, and the refusals it heard. */
function testFence(ownerId: string): WriteFence & { tokens: Map<string, number>; refusals: Array<{ sessionId: string; token: number | null }> } {
  const tokens = new Map<string, number>();
  const refusals: Array<{ sessionId: string; token: number | null }> = [];
  return { ownerId, tokens, refusals, tokenOf: (id) => tokens.get(id), refused: (sessionId, token) => refusals.push({ sessionId, token }) };
}

function begin(storage: SqlSessionStorage, sessionId: string, turnId: string, messages: NewMessage[]) {
  return storage.beginTurn({ turnId, sessionId, clientRequestId: uid('req'), modelId: 'scripted/m', resolvedProviderId: 'scripted', resolvedModelName: 'm', appVersion: 'test', messages });
}

describe.each(backends)('fenced fact statements on $name', (backend) => {
  let storage: SqlSessionStorage;
  let fence: ReturnType<typeof testFence>;

  beforeAll(async () => {
    storage = await backend.create();
    await storage.migrate();
    fence = testFence(uid('owner_a'));
    storage.attachFence(fence);
  });
  afterAll(async () => {
    await storage.close();
  });

  /** A session leased to `fence`, with a running turn begun under its token. */
  async function leasedTurn(): Promise<{ sessionId: string; turnId: string; token: number }> {
    const sessionId = uid('ses');
    await storage.createSession({ id: sessionId, workingDirectory: '/work' });
    const acquired = await storage.leases.acquire(sessionId, fence.ownerId, LEASE_MS);
    if (acquired.type !== 'acquired') throw new Error(`lease not acquired: ${acquired.type}`);
    fence.tokens.set(sessionId, acquired.token);
    const turnId = uid('turn');
    await begin(storage, sessionId, turnId, [user('hello')]);
    return { sessionId, turnId, token: acquired.token };
  }

  async function leaseTokenOf(turnId: string): Promise<number | null> {
    const { rows } = await storage.db.query<{ lease_token: unknown }>('SELECT lease_token FROM turns WHERE id = $1', [turnId]);
    return rows[0]?.lease_token === null ? null : Number(rows[0]!.lease_token);
  }

  const counted = (fn: () => Promise<unknown>) => countRoundTrips(storage, fn);

  it('under a held lease each fact is still one statement, and the turn records the token it began under', async () => {
    const { sessionId, turnId, token } = await leasedTurn();
    expect(await leaseTokenOf(turnId)).toBe(token);
    const one = { queries: 1, transactions: 0 };
    expect(await counted(() => storage.recordModelCallStart(turnId, 1))).toEqual(one);
    expect(await counted(() => storage.commitAssistantMessage(turnId, assistant('c1'), usage, 1))).toEqual(one);
    expect(await counted(() => storage.commitToolResult(turnId, toolResult('c1')))).toEqual(one);
    expect(await counted(() => storage.appendTurnMessages(turnId, [user('steer')]))).toEqual(one);
    const plan = { explanation: null, steps: [{ step: 'a', status: 'pending' as const }], updatedAt: new Date().toISOString() };
    expect(await counted(() => storage.commitPlanUpdate(turnId, plan, toolResult('c2')))).toEqual(one);
    expect(await counted(() => storage.finishTurn(turnId, { status: 'completed', planUnfinishedStepCount: 1 }))).toEqual(one);
    const next = uid('turn');
    expect(await counted(() => begin(storage, sessionId, next, [user('a'), user('b')]))).toEqual(one);
    expect(await leaseTokenOf(next)).toBe(token);
    expect((await storage.listMessages(sessionId)).map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'user', 'tool', 'user', 'user']);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'completed', modelCallCount: 1, toolCallCount: 1, inputTokens: 10 });
    expect(fence.refusals).toEqual([]);
  });

  it('a running turn whose lease is gone takes no fact: every write is ownership_lost and nothing lands', async () => {
    const { sessionId, turnId, token } = await leasedTurn();
    await storage.recordModelCallStart(turnId, 1);
    await storage.leases.release(sessionId, fence.ownerId, token);
    const before = await storage.listMessages(sessionId);
    const turnBefore = await storage.getTurn(turnId);
    const plan = { explanation: 'late', steps: [{ step: 'a', status: 'pending' as const }], updatedAt: new Date().toISOString() };
    const attempts: Array<() => Promise<unknown>> = [
      () => storage.recordModelCallStart(turnId, 2),
      () => storage.commitAssistantMessage(turnId, assistant('c1'), usage, 1),
      // A final answer that would end the turn in its own statement: neither the answer nor the end lands.
      () => storage.commitAssistantMessage(turnId, { id: uid('msg'), role: 'assistant', kind: 'normal', content: [{ type: 'text', text: 'late' }] }, usage, 0, { planUnfinishedStepCount: null }),
      () => storage.commitToolResult(turnId, toolResult('c1')),
      // A result that reserves the next model call: neither the result nor the counters land.
      () => storage.commitToolResult(turnId, toolResult('c3'), 2),
      () => storage.commitPlanUpdate(turnId, plan, toolResult('c2')),
      () => storage.appendTurnMessages(turnId, [user('late')]),
      () => storage.finishTurn(turnId, { status: 'completed', planUnfinishedStepCount: 0 }),
      // An end that would take back a reserved call moves no counter either.
      () => storage.finishTurn(turnId, { status: 'cancelled', planUnfinishedStepCount: null, unmadeModelCall: 1 }),
    ];
    for (const attempt of attempts) {
      await expect(attempt()).rejects.toMatchObject({ code: 'ownership_lost', details: { sessionId } });
    }
    expect(await storage.listMessages(sessionId)).toEqual(before);
    expect(await storage.loadSessionTurnPlans(sessionId)).toEqual([]);
    // Still running (nothing corrected it), with not one counter moved.
    expect(await storage.getTurn(turnId)).toEqual(turnBefore);
    expect(turnBefore).toMatchObject({ status: 'running', modelSubmissionCount: 1, toolCallCount: 0, inputTokens: null });
    expect(fence.refusals).toEqual(Array(attempts.length).fill({ sessionId, token }));
    fence.refusals.length = 0;
    // The session's CLI settings (a write main added beside the facts) are fenced the same way.
    await expect(storage.setClientSettings(sessionId, { model: 'late' })).rejects.toMatchObject({ code: 'ownership_lost' });
    expect(await storage.getClientSettings(sessionId)).toBeNull();
    fence.refusals.length = 0;
  });

  it('a stale owner cannot begin a turn after another owner took the session over; the new owner can', async () => {
    const sessionId = uid('ses');
    await storage.createSession({ id: sessionId, workingDirectory: '/work' });
    const mine = await storage.leases.acquire(sessionId, fence.ownerId, LEASE_MS);
    if (mine.type !== 'acquired') throw new Error('lease not acquired');
    fence.tokens.set(sessionId, mine.token);
    // What a pause past the lease leaves behind: expired, and another process acquires it.
    await storage.db.query(`UPDATE session_leases SET expires_at = now() - interval '1 second' WHERE session_id = $1`, [sessionId]);
    const other = testFence(uid('owner_b'));
    const theirs = await storage.leases.acquire(sessionId, other.ownerId, LEASE_MS);
    expect(theirs).toMatchObject({ type: 'acquired', token: mine.token + 1 });

    const stale = uid('turn');
    await expect(begin(storage, sessionId, stale, [user('stale')])).rejects.toMatchObject({ code: 'ownership_lost', details: { sessionId } });
    // A turn without messages has no returned row to tell success from refusal: refused just the same.
    await expect(begin(storage, sessionId, uid('turn'), [])).rejects.toMatchObject({ code: 'ownership_lost' });
    expect(await storage.getTurn(stale)).toBeNull();
    expect(await storage.listTurns(sessionId)).toEqual([]);
    expect(await storage.listMessages(sessionId)).toEqual([]);
    expect(fence.refusals).toEqual([
      { sessionId, token: mine.token },
      { sessionId, token: mine.token },
    ]);
    fence.refusals.length = 0;

    // The new owner's fence (newest token) writes; an empty turn is stored and answers no message.
    other.tokens.set(sessionId, theirs.type === 'acquired' ? theirs.token : -1);
    storage.attachFence(other);
    try {
      const fresh = uid('turn');
      expect(await begin(storage, sessionId, fresh, [])).toEqual([]);
      expect(await leaseTokenOf(fresh)).toBe(mine.token + 1);
      expect(await storage.getTurn(fresh)).toMatchObject({ status: 'running' });
    } finally {
      storage.detachFence(other);
    }
  });
});

describe('fenced fact statements on a Postgres server', () => {
  it('the fenced texts are prepared under names of their own; a storage without a fence keeps the plain ones', async () => {
    const url = await createTestDatabase();
    const fenced = postgresStorage({ connectionString: url, max: 1 });
    const { names, restore } = recordStatementNames();
    try {
      await fenced.migrate();
      const fence = testFence('owner_named');
      fenced.attachFence(fence);
      const sessionId = uid('ses');
      await fenced.createSession({ id: sessionId, workingDirectory: '/work' });
      const acquired = await fenced.leases.acquire(sessionId, fence.ownerId, LEASE_MS);
      if (acquired.type === 'acquired') fence.tokens.set(sessionId, acquired.token);
      const turnId = uid('turn');
      await begin(fenced, sessionId, turnId, [user('hi')]);
      await fenced.recordModelCallStart(turnId, 1);
      await fenced.commitAssistantMessage(turnId, assistant('c1'), usage, 1);
      await fenced.commitToolResult(turnId, toolResult('c1'));
      expect(names).toEqual(['ow_create_session', 'ow_lease_acquire_unleased', 'ow_begin_turn_fenced', 'ow_model_call_start_fenced', 'ow_commit_assistant_fenced', 'ow_commit_tool_result_fenced']);
      // Unfenced on the same connection: the plain texts, under their own names.
      fenced.detachFence(fence);
      names.length = 0;
      await fenced.commitToolResult(turnId, toolResult('c2'));
      expect(names).toEqual(['ow_commit_tool_result']);
    } finally {
      restore();
      await fenced.close();
    }
  });
});
