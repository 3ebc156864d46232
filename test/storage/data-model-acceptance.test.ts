/**
 * Data-model acceptance items of reference §9.6 that the contract and check-form suites did not show
 * (branch audit-b), on PGlite and a real Postgres server: a checkpoint only names rows of its own
 * session; `response_message_id` only on model calls; a referenced payload body cannot be deleted;
 * a span whose parent is missing is still stored; raw messages survive compaction and rewind.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NewCheckpoint } from '../../src/storage/storage.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { backends } from '../support/databases.js';
import { beginRunningTurn } from '../support/storage-fixtures.js';

let counter = 0;
const uid = (prefix: string) => `${prefix}_${(counter += 1)}_${Math.random().toString(36).slice(2, 8)}`;

describe.each(backends)('data model acceptance (reference §9.6) on $name', (backend) => {
  let storage: SqlSessionStorage;
  beforeAll(async () => {
    storage = await backend.create();
    await storage.migrate();
  });
  afterAll(async () => {
    await storage?.close();
  });

  /** A session with one finished turn; returns its ids and its user message id. */
  async function finishedSession(): Promise<{ sessionId: string; turnId: string; userMessageId: string }> {
    const { sessionId, turnId } = await beginRunningTurn(storage);
    await storage.finishTurn(turnId, { status: 'completed', planUnfinishedStepCount: null });
    const userMessageId = (await storage.listMessages(sessionId)).find((m) => m.role === 'user')!.id;
    return { sessionId, turnId, userMessageId };
  }

  function checkpoint(sessionId: string, fields: Partial<NewCheckpoint> & Pick<NewCheckpoint, 'lastUserMessageId'>): NewCheckpoint {
    return {
      id: uid('cp'),
      sessionId,
      kind: 'manual',
      sourceMessageCount: 1,
      resolvedModelName: 'm',
      summary: 'summary',
      runtimeState: { schemaVersion: 1, editedPaths: [], extensions: {}, warnings: [] },
      runtimeReminder: '<system_reminder format_version="1">\nnothing\n</system_reminder>',
      triggerTurnId: null,
      parentCompactionId: null,
      inputTokens: null,
      outputTokens: null,
      ...fields,
    };
  }

  it("a checkpoint's replayed user message, trigger turn and parent checkpoint must all be in its own session; a refused one writes nothing", async () => {
    const a = await finishedSession();
    const b = await finishedSession();
    const own = await storage.insertCheckpoint(checkpoint(a.sessionId, { lastUserMessageId: a.userMessageId }));
    const foreignCheckpoint = await storage.insertCheckpoint(checkpoint(b.sessionId, { lastUserMessageId: b.userMessageId }));

    // Another session's user message as the replayed request.
    await expect(storage.insertCheckpoint(checkpoint(a.sessionId, { lastUserMessageId: b.userMessageId }))).rejects.toMatchObject({
      code: 'persistence_error',
      message: expect.stringContaining('is not a user request'),
    });
    // A rewind to another session's checkpoint.
    await expect(
      storage.insertCheckpoint(checkpoint(a.sessionId, { kind: 'rewind', lastUserMessageId: a.userMessageId, parentCompactionId: foreignCheckpoint.id })),
    ).rejects.toMatchObject({ code: 'persistence_error', message: expect.stringContaining(`is not in session ${a.sessionId}`) });
    // A threshold compaction whose trigger turn is another session's running turn.
    const running = await beginRunningTurn(storage, { sessionId: b.sessionId });
    await expect(
      storage.insertCheckpoint(checkpoint(a.sessionId, { kind: 'threshold', lastUserMessageId: a.userMessageId, triggerTurnId: running.turnId })),
    ).rejects.toMatchObject({ code: 'persistence_error', message: expect.stringContaining('is not the running turn') });
    // The database refuses it too (composite foreign keys), whatever the application checks.
    await expect(
      storage.db.query(`UPDATE conversation_compactions SET kind = 'threshold', trigger_turn_id = $1 WHERE id = $2`, [running.turnId, own.id]),
    ).rejects.toMatchObject({ code: '23503', message: expect.stringContaining('conversation_compactions_trigger_turn_fk') });
    await expect(
      storage.db.query(`UPDATE conversation_compactions SET kind = 'rewind', parent_compaction_id = $1 WHERE id = $2`, [foreignCheckpoint.id, own.id]),
    ).rejects.toMatchObject({ code: '23503', message: expect.stringContaining('conversation_compactions_parent_fk') });
    expect((await storage.listCheckpoints(a.sessionId)).map((c) => c.id)).toEqual([own.id]);
  });

  it('compaction and rewind never delete a raw message', async () => {
    const a = await finishedSession();
    const before = (await storage.listMessages(a.sessionId)).map((m) => m.id);
    const first = await storage.insertCheckpoint(checkpoint(a.sessionId, { lastUserMessageId: a.userMessageId }));
    const next = await beginRunningTurn(storage, { sessionId: a.sessionId });
    await storage.finishTurn(next.turnId, { status: 'completed', planUnfinishedStepCount: null });
    await storage.insertCheckpoint(checkpoint(a.sessionId, { kind: 'rewind', lastUserMessageId: a.userMessageId, parentCompactionId: first.id }));
    const after = (await storage.listMessages(a.sessionId)).map((m) => m.id);
    expect(after.slice(0, before.length)).toEqual(before);
    expect(after.length).toBeGreaterThan(before.length);
  });

  it('response_message_id only on model-call spans; a referenced payload body cannot be deleted; a missing parent span never blocks its child', async () => {
    const a = await finishedSession();
    const assistant = await storage.db.query<{ id: string }>(`SELECT id FROM messages WHERE session_id = $1 LIMIT 1`, [a.sessionId]);
    const messageId = assistant.rows[0]!.id;
    const now = new Date().toISOString();
    const span = (id: string, kind: 'model_call' | 'tool_call' | 'compaction', extra: Record<string, unknown> = {}) =>
      storage.db.query(
        `INSERT INTO trace_spans (id, trace_id, session_id, turn_id, kind, name, status, started_at, response_message_id, provider_call_id)
         VALUES ($1, $2, $3, $4, $5, 'n', 'running', $6, $7, $8)`,
        [id, a.turnId, a.sessionId, a.turnId, kind, now, extra.response ?? null, extra.callId ?? null],
      );
    await span(uid('model'), 'model_call', { response: messageId });
    for (const kind of ['tool_call', 'compaction'] as const) {
      await expect(span(uid(kind), kind, { response: messageId, callId: kind === 'tool_call' ? 'c1' : null })).rejects.toMatchObject({
        code: '23514',
        message: expect.stringContaining('trace_spans_response_message_scoped'),
      });
    }

    // Through the recorder's write path: a child whose parent span was never stored, with a payload.
    const child = uid('orphan');
    const report = await storage.writeTraceSignals([
      {
        type: 'span_started',
        span: { id: child, traceId: a.turnId, sessionId: a.sessionId, turnId: a.turnId, parentSpanId: uid('never-stored'), kind: 'tool_call', name: 'tool.call', status: 'running', startedAt: now, attributes: {}, providerCallId: 'call_x', requestedToolName: 'echo' },
        payloads: [{ slot: 'response', body: { k: child } }],
      },
    ]);
    expect(report).toEqual({ written: 1, failed: 0 });
    const stored = await storage.listTraceSpans({ turnId: a.turnId });
    expect(stored.find((s) => s.id === child)).toMatchObject({ parentSpanId: expect.any(String), status: 'running' });
    const hash = await storage.db.query<{ payload_hash: string }>(`SELECT payload_hash FROM trace_span_payloads WHERE span_id = $1`, [child]);
    expect(hash.rows).toHaveLength(1);
    await expect(storage.db.query(`DELETE FROM trace_payloads WHERE hash = $1`, [hash.rows[0]!.payload_hash])).rejects.toMatchObject({
      // ON DELETE RESTRICT: 23001 on newer servers (PGlite), 23503 on older ones.
      code: expect.stringMatching(/^23(001|503)$/),
      message: expect.stringContaining('trace_payloads'),
    });
  });
});
