/**
 * Issue 14: the writes of a durable step, on PGlite and a real Postgres server. Each fact is one
 * statement (one round trip, no BEGIN/COMMIT), named for preparation on `pg`; a fact lands whole or
 * not at all; a turn that stopped running takes no fact; the trace's commit mode never leaks onto a
 * fact written later on the same connection.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NewMessage } from '../../src/protocol/content.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { postgresStorage } from '../../src/storage/postgres.js';
import { backends, createTestDatabase } from '../support/databases.js';
import { countRoundTrips, beginRunningTurn, toolResultMessage, uid, userMessage, recordStatementNames } from '../support/storage-fixtures.js';

const user = (text: string): NewMessage => userMessage(text);
const toolResult = toolResultMessage;

function assistant(callId: string, id = uid('msg')): NewMessage {
  return { id, role: 'assistant', kind: 'normal', content: [{ type: 'tool_call', callId, name: 'echo', arguments: '{}' }] };
}

const usage = { inputTokens: 10, outputTokens: 5, cachedInputTokens: 1, reasoningTokens: 2 };

describe.each(backends)('the writes of a step on $name', (backend) => {
  let storage: SqlSessionStorage;

  beforeAll(async () => {
    storage = await backend.create();
    await storage.migrate();
  });
  afterAll(async () => {
    await storage.close();
  });

  const runningTurn = () => beginRunningTurn(storage);

  const counted = (fn: () => Promise<unknown>) => countRoundTrips(storage, fn);

  it('each fact of a step is one statement: no BEGIN/COMMIT round trips', async () => {
    const { sessionId, turnId } = await runningTurn();
    const one = { queries: 1, transactions: 0 };
    expect(await counted(() => storage.recordModelCallStart(turnId, 1))).toEqual(one);
    expect(await counted(() => storage.commitAssistantMessage(turnId, assistant('c1'), usage, 1))).toEqual(one);
    expect(await counted(() => storage.commitToolResult(turnId, toolResult('c1')))).toEqual(one);
    expect(await counted(() => storage.appendTurnMessages(turnId, [user('steer 1'), user('steer 2')]))).toEqual(one);
    const plan = { explanation: null, steps: [{ step: 'a', status: 'pending' as const }], updatedAt: new Date().toISOString() };
    expect(await counted(() => storage.commitPlanUpdate(turnId, plan, toolResult('c2')))).toEqual(one);
    expect(await counted(() => storage.finishTurn(turnId, { status: 'completed', planUnfinishedStepCount: 1 }))).toEqual(one);
    // And a turn's start, with several messages.
    const next = uid('turn');
    const start = () =>
      storage.beginTurn({ turnId: next, sessionId, clientRequestId: uid('req'), modelId: 'scripted/m', resolvedProviderId: 'scripted', resolvedModelName: 'm', appVersion: 'test', messages: [user('a'), user('b')] });
    expect(await counted(start)).toEqual(one);

    // Everything landed, in order, with dense sequences.
    const messages = await storage.listMessages(sessionId);
    expect(messages.map((m) => m.sequence)).toEqual(messages.map((_, i) => i + 1));
    expect(messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'user', 'user', 'tool', 'user', 'user']);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'completed', modelCallCount: 1, modelSubmissionCount: 1, toolCallCount: 1, inputTokens: 10 });
    expect(await storage.loadSessionTurnPlans(sessionId)).toHaveLength(1);
  });

  it('a fact lands whole or not at all: a refused assistant message adds no tokens and no tool calls', async () => {
    const { sessionId, turnId } = await runningTurn();
    const first = assistant('c1');
    await storage.commitAssistantMessage(turnId, first, usage, 1);
    // The same message id again: the message insert fails, so the turn's counters must not move.
    await expect(storage.commitAssistantMessage(turnId, assistant('c9', first.id), usage, 3)).rejects.toMatchObject({ code: 'persistence_error', sqlState: '23505' });
    expect(await storage.getTurn(turnId)).toMatchObject({ toolCallCount: 1, inputTokens: 10, outputTokens: 5 });
    expect((await storage.listMessages(sessionId)).map((m) => m.id)).toHaveLength(2);
    // A plan whose result is refused (a second result for the same call) leaves no plan either.
    await storage.commitToolResult(turnId, toolResult('c1'));
    const plan = { explanation: 'x', steps: [{ step: 'a', status: 'pending' as const }], updatedAt: new Date().toISOString() };
    await expect(storage.commitPlanUpdate(turnId, plan, toolResult('c1'))).rejects.toMatchObject({ sqlState: '23505' });
    expect(await storage.loadSessionTurnPlans(sessionId)).toEqual([]);
  });

  it('a turn that is no longer running takes no fact, and the error says why', async () => {
    const { sessionId, turnId } = await runningTurn();
    await storage.interruptTurn(turnId, { errorCode: 'process_restart', errorMessage: 'another process corrected it' });
    const before = await storage.listMessages(sessionId);
    await expect(storage.commitToolResult(turnId, toolResult('c1'))).rejects.toMatchObject({ code: 'persistence_error', message: expect.stringContaining('is interrupted, not running') });
    await expect(storage.commitAssistantMessage(turnId, assistant('c1'), usage, 1)).rejects.toMatchObject({ code: 'persistence_error' });
    await expect(storage.appendTurnMessages(turnId, [user('late')])).rejects.toMatchObject({ code: 'persistence_error' });
    await expect(storage.recordModelCallStart(turnId, 2)).rejects.toMatchObject({ code: 'persistence_error' });
    await expect(storage.commitToolResult('turn_missing', toolResult('c1'))).rejects.toMatchObject({ message: expect.stringContaining('does not exist') });
    expect(await storage.listMessages(sessionId)).toEqual(before);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'interrupted', inputTokens: null, toolCallCount: 0, modelSubmissionCount: 0 });
  });

  it('appended messages whose ids are stored already are skipped, and the sequences stay dense', async () => {
    const { sessionId, turnId } = await runningTurn();
    const kept = user('once');
    expect(await storage.appendTurnMessages(turnId, [kept])).toHaveLength(1);
    const stored = await storage.appendTurnMessages(turnId, [user('a'), kept, user('b')]);
    expect(stored.map((m) => m.content)).toEqual([[{ type: 'text', text: 'a' }], [{ type: 'text', text: 'b' }]]);
    expect(await storage.appendTurnMessages(turnId, [kept])).toEqual([]);
    const sequences = (await storage.listMessages(sessionId)).map((m) => m.sequence);
    expect(sequences).toEqual([1, 2, 3, 4]);
  });

  it('beginning a turn in a session that does not exist is a typed error and writes nothing', async () => {
    const turnId = uid('turn');
    await expect(
      storage.beginTurn({ turnId, sessionId: 'ses_missing', clientRequestId: uid('req'), modelId: 'scripted/m', resolvedProviderId: 'scripted', resolvedModelName: 'm', appVersion: 'test', messages: [user('x')] }),
    ).rejects.toMatchObject({ code: 'persistence_error', message: expect.stringContaining('does not exist') });
    expect(await storage.getTurn(turnId)).toBeNull();
  });
});

describe('the step on a Postgres server', () => {
  let url: string;
  beforeAll(async () => {
    url = await createTestDatabase();
  });

  it('the trace batch commits without waiting for a flush, and that never leaks onto the connection', async () => {
    // One connection, so every statement below runs on the connection the trace batch used. The test
    // server runs with synchronous_commit off for speed; this connection asks for `on` itself.
    const storage = postgresStorage({ connectionString: url, max: 1, pool: { options: '-c synchronous_commit=on' } });
    try {
      await storage.migrate();
      const sessionId = uid('ses');
      await storage.createSession({ id: sessionId, workingDirectory: '/work' });
      const turnId = uid('turn');
      await storage.beginTurn({ turnId, sessionId, clientRequestId: uid('req'), modelId: 'scripted/m', resolvedProviderId: 'scripted', resolvedModelName: 'm', appVersion: 'test', messages: [user('hi')] });
      await storage.recordModelCallStart(turnId, 1);
      expect((await storage.db.query<{ synchronous_commit: string }>('SHOW synchronous_commit')).rows[0]!.synchronous_commit).toBe('on');
      const startedAt = new Date().toISOString();
      const span = { id: uid('span'), traceId: turnId, sessionId, turnId, parentSpanId: null, kind: 'model_call' as const, name: 'model.call', status: 'running' as const, startedAt, attributes: {} };
      expect(await storage.writeTraceSignals([{ type: 'span_started', span, payloads: [{ slot: 'request', body: { n: 1 } }] }])).toEqual({ written: 1, failed: 0 });
      // The trace's `synchronous_commit = off` was for its own transaction: a fact after it waits for its flush.
      expect((await storage.db.query<{ synchronous_commit: string }>('SHOW synchronous_commit')).rows[0]!.synchronous_commit).toBe('on');
      // The end arrives in a later batch: the stored start is updated, not inserted twice.
      const endedAt = new Date(Date.parse(startedAt) + 5).toISOString();
      await storage.writeTraceSignals([{ type: 'span_ended', span: { ...span, status: 'succeeded', endedAt, attributes: { finishReason: 'stop' } } }]);
      const spans = await storage.listTraceSpans({ turnId });
      expect(spans).toHaveLength(1);
      expect(spans[0]).toMatchObject({ status: 'succeeded', endedAt, attributes: { finishReason: 'stop' } });
    } finally {
      await storage.close();
    }
  });

  it('a fact finds its turn by id on a generic plan, not by reading every running turn through the partial index', async () => {
    // A named statement runs on a generic plan, planned once per connection, often while the tables
    // are new and have no statistics. That plan used to find the turn through
    // uq_turns_one_running_per_session and filter on the id: one row read per running turn of every
    // session, for every fact of every step. 200 sessions with a running turn each, no statistics
    // (autovacuum off on this database's tables), generic plans forced on the one connection.
    const db = await createTestDatabase();
    const storage = postgresStorage({ connectionString: db, max: 1, pool: { options: '-c plan_cache_mode=force_generic_plan' } });
    try {
      await storage.migrate();
      for (const table of ['sessions', 'turns', 'messages']) await storage.db.query(`ALTER TABLE ${table} SET (autovacuum_enabled = false)`);
      await storage.db.query(`INSERT INTO sessions (id, working_directory) SELECT 'gs' || g, '/work' FROM generate_series(1, 200) g`);
      await storage.db.query(
        `INSERT INTO turns (id, session_id, client_request_id, sequence, resolved_provider_id, resolved_model_name, app_version, status)
         SELECT 'gt' || g, 'gs' || g, 'r' || g, 1, 'scripted', 'm', 'test', 'running' FROM generate_series(1, 200) g`,
      );
      // Prepares both statements on the connection, as the runtime does.
      await storage.recordModelCallStart('gt7', 1);
      await storage.commitAssistantMessage('gt7', assistant('c7'), usage, 1);
      await storage.commitToolResult('gt7', toolResult('c7'));
      const plan = async (sql: string) =>
        JSON.stringify((await storage.db.query(`EXPLAIN (FORMAT JSON) EXECUTE ${sql}`)).rows[0]);
      for (const text of [
        `ow_model_call_start('gt9', 1)`,
        `ow_commit_tool_result('gt9', 'm9', 'tool', '[]', 'normal', 'c9', 'echo', 2)`,
        `ow_commit_assistant('gt9', 'a9', 'assistant', '[]', 'normal', NULL, NULL, 0, 0, 0, 0, 0, true, NULL)`,
      ]) {
        const json = await plan(text);
        expect(json).toContain('"Scan Direction"');
        expect(json).not.toContain('uq_turns_one_running_per_session');
      }
    } finally {
      await storage.close();
    }
  });

  it('the step statements are named prepared statements, parsed once per connection', async () => {
    const storage = postgresStorage({ connectionString: url, max: 1 });
    const { names, restore } = recordStatementNames();
    try {
      await storage.migrate();
      const sessionId = uid('ses');
      await storage.createSession({ id: sessionId, workingDirectory: '/work' });
      const turnId = uid('turn');
      await storage.beginTurn({ turnId, sessionId, clientRequestId: uid('req'), modelId: 'scripted/m', resolvedProviderId: 'scripted', resolvedModelName: 'm', appVersion: 'test', messages: [user('hi')] });
      for (let i = 0; i < 2; i += 1) {
        await storage.recordModelCallStart(turnId, i + 1);
        await storage.commitAssistantMessage(turnId, assistant(`c${i}`), usage, 1);
        await storage.commitToolResult(turnId, toolResult(`c${i}`));
      }
      expect(names).toEqual(['ow_create_session', 'ow_begin_turn', ...Array(2).fill(['ow_model_call_start', 'ow_commit_assistant', 'ow_commit_tool_result']).flat()]);
      const prepared = await storage.db.query<{ name: string }>(`SELECT name FROM pg_prepared_statements ORDER BY name`);
      expect(prepared.rows.map((r) => r.name)).toEqual(['ow_begin_turn', 'ow_commit_assistant', 'ow_commit_tool_result', 'ow_create_session', 'ow_model_call_start']);
    } finally {
      restore();
      await storage.close();
    }
  });
});
