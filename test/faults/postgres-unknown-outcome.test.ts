/**
 * A write whose outcome is unknown, through a whole core on a real Postgres server (integrity3): the
 * answer of a fact statement lost after the server committed it (`test/support/wire-cut-proxy.ts`),
 * and pooled connections that died while idle between two steps (killed silently by a middlebox, or
 * ended by `pg_terminate_backend` while the process was busy and had not read the goodbye). Before,
 * each failed the turn with `persistence_error` although the database was healthy and, for a lost
 * answer, had stored the fact; for the final answer the database even said `completed` while the
 * runtime said `failed`. Now the turn goes on: the tool ran once, its result is stored once, the
 * turn ends `completed` in the database and in the runtime, and the host hears one end.
 */
import { execFileSync } from 'node:child_process';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { harness, type Harness } from '../support/harness.js';
import { assertStoredInvariants } from '../support/invariants.js';
import { spyTool, within } from '../support/faults.js';
import { startWireCutProxy, type WireCutProxy } from '../support/wire-cut-proxy.js';
import { useProxiedPostgres } from '../support/proxied-postgres.js';

const timeouts = { statementMs: 2_000, answerMs: 3_000, connectMs: 3_000 };
const BOUNDED_MS = 15_000;


const oneCall = [{ toolCalls: [{ name: 'spy', arguments: { n: 1 }, callId: 'spy_1' }] }, { text: 'done' }];

/** The turn ended once, completed, for the host: one `turn_finished` of this turn. */
function finishedUpdates(h: Harness, turnId: string) {
  return h.updates.filter((u) => u.update.type === 'turn_finished' && u.turnId === turnId).map((u) => (u.update as { outcome: unknown }).outcome);
}

async function assertOneResult(direct: SqlSessionStorage, h: Harness, turnId: string): Promise<void> {
  const stored = await assertStoredInvariants(direct, h.session.sessionId);
  expect(stored.messages.filter((m) => m.turnId === turnId && m.role === 'tool').map((m) => m.providerCallId)).toEqual(['spy_1']);
  expect(await direct.getTurn(turnId)).toMatchObject({ status: 'completed', toolCallCount: 1, modelCallCount: 2, modelSubmissionCount: 2 });
  expect(finishedUpdates(h, turnId)).toEqual([{ status: 'completed', finalText: 'done' }]);
}

describe('the answer of a fact statement is lost after its commit', () => {
  const bed = useProxiedPostgres(startWireCutProxy);
  let proxy: WireCutProxy;
  let storage: SqlSessionStorage;
  let direct: SqlSessionStorage;

  beforeAll(() => {
    ({ proxy, direct } = bed);
    storage = bed.open({ max: 4, timeouts });
  });

  it('the tool result: the turn goes on and completes, the tool ran once, its result is stored once', async () => {
    const ran: number[] = [];
    const h = await harness(storage, oneCall, { tools: [spyTool(ran, () => proxy.cutAfterAnswer('ow_commit_tool_result'))], ownership: { leaseMs: 60_000 } });
    const cuts = proxy.cuts;
    const { turnId, outcome } = await within(BOUNDED_MS, 'the turn whose result answer is lost', h.run('go'));
    expect(proxy.cuts).toBe(cuts + 1);
    expect(outcome).toEqual({ status: 'completed', finalText: 'done' });
    expect(ran).toEqual([1]);
    await assertOneResult(direct, h, turnId);
    expect(h.session.status()).toEqual({ type: 'idle' });
  });

  it('the final answer that also ends the turn: completed in the database and in the runtime, one end published', async () => {
    const h = await harness(storage, [{ text: 'the answer' }, { text: 'the answer' }], { ownership: { leaseMs: 60_000 } });
    proxy.cutAfterAnswer('ow_commit_assistant');
    const cuts = proxy.cuts;
    const { turnId, outcome } = await within(BOUNDED_MS, 'the turn whose final answer is lost', h.run('ask'));
    expect(proxy.cuts).toBe(cuts + 1);
    expect(outcome).toEqual({ status: 'completed', finalText: 'the answer' });
    expect(await direct.getTurn(turnId)).toMatchObject({ status: 'completed', modelCallCount: 1, errorCode: null });
    expect(finishedUpdates(h, turnId)).toEqual([{ status: 'completed', finalText: 'the answer' }]);
    const stored = await assertStoredInvariants(direct, h.session.sessionId);
    expect(stored.messages.filter((m) => m.role === 'assistant').length).toBe(1);
    // The answer's tokens were counted once: as much as the same answer's in a turn with no fault.
    const next = await h.run('again');
    expect(next.outcome).toEqual({ status: 'completed', finalText: 'the answer' });
    const [first, second] = [await direct.getTurn(turnId), await direct.getTurn(next.turnId)];
    expect(first!.outputTokens).toBeGreaterThan(0);
    expect(first!.outputTokens).toBe(second!.outputTokens);
    expect(h.session.status()).toEqual({ type: 'idle' });
  });

  it('the final answer committed, and its repeat fails for another reason: the runtime reads the turn back and reports it completed', async () => {
    const h = await harness(storage, [{ text: 'the answer' }], { ownership: { leaseMs: 60_000 } });
    // Once the answer is cut, message writes are locked out (EXCLUSIVE allows reads, not writes) for
    // longer than the statement bound: the repeat fails with the server's cancel, a known outcome,
    // and never reaches its read-back. Only the runtime's own look at the turn can tell.
    const locker = new pg.Client({ connectionString: bed.url });
    await locker.connect();
    await locker.query('BEGIN');
    let locked!: Promise<unknown>;
    proxy.cutAfterAnswer('ow_commit_assistant', () => {
      locked = locker.query('LOCK TABLE messages IN EXCLUSIVE MODE');
    });
    try {
      const turnId = await h.start('ask');
      const outcome = await within(BOUNDED_MS, 'the turn whose answer repeat fails', h.session.waitForTurn(turnId));
      await locked;
      expect(outcome).toEqual({ status: 'completed', finalText: 'the answer' });
      expect(finishedUpdates(h, turnId)).toEqual([{ status: 'completed', finalText: 'the answer' }]);
      await locker.query('COMMIT');
      expect(await direct.getTurn(turnId)).toMatchObject({ status: 'completed', errorCode: null });
      expect(h.session.status()).toEqual({ type: 'idle' });
    } finally {
      await locker.end().catch(() => undefined);
    }
  });

  it('the begin of the turn: one turn row, one user message, the turn completes', async () => {
    const h = await harness(storage, [{ text: 'begun' }], { ownership: { leaseMs: 60_000 } });
    proxy.cutAfterAnswer('ow_begin_turn');
    const cuts = proxy.cuts;
    const { turnId, outcome } = await within(BOUNDED_MS, 'the turn whose begin answer is lost', h.run('hello'));
    expect(proxy.cuts).toBe(cuts + 1);
    expect(outcome).toEqual({ status: 'completed', finalText: 'begun' });
    const stored = await assertStoredInvariants(direct, h.session.sessionId);
    expect(stored.turns.map((t) => [t.id, t.status])).toEqual([[turnId, 'completed']]);
    expect(stored.messages.filter((m) => m.role === 'user').length).toBe(1);
  });
});

describe('pooled connections died while idle between two steps', () => {
  const bed = useProxiedPostgres(startWireCutProxy);
  let proxy: WireCutProxy;
  let direct: SqlSessionStorage;

  beforeAll(() => {
    ({ proxy, direct } = bed);
  });

  it('killed silently by a middlebox while the tool ran: the result write succeeds on a fresh connection, the tool ran once', async () => {
    // A pool of two: at most one lane and one spare connection, both dead after the cut.
    const storage = bed.open({ max: 2, timeouts });
    const ran: number[] = [];
    const h = await harness(storage, oneCall, { tools: [spyTool(ran, () => proxy.severSilently())] });
    const { turnId, outcome } = await within(BOUNDED_MS, 'the turn whose connections died', h.run('go'));
    expect(outcome).toEqual({ status: 'completed', finalText: 'done' });
    expect(ran).toEqual([1]);
    await assertOneResult(direct, h, turnId);
  });

  it('ended by pg_terminate_backend while the process was busy: the FATAL is the next write answer, and the write succeeds on a fresh connection', async () => {
    const application = `victim_${Date.now()}`;
    const storage = bed.openDirect({ max: 2, timeouts, pool: { application_name: application } });
    const ran: number[] = [];
    const admin = inject('databaseUrl');
    // Synchronous: the event loop does not run while the backends end, so the pool has not read their
    // goodbye when the next write is given one of them (a busy process, or a restart it did not see).
    const terminate = () =>
      execFileSync('psql', [admin, '-Atc', `SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity WHERE application_name = '${application}'`], { encoding: 'utf8' });
    let killed = '';
    const h = await harness(storage, oneCall, { tools: [spyTool(ran, () => (killed = terminate().trim()))] });
    const { turnId, outcome } = await within(BOUNDED_MS, 'the turn whose connections were terminated', h.run('go'));
    expect(Number(killed)).toBeGreaterThan(0);
    expect(outcome).toEqual({ status: 'completed', finalText: 'done' });
    expect(ran).toEqual([1]);
    await assertOneResult(direct, h, turnId);
  });
});
