/**
 * The storage contract: the same suite against PGlite and a real Postgres server.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NewMessage } from '../../src/protocol/content.js';
import { loadMigrations } from '../../src/storage/migrate.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { pgliteStorage } from '../../src/storage/pglite.js';
import { backends } from '../support/databases.js';
import { beginRunningTurn } from '../support/storage-fixtures.js';

const CONSTRAINTS = [
  'sessions_id_not_blank', 'sessions_title_not_blank', 'sessions_working_directory_not_blank', 'sessions_status_valid',
  'sessions_subagent_fields_consistent', 'sessions_task_name_format', 'sessions_spawn_not_self',
  'sessions_tool_result_pruned_through_positive', 'sessions_sandbox_mode_valid', 'sessions_sandbox_mode_origin_valid',
  'turns_id_not_blank', 'turns_client_request_not_blank', 'turns_sequence_positive', 'turns_provider_not_blank',
  'turns_model_not_blank', 'turns_app_version_not_blank', 'turns_status_valid', 'turns_counts_non_negative',
  'turns_model_submission_covers_logical_calls', 'turns_tokens_non_negative', 'turns_terminal_time_valid',
  'turns_end_after_start', 'turns_id_session', 'turns_session_sequence', 'turns_client_request', 'turns_plan_unfinished_non_negative',
  'messages_turn_session_fk', 'messages_id_not_blank', 'messages_sequence_positive', 'messages_role_valid', 'messages_kind_valid',
  'messages_content_is_array', 'messages_content_format_positive', 'messages_turn_required', 'messages_tool_identity_valid',
  'messages_session_sequence',
  'conversation_compactions_id_not_blank', 'conversation_compactions_sequence_positive',
  'conversation_compactions_message_sequence_non_negative', 'conversation_compactions_replacement_covers_source',
  'conversation_compactions_source_count_positive', 'conversation_compactions_checkpoint_format_non_negative',
  'conversation_compactions_kind_valid', 'conversation_compactions_summary_format_non_negative',
  'conversation_compactions_last_user_pair', 'conversation_compactions_last_user_within_source',
  'conversation_compactions_model_not_blank', 'conversation_compactions_summary_not_blank',
  'conversation_compactions_runtime_state_is_object', 'conversation_compactions_runtime_reminder_format_positive',
  'conversation_compactions_runtime_reminder_not_blank', 'conversation_compactions_tokens_non_negative',
  'conversation_compactions_trigger_shape', 'conversation_compactions_parent_shape', 'conversation_compactions_session_sequence',
  'conversation_compactions_id_session_unique', 'conversation_compactions_trigger_turn_fk', 'conversation_compactions_parent_fk',
  'trace_spans_trace_not_blank', 'trace_spans_turn_session_fk', 'trace_spans_kind_valid', 'trace_spans_status_valid',
  'trace_spans_tool_columns_scoped', 'trace_spans_terminal_time_valid', 'trace_spans_end_after_start',
  'trace_spans_tokens_non_negative', 'trace_spans_response_message_scoped', 'trace_spans_attributes_is_object',
  'trace_span_payloads_truncation_shape', 'turn_plans_steps_is_array',
];

const INDEXES = [
  'idx_sessions_status_updated', 'idx_sessions_default_model', 'uq_sessions_parent_task_name', 'idx_sessions_parent',
  'uq_turns_one_running_per_session', 'uq_messages_tool_result',
  'idx_conversation_compactions_session_sequence', 'idx_trace_spans_session_turn_started',
  'idx_trace_span_payloads_hash', 'uq_trace_annotations_target',
  'idx_trace_annotations_session_created',
];

/**
 * Listed by reference §9.1 but exact duplicates of the unique constraints messages_session_sequence
 * and turns_session_sequence; migration 0004 drops them (issue 14: one index entry less per message).
 */
const DROPPED_DUPLICATE_INDEXES = ['idx_turns_session_sequence', 'idx_messages_session_sequence'];

/**
 * Also listed by reference §9.1, dropped by migration 0007: no statement reads trace spans by trace id
 * (idx_trace_spans_trace_started; the step-writes test checks the reads still use an index), and
 * turn_plans_turn_id_idx duplicates turn_plans' primary key. Migration 0008 replaces the session and
 * the turn index of trace spans by one (session_id, turn_id, started_at) that serves both reads
 * (test/storage/trace-batch.test.ts checks the turn trace and the cascades use it).
 */
const DROPPED_UNUSED_INDEXES = ['idx_trace_spans_trace_started', 'turn_plans_turn_id_idx', 'idx_trace_spans_session_started', 'idx_trace_spans_turn_started'];

const TABLES = [
  'sessions', 'turns', 'messages', 'conversation_compactions', 'trace_spans', 'trace_payloads', 'trace_span_payloads',
  'trace_annotations', 'turn_plans', 'skill_status', 'openwork_migrations', 'session_leases',
];

function user(id: string, text: string): NewMessage {
  return { id, role: 'user', kind: 'normal', content: [{ type: 'text', text }] };
}

let counter = 0;
function uid(prefix: string): string {
  counter += 1;
  return `${prefix}_${counter}_${Math.random().toString(36).slice(2, 8)}`;
}

// The contract's PGlite runs initdb and every migration from scratch; the other suites start from
// the seed the test set-up builds (test/support/global-setup.ts), as a built package does.
const fromScratch = backends.map((b) => (b.name === 'pglite' ? { ...b, create: async () => pgliteStorage({ seed: null }) } : b));

describe.each(fromScratch)('storage contract on $name', (backend) => {
  let storage: SqlSessionStorage;

  beforeAll(async () => {
    storage = await backend.create();
  });
  afterAll(async () => {
    await storage.close();
  });

  async function session(): Promise<string> {
    const id = uid('ses');
    await storage.createSession({ id, workingDirectory: '/work' });
    return id;
  }

  async function turn(sessionId: string, extra: NewMessage[] = []): Promise<string> {
    return (await beginRunningTurn(storage, { sessionId, messages: extra })).turnId;
  }

  it('migrations create every table, named constraint and index, and a second run applies nothing', async () => {
    const first = await storage.migrate();
    expect(first.applied).toEqual((await loadMigrations()).map((m) => m.id));
    const second = await storage.migrate();
    expect(second.applied).toEqual([]);
    expect(second.alreadyApplied).toEqual(first.applied);
    const tables = await storage.db.query<{ table_name: string }>(`SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'`);
    expect(tables.rows.map((r) => r.table_name).sort()).toEqual([...TABLES].sort());
    const constraints = await storage.db.query<{ conname: string }>(`SELECT conname FROM pg_constraint`);
    const names = new Set(constraints.rows.map((r) => r.conname));
    expect(CONSTRAINTS.filter((c) => !names.has(c))).toEqual([]);
    const indexes = await storage.db.query<{ indexname: string }>(`SELECT indexname FROM pg_indexes WHERE schemaname = 'public'`);
    const indexNames = new Set(indexes.rows.map((r) => r.indexname));
    expect(INDEXES.filter((i) => !indexNames.has(i))).toEqual([]);
    expect(DROPPED_DUPLICATE_INDEXES.filter((i) => indexNames.has(i))).toEqual([]);
    expect(DROPPED_UNUSED_INDEXES.filter((i) => indexNames.has(i))).toEqual([]);
    const kinds = await storage.db.query<{ def: string }>(
      `SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conname = 'messages_kind_valid'`,
    );
    for (const kind of ['normal', 'skill_instruction', 'agent_message', 'world_state']) expect(kinds.rows[0]!.def).toContain(kind);
    // The mode's origin (beyond §9.1): a root starts at session_default, a sub-agent inherits, a toggle is the user's.
    const root = await storage.createSession({ id: `origin-root-${backend.name}`, workingDirectory: '/w' });
    const child = await storage.createSession({ id: `origin-child-${backend.name}`, workingDirectory: '/w', parentSessionId: root.id, taskName: 'origin', agentRole: 'explorer' });
    expect([root.permissionModeOrigin, child.permissionModeOrigin]).toEqual(['session_default', 'inherited']);
    await storage.setPermissionMode(root.id, 'accept_edits');
    expect(await storage.getSession(root.id)).toMatchObject({ permissionMode: 'accept_edits', permissionModeOrigin: 'user_toggle' });
    await expect(storage.db.query(`UPDATE sessions SET sandbox_mode_origin = 'guess' WHERE id = $1`, [root.id])).rejects.toThrow(/sessions_sandbox_mode_origin_valid/);
    await storage.deleteSession(root.id);
  }, 120_000);

  it('concurrent migrations apply each file exactly once under the advisory lock', async () => {
    if (backend.name === 'pglite') return; // One PGlite instance is one connection; nothing can race.
    const fresh = await backend.create();
    try {
      const reports = await Promise.all([fresh.migrate(), fresh.migrate(), fresh.migrate()]);
      const applied = reports.flatMap((r) => r.applied);
      expect(applied.sort()).toEqual((await loadMigrations()).map((m) => m.id).sort());
      const rows = await fresh.db.query('SELECT id FROM openwork_migrations');
      expect(rows.rowCount).toBe((await loadMigrations()).length);
    } finally {
      await fresh.close();
    }
  });

  it('two writers on one session never collide on message sequences', async () => {
    if (backend.name === 'pglite') return; // One PGlite instance serialises every query already.
    const sessionId = await session();
    const turnId = await turn(sessionId);
    const other = new (storage.constructor as typeof import('../../src/storage/sql-storage.js').SqlSessionStorage)(
      () => new (storage.db.constructor as new (o: { connectionString: string }) => typeof storage.db)({ connectionString: (storage.db as unknown as { pool: { options: { connectionString: string } } }).pool.options.connectionString }),
    );
    try {
      await Promise.all(
        Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? storage : other).appendTurnMessages(turnId, [user(uid('msg'), `w${i}`)])),
      );
      const sequences = (await storage.listMessages(sessionId)).map((m) => m.sequence);
      expect(sequences).toEqual(Array.from({ length: 21 }, (_, i) => i + 1));
    } finally {
      await other.close();
    }
  });

  it('begins a turn in one transaction: turn row, messages in order, last_turn_at', async () => {
    const sessionId = await session();
    const skill: NewMessage = { id: uid('skill'), role: 'user', kind: 'skill_instruction', content: [{ type: 'text', text: '<skill/>' }] };
    const turnId = await turn(sessionId, [skill]);
    const messages = await storage.listMessages(sessionId);
    expect(messages.map((m) => [m.sequence, m.kind, m.turnId])).toEqual([
      [1, 'skill_instruction', turnId],
      [2, 'normal', turnId],
    ]);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'running', sequence: 1, modelCallCount: 0 });
    expect((await storage.getSession(sessionId))!.lastTurnAt).not.toBeNull();
  });

  it('client settings: a host JSON object stored with the session and read back; withTurns lists only sessions with a turn', async () => {
    const withTurn = await session();
    const without = await session();
    await turn(withTurn);
    expect(await storage.getClientSettings(withTurn)).toBeNull();
    expect(await storage.setClientSettings(withTurn, { model: 'm', api: 'chat', baseUrl: null })).toBe(true);
    expect(await storage.getClientSettings(withTurn)).toEqual({ model: 'm', api: 'chat', baseUrl: null });
    expect(await storage.setClientSettings('ses_missing', { model: 'm' })).toBe(false);
    expect(await storage.getClientSettings('ses_missing')).toBeNull();
    // Only a JSON object: the column's CHECK refuses anything else.
    await expect(storage.db.query(`UPDATE sessions SET client_settings = '[1]'::jsonb WHERE id = $1`, [without])).rejects.toThrow(/sessions_client_settings_object/);
    const listed = (await storage.listSessions({ limit: 1000, withTurns: true })).map((s) => s.id);
    expect(listed).toContain(withTurn);
    expect(listed).not.toContain(without);
    expect((await storage.listSessions({ limit: 1000 })).map((s) => s.id)).toContain(without);
  });

  it('refuses a second running turn in one session and rolls the whole start back', async () => {
    const sessionId = await session();
    await turn(sessionId);
    const msgId = uid('msg');
    await expect(
      storage.beginTurn({
        turnId: uid('turn'),
        sessionId,
        clientRequestId: uid('req'),
        modelId: 'a/b',
        resolvedProviderId: 'a',
        resolvedModelName: 'b',
        appVersion: 't',
        messages: [user(msgId, 'second')],
      }),
    ).rejects.toMatchObject({ code: 'persistence_error', sqlState: '23505' });
    expect((await storage.listMessages(sessionId)).some((m) => m.id === msgId)).toBe(false);
  });

  it('keeps counters: GREATEST for logical calls, +1 per submission, tokens and tool calls with the assistant message', async () => {
    const sessionId = await session();
    const turnId = await turn(sessionId);
    await storage.recordModelCallStart(turnId, 1);
    await storage.recordModelCallStart(turnId, 1); // An overflow resubmission of the same logical call.
    const assistant: NewMessage = {
      id: uid('msg'),
      role: 'assistant',
      kind: 'normal',
      content: [
        { type: 'tool_call', callId: 'c1', name: 'echo', arguments: '{}' },
        { type: 'tool_call', callId: 'c2', name: 'echo', arguments: '{}' },
      ],
    };
    await storage.commitAssistantMessage(turnId, assistant, { inputTokens: 10, outputTokens: 5, cachedInputTokens: 2, reasoningTokens: 1 }, 2);
    expect(await storage.getTurn(turnId)).toMatchObject({
      modelCallCount: 1,
      modelSubmissionCount: 2,
      toolCallCount: 2,
      inputTokens: 10,
      outputTokens: 5,
      cachedInputTokens: 2,
      reasoningTokens: 1,
    });
  });

  it('stores one result per provider call per turn', async () => {
    const sessionId = await session();
    const turnId = await turn(sessionId);
    const result = (id: string): NewMessage => ({
      id,
      role: 'tool',
      kind: 'normal',
      content: [{ type: 'tool_result', callId: 'c1', status: 'succeeded', text: 'ok' }],
      providerCallId: 'c1',
      toolName: 'echo',
    });
    await storage.commitToolResult(turnId, result(uid('msg')));
    await expect(storage.commitToolResult(turnId, result(uid('msg')))).rejects.toMatchObject({ sqlState: '23505' });
  });

  it('commits a plan with its tool result atomically, and a failed commit leaves neither', async () => {
    const sessionId = await session();
    const turnId = await turn(sessionId);
    const message = (callId: string): NewMessage => ({
      id: uid('msg'),
      role: 'tool',
      kind: 'normal',
      content: [{ type: 'tool_result', callId, status: 'succeeded', text: 'Plan updated' }],
      providerCallId: callId,
      toolName: 'update_plan',
    });
    const plan = { explanation: 'why', steps: [{ step: 'a', status: 'in_progress' as const }], updatedAt: new Date().toISOString() };
    await storage.commitPlanUpdate(turnId, plan, message('p1'));
    await storage.commitPlanUpdate(turnId, { ...plan, explanation: null, steps: [] }, message('p2'));
    expect(await storage.loadSessionTurnPlans(sessionId)).toEqual([{ turnId, explanation: null, steps: [], updatedAt: expect.any(String) }]);
    // The second message reuses call id p1: the result insert fails, so the plan must not change.
    await expect(storage.commitPlanUpdate(turnId, plan, message('p1'))).rejects.toMatchObject({ code: 'persistence_error' });
    expect((await storage.loadSessionTurnPlans(sessionId))[0]!.steps).toEqual([]);
  });

  it('appends contextual messages with ON CONFLICT (id) DO NOTHING', async () => {
    const sessionId = await session();
    const turnId = await turn(sessionId);
    const agent: NewMessage = { id: 'agent-msg:child:t1:final_answer', role: 'user', kind: 'agent_message', content: [{ type: 'text', text: 'x' }] };
    const first = await storage.appendTurnMessages(turnId, [agent]);
    const again = await storage.appendTurnMessages(turnId, [agent, user(uid('msg'), 'steer')]);
    expect(first).toHaveLength(1);
    expect(again.map((m) => m.kind)).toEqual(['normal']);
    expect((await storage.listMessages(sessionId)).map((m) => m.sequence)).toEqual([1, 2, 3]);
  });

  it('ends a turn once: terminal time checks and the running index are released', async () => {
    const sessionId = await session();
    const turnId = await turn(sessionId);
    expect(await storage.finishTurn(turnId, { status: 'completed', planUnfinishedStepCount: null })).toBe(true);
    expect(await storage.finishTurn(turnId, { status: 'failed', errorCode: 'x', planUnfinishedStepCount: null })).toBe(false);
    const t = (await storage.getTurn(turnId))!;
    expect(t.status).toBe('completed');
    expect(Date.parse(t.endedAt!)).toBeGreaterThanOrEqual(Date.parse(t.startedAt));
    await turn(sessionId); // A new running turn is allowed again.
    await expect(storage.db.query(`UPDATE turns SET ended_at = NULL WHERE id = $1`, [turnId])).rejects.toThrow(/turns_terminal_time_valid/);
  });

  it('interruptTurn closes one running turn and its running spans, and leaves an ended or missing turn alone (issue 13.1)', async () => {
    const sessionId = await session();
    const turnId = await turn(sessionId);
    const startedAt = new Date().toISOString();
    await storage.writeTraceSignals([
      {
        type: 'span_started',
        span: { id: uid('span'), traceId: turnId, sessionId, turnId, parentSpanId: null, kind: 'model_call', name: 'model.call', status: 'running', startedAt, attributes: {} },
      },
    ]);
    const reason = { errorCode: 'persistence_error', errorMessage: 'end not recorded' };
    expect(await storage.interruptTurn(turnId, reason)).toBe(true);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'interrupted', errorCode: 'persistence_error', errorMessage: 'end not recorded' });
    expect((await storage.listTraceSpans({ turnId })).map((s) => [s.status, s.errorCode])).toEqual([['outcome_unknown', 'persistence_error']]);
    expect(await storage.interruptTurn(turnId, reason)).toBe(false);
    expect(await storage.interruptTurn('turn_never_written', reason)).toBe(false);
    const ended = await turn(sessionId);
    await storage.finishTurn(ended, { status: 'completed', planUnfinishedStepCount: null });
    expect(await storage.interruptTurn(ended, reason)).toBe(false);
    expect(await storage.getTurn(ended)).toMatchObject({ status: 'completed' });
  });

  it('getTurnFinalText is the text of the turn\'s last assistant message', async () => {
    const sessionId = await session();
    const turnId = await turn(sessionId);
    expect(await storage.getTurnFinalText(turnId)).toBe('');
    const usage = { inputTokens: 1, outputTokens: 1, cachedInputTokens: 0, reasoningTokens: 0 };
    await storage.commitAssistantMessage(turnId, { id: uid('msg'), role: 'assistant', kind: 'normal', content: [{ type: 'text', text: 'first' }] }, usage, 0);
    await storage.commitAssistantMessage(
      turnId,
      { id: uid('msg'), role: 'assistant', kind: 'normal', content: [{ type: 'reasoning', text: 'hmm' }, { type: 'text', text: 'fin' }, { type: 'text', text: 'al' }] },
      usage,
      0,
    );
    // Two text blocks are two output messages (issue 18.4): the final text shows them as paragraphs.
    expect(await storage.getTurnFinalText(turnId)).toBe('fin\n\nal');
  });

  it('startup correction marks running turns and spans in one transaction with process_restart', async () => {
    const sessionId = await session();
    const turnId = await turn(sessionId);
    const startedAt = new Date().toISOString();
    await storage.writeTraceSignals([
      {
        type: 'span_started',
        span: { id: uid('span'), traceId: turnId, sessionId, turnId, parentSpanId: null, kind: 'model_call', name: 'model.call', status: 'running', startedAt, attributes: {} },
      },
    ]);
    const report = await storage.markRunningInterrupted();
    expect(report.turns).toBeGreaterThanOrEqual(1);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'interrupted', errorCode: 'process_restart' });
    const spans = await storage.listTraceSpans({ turnId });
    expect(spans.map((s) => [s.status, s.errorCode])).toEqual([['outcome_unknown', 'process_restart']]);
    expect(await storage.markRunningInterrupted()).toEqual({ turns: 0, spans: 0 });
  });

  it('writes trace spans through start and end, dedupes payload bodies, truncates oversized ones', async () => {
    // On the block's database (a second one from scratch, initdb and every migration, took 15 s of
    // the 30 s limit at load 9 and reached it at load 10-25): the counts are of this test's spans
    // and bodies, which are unique to it, not of the whole table.
    const capped = new (storage.constructor as typeof import('../../src/storage/sql-storage.js').SqlSessionStorage)(() => storage.db, { tracePayloadMaxBytes: 64 });
    const sessionId = await session();
    const id = (name: string) => `${sessionId}_${name}`;
    const base = { traceId: id('t'), sessionId, turnId: null, parentSpanId: null, kind: 'compaction' as const, name: 'session.compact', startedAt: new Date().toISOString(), attributes: { a: 1 } };
    const report = await capped.writeTraceSignals([
      { type: 'span_started', span: { ...base, id: id('sp1'), status: 'running' }, payloads: [{ slot: 'request', body: { same: sessionId } }] },
      { type: 'span_started', span: { ...base, id: id('sp2'), status: 'running' }, payloads: [{ slot: 'request', body: { same: sessionId } }, { slot: 'response', body: sessionId + 'x'.repeat(500) }] },
      { type: 'span_ended', span: { ...base, id: id('sp1'), status: 'succeeded', endedAt: new Date().toISOString(), attributes: { b: 2 } } },
      { type: 'span_started', span: { ...base, id: id('bad'), sessionId: id('missing'), status: 'running' } },
    ]);
    expect(report).toEqual({ written: 3, failed: 1 });
    const mapped = await storage.db.query<{ payload_hash: string }>('SELECT DISTINCT payload_hash FROM trace_span_payloads WHERE span_id = ANY($1::text[])', [[id('sp1'), id('sp2')]]);
    const hashes = mapped.rows.map((r) => r.payload_hash);
    const bodies = async () => (await storage.db.query('SELECT hash FROM trace_payloads WHERE hash = ANY($1::text[])', [hashes])).rowCount;
    // Three payloads, two of them the same body: two bodies.
    expect(hashes).toHaveLength(2);
    expect(await bodies()).toBe(2);
    const truncated = await storage.db.query<{ truncated: boolean; original_byte_size: number }>(`SELECT truncated, original_byte_size FROM trace_span_payloads WHERE span_id = $1 AND slot = 'response'`, [id('sp2')]);
    expect(truncated.rows[0]).toMatchObject({ truncated: true });
    const spans = await storage.listTraceSpans({ sessionId });
    expect(spans.find((s) => s.id === id('sp1'))).toMatchObject({ status: 'succeeded', attributes: { a: 1, b: 2 } });
    // Deleting the session sweeps the bodies nothing references any more.
    expect(await storage.deleteSession(sessionId)).toBe(true);
    expect(await bodies()).toBe(0);
  });

  /** The payload bodies of this test (bodies are `{ k: '<tag>:<name>' }`), by name. */
  async function bodiesTagged(tag: string): Promise<string[]> {
    const { rows } = await storage.db.query<{ k: string }>(`SELECT body->>'k' AS k FROM trace_payloads WHERE body->>'k' LIKE $1`, [`${tag}:%`]);
    return rows.map((r) => r.k.slice(tag.length + 1)).sort();
  }

  function compactionSpan(id: string, sessionId: string, traceId: string, startedAt = new Date().toISOString()) {
    return { id, traceId, sessionId, turnId: null, parentSpanId: null, kind: 'compaction' as const, name: 'session.compact', status: 'running' as const, startedAt, attributes: {} };
  }

  it('deleting a session sweeps the payload bodies only it referenced, and keeps those another session still uses', async () => {
    const tag = uid('del');
    const body = (name: string) => ({ k: `${tag}:${name}` });
    const [a, b] = [await session(), await session()];
    const [spanA, spanB] = [uid('span'), uid('span')];
    expect(
      await storage.writeTraceSignals([
        { type: 'span_started', span: compactionSpan(spanA, a, uid('t')), payloads: [{ slot: 'request', body: body('shared') }, { slot: 'response', body: body('onlyA') }] },
        { type: 'span_started', span: compactionSpan(spanB, b, uid('t')), payloads: [{ slot: 'request', body: body('shared') }, { slot: 'response', body: body('onlyB') }] },
      ]),
    ).toEqual({ written: 2, failed: 0 });
    expect(await bodiesTagged(tag)).toEqual(['onlyA', 'onlyB', 'shared']);
    expect(await storage.deleteSession(a)).toBe(true);
    // a's own body is gone; the shared one stays because b's span still maps to it.
    expect(await bodiesTagged(tag)).toEqual(['onlyB', 'shared']);
    const mappings = await storage.db.query<{ span_id: string; slot: string }>('SELECT span_id, slot FROM trace_span_payloads WHERE span_id = ANY($1::text[]) ORDER BY slot', [[spanA, spanB]]);
    expect(mappings.rows).toEqual([
      { span_id: spanB, slot: 'request' },
      { span_id: spanB, slot: 'response' },
    ]);
    expect(await storage.deleteSession(b)).toBe(true);
    expect(await bodiesTagged(tag)).toEqual([]);
  });

  it('the startup purge (reference §9.4) deletes expired, unannotated payload mappings and the bodies only they used', async () => {
    const tag = uid('purge');
    const body = (name: string) => ({ k: `${tag}:${name}` });
    const sessionId = await session();
    const id = (name: string) => `${tag}_${name}`;
    const daysAgo = (days: number) => new Date(Date.now() - days * 86_400_000).toISOString();
    const span = (name: string, trace: string, days: number) => compactionSpan(id(name), sessionId, id(trace), daysAgo(days));
    await storage.writeTraceSignals([
      // Expired, unannotated: both mappings go; its own body goes, the shared one stays.
      { type: 'span_started', span: span('old', 'trace_old', 40), payloads: [{ slot: 'request', body: body('old') }, { slot: 'response', body: body('shared') }] },
      { type: 'span_started', span: span('recent', 'trace_recent', 0), payloads: [{ slot: 'request', body: body('shared') }] },
      // Within 30 days: kept by default, purged under a 20-day retention.
      { type: 'span_started', span: span('month', 'trace_month', 29), payloads: [{ slot: 'request', body: body('month') }] },
      // Expired but annotated: on the trace itself, or on another span of the same trace.
      { type: 'span_started', span: span('kept_trace', 'trace_annotated', 40), payloads: [{ slot: 'request', body: body('annotatedTrace') }] },
      { type: 'span_started', span: span('kept_a', 'trace_span_annotated', 40), payloads: [{ slot: 'request', body: body('annotatedSpanTrace') }] },
      { type: 'span_started', span: span('kept_b', 'trace_span_annotated', 40) },
    ]);
    await storage.db.query(
      `INSERT INTO trace_annotations (id, session_id, trace_id, span_id, rating) VALUES ($1, $3, $4, NULL, 'good'), ($2, $3, $5, $6, 'bad')`,
      [id('an1'), id('an2'), sessionId, id('trace_annotated'), id('trace_span_annotated'), id('kept_b')],
    );
    const mappings = async () =>
      (await storage.db.query<{ span_id: string; slot: string }>('SELECT span_id, slot FROM trace_span_payloads WHERE span_id LIKE $1', [`${tag}_%`])).rows
        .map((r) => `${r.span_id.slice(tag.length + 1)}:${r.slot}`)
        .sort();

    expect(await storage.purgeExpiredTracePayloads()).toEqual({ mappings: 2, bodies: 1 });
    expect(await mappings()).toEqual(['kept_a:request', 'kept_trace:request', 'month:request', 'recent:request']);
    expect(await bodiesTagged(tag)).toEqual(['annotatedSpanTrace', 'annotatedTrace', 'month', 'shared']);
    // The spans themselves stay: only their payloads expire.
    expect((await storage.listTraceSpans({ sessionId })).map((s) => s.id.slice(tag.length + 1)).sort()).toEqual(['kept_a', 'kept_b', 'kept_trace', 'month', 'old', 'recent']);
    expect(await storage.purgeExpiredTracePayloads()).toEqual({ mappings: 0, bodies: 0 });

    const shorter = new (storage.constructor as typeof import('../../src/storage/sql-storage.js').SqlSessionStorage)(() => storage.db, { tracePayloadRetentionDays: 20 });
    expect(await shorter.purgeExpiredTracePayloads()).toEqual({ mappings: 1, bodies: 1 });
    expect(await bodiesTagged(tag)).toEqual(['annotatedSpanTrace', 'annotatedTrace', 'shared']);
  });

  it('a retention that is not a positive number of days is refused with configuration_invalid', () => {
    const Storage = storage.constructor as typeof import('../../src/storage/sql-storage.js').SqlSessionStorage;
    for (const days of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => new Storage(() => storage.db, { tracePayloadRetentionDays: days }), String(days)).toThrow(expect.objectContaining({ code: 'configuration_invalid' }));
    }
  });

  it('deleting a session cascades to turns, messages and plans', async () => {
    const sessionId = await session();
    await turn(sessionId);
    expect(await storage.deleteSession(sessionId)).toBe(true);
    expect(await storage.listMessages(sessionId)).toEqual([]);
    expect(await storage.listTurns(sessionId)).toEqual([]);
    expect(await storage.getSession(sessionId)).toBeNull();
  });

  it('guards sub-agent fields, task names and blank ids with CHECK constraints', async () => {
    const parent = await session();
    await expect(storage.createSession({ id: uid('c'), workingDirectory: '/w', parentSessionId: parent })).rejects.toMatchObject({ sqlState: '23514' });
    await expect(
      storage.createSession({ id: uid('c'), workingDirectory: '/w', parentSessionId: parent, taskName: 'Bad-Name', agentRole: 'explorer' }),
    ).rejects.toMatchObject({ sqlState: '23514' });
    await storage.createSession({ id: uid('c'), workingDirectory: '/w', parentSessionId: parent, taskName: 'find_auth', agentRole: 'explorer' });
    await expect(
      storage.createSession({ id: uid('c'), workingDirectory: '/w', parentSessionId: parent, taskName: 'find_auth', agentRole: 'explorer' }),
    ).rejects.toMatchObject({ sqlState: '23505' });
    await expect(storage.createSession({ id: '  ', workingDirectory: '/w' })).rejects.toMatchObject({ sqlState: '23514' });
    expect((await storage.listSessions()).every((s) => s.parentSessionId === null)).toBe(true);
  });
});
