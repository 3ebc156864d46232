/**
 * The trace batch's write shapes (issue 14, the trace's cost per step), on PGlite and a real
 * Postgres server: a span that starts and ends within one batch is one inserted row; a span whose
 * start an earlier batch stored is updated by its end; a span this writer does not know to be stored
 * (another process wrote it, or it forgot) still ends right through the one-by-one path; an end whose
 * stored start is gone is inserted whole; spans left open by a crash are still found and corrected.
 * On Postgres, the batch's generic plan reads no trace table from end to end, and it is the plan
 * Postgres keeps (its estimate is no dearer than a custom plan's) on a database with older spans.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SpanData, TraceSignal } from '../../src/protocol/trace-signals.js';
import { postgresStorage } from '../../src/storage/postgres.js';
import { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { backends, createTestDatabase, useBackend } from '../support/databases.js';
import { beginRunningTurn, countRoundTrips, uid } from '../support/storage-fixtures.js';

function modelSpan(sessionId: string, turnId: string, attributes: Record<string, unknown> = { modelCallIndex: 1 }): SpanData {
  return { id: uid('span'), traceId: turnId, sessionId, turnId, parentSpanId: null, kind: 'model_call', name: 'model.call', status: 'running', startedAt: new Date().toISOString(), attributes };
}

function ended(span: SpanData, attributes: Record<string, unknown> = { finishReason: 'stop' }): SpanData {
  return { ...span, status: 'succeeded', endedAt: new Date(Date.parse(span.startedAt) + 3).toISOString(), inputTokens: 7, attributes };
}

const startPayloads = [
  { slot: 'request' as const, body: { messages: [[1, 2]] } },
  { slot: 'system_context' as const, body: { text: 'system' } },
  { slot: 'tool_definitions' as const, body: [{ name: 'echo' }] },
];

describe.each(backends)('the trace batch on $name', (backend) => {
  let storage: SqlSessionStorage;
  useBackend(backend, (s) => (storage = s));

  /** The stored rows of a span and its payload slots. */
  async function stored(spanId: string) {
    const { rows } = await storage.db.query<{ status: string; ended_at: unknown; input_tokens: string | null; attributes: Record<string, unknown> }>(
      'SELECT status, ended_at, input_tokens, attributes FROM trace_spans WHERE id = $1',
      [spanId],
    );
    const slots = (await storage.listTraceSpanPayloads([spanId])).map((p) => p.slot);
    return { rows, slots };
  }

  it('a span that starts and ends within one batch is one inserted row, ended, in one statement', async () => {
    const { sessionId, turnId } = await beginRunningTurn(storage);
    const span = modelSpan(sessionId, turnId);
    const signals: TraceSignal[] = [
      { type: 'span_started', span, payloads: startPayloads },
      { type: 'span_ended', span: ended(span), payloads: [{ slot: 'response', body: { partial: 'text' } }] },
    ];
    const trips = await countRoundTrips(storage, async () => expect(await storage.writeTraceSignals(signals)).toEqual({ written: 2, failed: 0 }));
    // One statement, no transaction: the fast path, not the one-by-one fallback.
    expect(trips).toEqual({ queries: 1, transactions: 0 });
    const { rows, slots } = await stored(span.id);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ status: 'succeeded', attributes: { modelCallIndex: 1, finishReason: 'stop' } });
    expect(Number(rows[0]!.input_tokens)).toBe(7);
    expect(slots).toEqual(['request', 'response', 'system_context', 'tool_definitions']);
  });

  it('a span whose start an earlier batch stored is updated by its end, also in one statement', async () => {
    const { sessionId, turnId } = await beginRunningTurn(storage);
    const span = modelSpan(sessionId, turnId);
    const other = modelSpan(sessionId, turnId, { modelCallIndex: 2 });
    await storage.writeTraceSignals([{ type: 'span_started', span, payloads: startPayloads }]);
    expect((await stored(span.id)).rows[0]).toMatchObject({ status: 'running', ended_at: null });
    // The end, with a new span started and ended in the same batch beside it.
    const trips = await countRoundTrips(storage, async () =>
      expect(
        await storage.writeTraceSignals([
          { type: 'span_ended', span: ended(span, { modelCallIndex: 1, finishReason: 'tool_use' }) },
          { type: 'span_started', span: other },
          { type: 'span_ended', span: ended(other, { modelCallIndex: 2, finishReason: 'stop' }) },
        ]),
      ).toEqual({ written: 3, failed: 0 }),
    );
    expect(trips).toEqual({ queries: 1, transactions: 0 });
    expect((await stored(span.id)).rows).toMatchObject([{ status: 'succeeded', attributes: { modelCallIndex: 1, finishReason: 'tool_use' } }]);
    expect((await stored(span.id)).slots).toEqual(['request', 'system_context', 'tool_definitions']);
    expect((await stored(other.id)).rows).toMatchObject([{ status: 'succeeded', attributes: { modelCallIndex: 2, finishReason: 'stop' } }]);
  });

  it('a span another writer stored still ends right: the batch falls back to the one-by-one upsert and loses nothing', async () => {
    const { sessionId, turnId } = await beginRunningTurn(storage);
    // Another process (its own trace store, its own memory) stored the start.
    const elsewhere = new SqlSessionStorage(() => storage.db);
    const span = modelSpan(sessionId, turnId);
    await elsewhere.writeTraceSignals([{ type: 'span_started', span, payloads: startPayloads }]);
    const fresh = modelSpan(sessionId, turnId, { modelCallIndex: 3 });
    // This writer does not know the start is stored: its end is sent as a new row, which the
    // primary key refuses, and the whole batch is written again one signal at a time.
    const trips = await countRoundTrips(storage, async () =>
      expect(
        await storage.writeTraceSignals([
          { type: 'span_ended', span: ended(span, { modelCallIndex: 1, finishReason: 'stop' }) },
          { type: 'span_started', span: fresh, payloads: startPayloads },
          // The same start's payloads again (a batch sent twice): the fallback keeps the first.
          { type: 'span_started', span, payloads: startPayloads },
        ]),
      ).toEqual({ written: 3, failed: 0 }),
    );
    expect(trips.transactions).toBe(1);
    expect((await stored(span.id)).rows).toMatchObject([{ status: 'succeeded', attributes: { modelCallIndex: 1, finishReason: 'stop' } }]);
    expect((await stored(span.id)).slots).toEqual(['request', 'system_context', 'tool_definitions']);
    expect((await stored(fresh.id)).rows).toMatchObject([{ status: 'running' }]);
    expect((await stored(fresh.id)).slots).toEqual(['request', 'system_context', 'tool_definitions']);
  });

  it('an end whose stored start is gone is inserted whole', async () => {
    const { sessionId, turnId } = await beginRunningTurn(storage);
    const span = modelSpan(sessionId, turnId);
    await storage.writeTraceSignals([{ type: 'span_started', span }]);
    await storage.db.query('DELETE FROM trace_spans WHERE id = $1', [span.id]);
    const trips = await countRoundTrips(storage, async () =>
      expect(await storage.writeTraceSignals([{ type: 'span_ended', span: ended(span) }])).toEqual({ written: 1, failed: 0 }),
    );
    expect(trips).toEqual({ queries: 1, transactions: 0 });
    expect((await stored(span.id)).rows).toMatchObject([{ status: 'succeeded', attributes: { finishReason: 'stop' } }]);
  });

  it('spans a crash left open are found by the running-span lookup and corrected after the restart', async () => {
    const { sessionId, turnId } = await beginRunningTurn(storage);
    const [a, b] = [modelSpan(sessionId, turnId), modelSpan(sessionId, turnId, { modelCallIndex: 2 })];
    const done = modelSpan(sessionId, turnId, { modelCallIndex: 3 });
    await storage.writeTraceSignals([
      { type: 'span_started', span: a, payloads: startPayloads },
      { type: 'span_started', span: done },
      { type: 'span_ended', span: ended(done) },
    ]);
    await storage.writeTraceSignals([{ type: 'span_started', span: b }]);
    // The process dies here. The takeover scan finds the session by its running spans.
    const running = await storage.db.query<{ id: string }>(`SELECT id FROM trace_spans WHERE session_id = $1 AND status = 'running' ORDER BY id`, [sessionId]);
    expect(running.rows.map((r) => r.id)).toEqual([a.id, b.id].sort());
    const restarted = new SqlSessionStorage(() => storage.db);
    expect((await restarted.markRunningInterrupted()).spans).toBeGreaterThanOrEqual(2);
    const spans = await restarted.listTraceSpans({ turnId });
    expect(Object.fromEntries(spans.map((s) => [s.id, [s.status, s.errorCode]]))).toEqual({
      [a.id]: ['outcome_unknown', 'process_restart'],
      [b.id]: ['outcome_unknown', 'process_restart'],
      [done.id]: ['succeeded', null],
    });
  });
});

describe('the trace tables on a Postgres server, on generic plans', () => {
  let storage: SqlSessionStorage;
  let sessionId: string;
  let turnId: string;

  /** The tables a plan reads from end to end (its sequential scans). */
  async function seqScans(sql: string): Promise<string[]> {
    const { rows } = await storage.db.query<{ 'QUERY PLAN': unknown }>(`EXPLAIN (FORMAT JSON) ${sql}`);
    const scanned: string[] = [];
    const walk = (node: Record<string, unknown>) => {
      if (node['Node Type'] === 'Seq Scan') scanned.push(String(node['Relation Name']));
      for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) walk(child);
    };
    walk((rows[0]!['QUERY PLAN'] as Array<{ Plan: Record<string, unknown> }>)[0]!.Plan);
    return scanned.filter((name) => name.startsWith('trace_span'));
  }
  const literal = (value: string) => `'${value.replace(/'/g, "''")}'`;

  beforeAll(async () => {
    // A named statement runs on a generic plan planned once per connection, often while the trace
    // tables are small. Here they hold 20,000 older spans of 200 sessions with a payload mapping
    // each, analysed, and every plan on the one connection is generic.
    storage = postgresStorage({ connectionString: await createTestDatabase(), max: 1, pool: { options: '-c plan_cache_mode=force_generic_plan' } });
    await storage.migrate();
    ({ sessionId, turnId } = await beginRunningTurn(storage));
    await storage.db.query(`INSERT INTO sessions (id, working_directory) SELECT 'old' || g, '/work' FROM generate_series(1, 200) g`);
    await storage.db.query(`INSERT INTO trace_spans (id, trace_id, session_id, kind, name, status, started_at, ended_at)
      SELECT 'old' || g, 'trace-old', 'old' || (g % 200 + 1), 'compaction', 'session.compact', 'succeeded', now(), now() FROM generate_series(1, 20000) g`);
    await storage.db.query(`INSERT INTO trace_payloads (hash, body, byte_size) VALUES ('old', '{}', 2)`);
    await storage.db.query(`INSERT INTO trace_span_payloads (span_id, slot, payload_hash) SELECT id, 'request', 'old' FROM trace_spans WHERE trace_id = 'trace-old'`);
    await storage.db.query('ANALYZE');
  }, 120_000);
  afterAll(async () => {
    await storage?.close();
  });

  it('the batch reads no trace table from end to end, however many spans and mappings are stored', async () => {
    // The batch used to test its rows with anti-joins that read the whole of trace_spans on every write.
    const span = modelSpan(sessionId, turnId);
    // Prepares the statement on the connection, as the runtime does, and stores a running span.
    await storage.writeTraceSignals([{ type: 'span_started', span, payloads: startPayloads }]);
    const later = modelSpan(sessionId, turnId, { modelCallIndex: 2 });
    const args = [
      JSON.stringify([{ id: later.id }]),
      JSON.stringify([{ id: span.id }]),
      `{${span.id}}`,
      '[]',
      JSON.stringify([{ span_id: later.id, slot: 'request' }]),
    ].map(literal);
    expect(await seqScans(`EXECUTE ow_trace_batch(${args.join(', ')})`)).toEqual([]);
  });

  it('the batch\'s generic plan costs no more than a custom one, so a database in use does not plan it at every call', async () => {
    // After five custom plans, Postgres keeps planning a prepared statement at every call while the
    // generic plan's estimate is dearer than the custom plans' average. With `id = ANY ($3)` a custom
    // plan saw the stored ends' ids as a constant (mostly none) and came out cheaper than the generic
    // one on a table with older spans, so the batch was planned at every call (perf-pgside).
    const span = modelSpan(sessionId, turnId);
    await storage.writeTraceSignals([{ type: 'span_started', span, payloads: startPayloads }]);
    const later = modelSpan(sessionId, turnId, { modelCallIndex: 2 });
    const batch = (ends: string[]) =>
      [JSON.stringify([{ id: later.id }]), JSON.stringify(ends.map((id) => ({ id }))), `{${ends.join(',')}}`, '[]', JSON.stringify([{ span_id: later.id, slot: 'request' }])].map(literal);
    const cost = async (mode: string, args: string[]) => {
      await storage.db.query(`SET plan_cache_mode = ${mode}`);
      const { rows } = await storage.db.query<{ 'QUERY PLAN': unknown }>(`EXPLAIN (FORMAT JSON) EXECUTE ow_trace_batch(${args.join(', ')})`);
      return (rows[0]!['QUERY PLAN'] as Array<{ Plan: { 'Total Cost': number } }>)[0]!.Plan['Total Cost'];
    };
    try {
      for (const ends of [[], [span.id]]) {
        const args = batch(ends);
        // Postgres charges each custom plan its planning too (1,000 x cpu_operator_cost per relation
        // plus one: 5 or more with the default 0.0025), and keeps the generic plan when it is cheaper
        // than the custom plans' average so charged (plancache.c, choose_custom_plan).
        expect(await cost('force_generic_plan', args), `generic plan with ${ends.length} stored ends`).toBeLessThan((await cost('force_custom_plan', args)) + 5);
      }
    } finally {
      await storage.db.query('RESET plan_cache_mode');
    }
  });

  it('a turn\'s trace, a session\'s spans and the cascades of a turn or session delete find spans through an index', async () => {
    const span = modelSpan(sessionId, turnId);
    await storage.writeTraceSignals([{ type: 'span_started', span }, { type: 'span_ended', span: ended(span) }]);
    expect((await storage.listTraceSpans({ turnId })).map((s) => s.id)).toContain(span.id);
    expect((await storage.listTraceSpans({ sessionId })).map((s) => s.id)).toContain(span.id);
    const [turn, session] = [literal(turnId), literal(sessionId)];
    // The reads of trace-store.ts, and what the foreign keys' ON DELETE CASCADE runs.
    expect(await seqScans(`SELECT * FROM trace_spans WHERE session_id = (SELECT t.session_id FROM turns t WHERE t.id = ${turn}) AND turn_id = ${turn} ORDER BY started_at, id`)).toEqual([]);
    expect(await seqScans(`SELECT * FROM trace_spans WHERE session_id = ${session} ORDER BY started_at, id`)).toEqual([]);
    expect(await seqScans(`DELETE FROM ONLY trace_spans WHERE turn_id = ${turn} AND session_id = ${session}`)).toEqual([]);
    expect(await seqScans(`DELETE FROM ONLY trace_spans WHERE session_id = ${session}`)).toEqual([]);
  });
});
