/**
 * Runtime overhead against two raw `pg` baselines measured in one run, on a PostgreSQL server with
 * its default durability (fsync on, synchronous_commit on).
 *
 * Scenario: a scripted model and an instant tool; each turn is 10 tool steps plus a final answer
 * (11 model calls). The **floor** is the least a durable loop can do: one autocommitted INSERT per
 * message (the user message, each assistant message with its tool call, each tool result). The
 * **same-commits** baseline issues the runtime's own business transactions (turn start, counters
 * before each model call, assistant message + counters, each tool result, end of turn) and the same
 * trace rows in batches, with hand-written SQL; it shows what the runtime's design costs apart from
 * its code. Both use a `pg` pool of the runtime's size.
 *
 * Run: npm run bench   (starts its own PostgreSQL server)
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { z } from 'zod';
import { createCore } from '../src/core.js';
import { scriptedModel } from '../src/services/model/scripted.js';
import { defineTool } from '../src/services/tools/define.js';
import { postgresStorage } from '../src/storage/postgres.js';
import { startPostgres } from '../test/support/postgres-server.js';

const STEPS = 10;
const SERIAL_TURNS = Number(process.env.BENCH_TURNS ?? 40);
const CONCURRENT_SESSIONS = Number(process.env.BENCH_SESSIONS ?? 100);
const POOL = 10;

const instant = defineTool({ name: 'instant', description: 'Returns at once.', parameters: z.object({ i: z.number() }), execute: ({ i }) => `ok ${i}` });

/** One script per session: the model's own cost is O(1) per call, as a real provider's is for the client. */
function model() {
  return scriptedModel(
    (_request, i) => {
      const step = i % (STEPS + 1);
      if (step === STEPS) return { text: 'finished', usage: { inputTokens: 100, outputTokens: 5 } };
      return { toolCalls: [{ name: 'instant', arguments: { i: step } }], usage: { inputTokens: 100, outputTokens: 10 } };
    },
    { record: false },
  );
}

interface Sample {
  wallMs: number;
  cpuUs: number;
  turns: number;
}

function perStep(s: Sample) {
  const steps = s.turns * STEPS;
  return { wallUs: (s.wallMs * 1000) / steps, cpuUs: s.cpuUs / steps };
}

async function measure(fn: () => Promise<number>): Promise<Sample> {
  global.gc?.();
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  const turns = await fn();
  const wallMs = performance.now() - t0;
  const used = process.cpuUsage(cpu);
  return { wallMs, cpuUs: used.user + used.system, turns };
}

// ---------- runtime ----------

async function runtimeTurns(url: string, sessions: number, turnsPerSession: number): Promise<Sample & { latencies: number[] }> {
  const storage = postgresStorage({ connectionString: url, max: POOL });
  // World State sampling (a readdir, an lstat, a skill scan per call) is off: the baseline does no such work.
  const core = await createCore({ storage, model: model(), tools: [instant], limits: { maxModelCalls: STEPS + 5 }, worldState: false });
  const handles = await Promise.all(Array.from({ length: sessions }, () => core.createSession({ workingDirectory: process.cwd(), model: model() })));
  const latencies: number[] = [];
  const sample = await measure(async () => {
    await Promise.all(
      handles.map(async (h) => {
        for (let t = 0; t < turnsPerSession; t += 1) {
          const start = performance.now();
          const { turnId } = await h.startTurn({ clientRequestId: randomUUID(), input: [{ type: 'text', text: 'go' }] });
          const outcome = await h.waitForTurn(turnId);
          if (outcome.status !== 'completed') throw new Error(`turn ${turnId} ${JSON.stringify(outcome)}`);
          latencies.push(performance.now() - start);
        }
      }),
    );
    await core.flushTrace(30_000);
    return sessions * turnsPerSession;
  });
  await core.shutdown();
  return { ...sample, latencies };
}

// ---------- raw baseline: the same commits with hand-written SQL ----------

async function lockSession(c: pg.PoolClient, sessionId: string): Promise<void> {
  await c.query('SELECT id FROM sessions WHERE id = $1 FOR NO KEY UPDATE', [sessionId]);
}

async function lockTurn(c: pg.PoolClient, turnId: string): Promise<void> {
  await c.query(`SELECT t.session_id, t.status FROM turns t JOIN sessions s ON s.id = t.session_id WHERE t.id = $1 FOR NO KEY UPDATE`, [turnId]);
}

async function insertMessage(c: pg.PoolClient, sessionId: string, turnId: string, role: string, content: unknown, callId: string | null = null) {
  await c.query(
    `INSERT INTO messages (id, session_id, turn_id, sequence, role, content, message_kind, provider_call_id, tool_name)
     SELECT $1, $2, $3, COALESCE(MAX(sequence), 0) + 1, $4, $5::jsonb, 'normal', $6, $7 FROM messages WHERE session_id = $2
     RETURNING id, session_id, turn_id, sequence, role, content, message_kind, provider_call_id, tool_name, created_at`,
    [`msg_${randomUUID()}`, sessionId, turnId, role, JSON.stringify(content), callId, callId ? 'instant' : null],
  );
}

/** The trace rows of one step, written like the recorder does: one multi-row statement per table. */
async function spanBatch(pool: pg.Pool, spans: Array<[string, string, string, string, string]>, payloadSpan: string | null) {
  await tx(pool, async (c) => {
    const values = spans.map((_, i) => `($${i * 5 + 1}, $${i * 5 + 2}, $${i * 5 + 3}, $${i * 5 + 4}, $${i * 5 + 5}, 'x', 'succeeded', now(), now(), '{}'::jsonb)`);
    await c.query(
      `INSERT INTO trace_spans (id, trace_id, session_id, turn_id, kind, name, status, started_at, ended_at, attributes) VALUES ${values.join(', ')}
       ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, ended_at = EXCLUDED.ended_at`,
      spans.flat(),
    );
    if (payloadSpan) {
      await c.query(
        `INSERT INTO trace_payloads (hash, body, byte_size) VALUES ($1, '{"format":"openwork.request-pointers/1","messages":[[1,20]]}'::jsonb, 60) ON CONFLICT (hash) DO NOTHING`,
        [`req-${payloadSpan}`],
      );
      await c.query(
        `INSERT INTO trace_span_payloads (span_id, slot, payload_hash) VALUES ($1, 'request', $2), ($1, 'system_context', 'sys'), ($1, 'tool_definitions', 'tools')`,
        [payloadSpan, `req-${payloadSpan}`],
      );
    }
  });
}

async function tx<T>(pool: pg.Pool, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    const r = await fn(c);
    await c.query('COMMIT');
    return r;
  } catch (e) {
    await c.query('ROLLBACK');
    throw e;
  } finally {
    c.release();
  }
}

async function rawTurn(pool: pg.Pool, sessionId: string): Promise<void> {
  const turnId = `turn_${randomUUID()}`;
  await tx(pool, async (c) => {
    await lockSession(c, sessionId);
    const { rows } = await c.query('SELECT COALESCE(MAX(sequence), 0) AS max FROM turns WHERE session_id = $1', [sessionId]);
    await c.query(
      `INSERT INTO turns (id, session_id, client_request_id, sequence, model_id, resolved_provider_id, resolved_model_name, app_version, status)
       VALUES ($1,$2,$3,$4,'scripted/m','scripted','m','bench','running')`,
      [turnId, sessionId, randomUUID(), Number(rows[0].max) + 1],
    );
    await insertMessage(c, sessionId, turnId, 'user', [{ type: 'text', text: 'go' }]);
    await c.query('UPDATE sessions SET last_turn_at = now(), updated_at = now() WHERE id = $1', [sessionId]);
  });
  for (let step = 1; step <= STEPS + 1; step += 1) {
    await pool.query(
      `UPDATE turns SET model_call_count = GREATEST(model_call_count, $2), model_submission_count = model_submission_count + 1, updated_at = now() WHERE id = $1 AND status = 'running'`,
      [turnId, step],
    );
    const modelSpan = `${turnId}.model${step}`;
    const final = step === STEPS + 1;
    const callId = `call_${step}`;
    const content = final ? [{ type: 'text', text: 'finished' }] : [{ type: 'tool_call', callId, name: 'instant', arguments: `{"i":${step}}` }];
    await tx(pool, async (c) => {
      await lockTurn(c, turnId);
      await insertMessage(c, sessionId, turnId, 'assistant', content);
      await c.query(
        `UPDATE turns SET input_tokens = COALESCE(input_tokens,0)+100, output_tokens = COALESCE(output_tokens,0)+10, cached_input_tokens = COALESCE(cached_input_tokens,0), reasoning_tokens = COALESCE(reasoning_tokens,0), tool_call_count = tool_call_count + $2, updated_at = now() WHERE id = $1`,
        [turnId, final ? 0 : 1],
      );
    });
    if (final) {
      await spanBatch(pool, [[modelSpan, turnId, sessionId, turnId, 'model_call']], modelSpan);
      break;
    }
    await tx(pool, async (c) => {
      await lockTurn(c, turnId);
      await insertMessage(c, sessionId, turnId, 'tool', [{ type: 'tool_result', callId, status: 'succeeded', text: `ok ${step}` }], callId);
    });
    await spanBatch(
      pool,
      [
        [modelSpan, turnId, sessionId, turnId, 'model_call'],
        [`span.${turnId}.tc${step}`, turnId, sessionId, turnId, 'tool_call'],
      ],
      modelSpan,
    );
  }
  await pool.query(`UPDATE turns SET status = 'completed', ended_at = GREATEST(now(), started_at), updated_at = now() WHERE id = $1 AND status = 'running'`, [turnId]);
}

// ---------- the floor: one commit per message ----------

const FLOOR_SCHEMA = `CREATE TABLE IF NOT EXISTS floor_messages (
  thread_id text NOT NULL, seq integer NOT NULL, role text NOT NULL, content jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (thread_id, seq))`;

async function floorTurn(pool: pg.Pool, threadId: string, firstSeq: number): Promise<number> {
  let seq = firstSeq;
  const append = (role: string, content: unknown) =>
    pool.query('INSERT INTO floor_messages (thread_id, seq, role, content) VALUES ($1, $2, $3, $4)', [threadId, (seq += 1), role, JSON.stringify(content)]);
  await append('user', [{ type: 'text', text: 'go' }]);
  for (let step = 1; step <= STEPS; step += 1) {
    const callId = `call_${step}`;
    await append('assistant', [{ type: 'tool_call', callId, name: 'instant', arguments: `{"i":${step}}` }]);
    await append('tool', [{ type: 'tool_result', callId, status: 'succeeded', text: `ok ${step}` }]);
  }
  await append('assistant', [{ type: 'text', text: 'finished' }]);
  return seq;
}

async function floorTurns(url: string, sessions: number, turnsPerSession: number): Promise<Sample & { latencies: number[] }> {
  const pool = new pg.Pool({ connectionString: url, max: POOL });
  await pool.query(FLOOR_SCHEMA);
  const latencies: number[] = [];
  const sample = await measure(async () => {
    await Promise.all(
      Array.from({ length: sessions }, async () => {
        const threadId = randomUUID();
        let seq = 0;
        for (let t = 0; t < turnsPerSession; t += 1) {
          const start = performance.now();
          seq = await floorTurn(pool, threadId, seq);
          latencies.push(performance.now() - start);
        }
      }),
    );
    return sessions * turnsPerSession;
  });
  await pool.end();
  return { ...sample, latencies };
}

async function rawTurns(url: string, sessions: number, turnsPerSession: number): Promise<Sample & { latencies: number[] }> {
  const pool = new pg.Pool({ connectionString: url, max: POOL });
  const ids = Array.from({ length: sessions }, () => `ses_${randomUUID()}`);
  for (const id of ids) await pool.query(`INSERT INTO sessions (id, working_directory) VALUES ($1, '/bench')`, [id]);
  await pool.query(`INSERT INTO trace_payloads (hash, body, byte_size) VALUES ('sys', '{}', 2), ('tools', '[]', 2) ON CONFLICT DO NOTHING`);
  const latencies: number[] = [];
  const sample = await measure(async () => {
    await Promise.all(
      ids.map(async (id) => {
        for (let t = 0; t < turnsPerSession; t += 1) {
          const start = performance.now();
          await rawTurn(pool, id);
          latencies.push(performance.now() - start);
        }
      }),
    );
    return sessions * turnsPerSession;
  });
  await pool.end();
  return { ...sample, latencies };
}

function pct(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

const f = (n: number) => n.toFixed(1);

export async function runRuntimeBench(): Promise<string[]> {
  const server = await startPostgres({ durable: true });
  const lines: string[] = [];
  try {
    const admin = new pg.Client({ connectionString: server.url });
    await admin.connect();
    await admin.query('CREATE DATABASE bench_runtime');
    await admin.query('CREATE DATABASE bench_raw');
    await admin.query('CREATE DATABASE bench_floor');
    await admin.end();
    const url = (db: string) => server.url.replace(/\/postgres$/, `/${db}`);
    const schema = postgresStorage({ connectionString: url('bench_raw') });
    await schema.migrate();
    await schema.close();

    // Warm-up: JIT, connection pools, plan caches.
    await runtimeTurns(url('bench_runtime'), 1, 3);
    await floorTurns(url('bench_floor'), 1, 3);
    await rawTurns(url('bench_raw'), 1, 3);

    const line = (name: string, x: Sample, extra = '') => {
      const p = perStep(x);
      return `  ${name.padEnd(12)} ${f(p.wallUs)} µs/step wall, ${f(p.cpuUs)} µs/step CPU (node process)${extra}`;
    };
    const ratios = (a: Sample, b: Sample, wall: (s: Sample) => number) =>
      `${(wall(a) / wall(b)).toFixed(2)}x wall, ${(perStep(a).cpuUs / perStep(b).cpuUs).toFixed(2)}x CPU`;
    const serialWall = (x: Sample) => perStep(x).wallUs;
    const totalWall = (x: Sample) => x.wallMs;

    const rt = await runtimeTurns(url('bench_runtime'), 1, SERIAL_TURNS);
    const floor = await floorTurns(url('bench_floor'), 1, SERIAL_TURNS);
    const raw = await rawTurns(url('bench_raw'), 1, SERIAL_TURNS);
    lines.push(`serial: 1 session, ${SERIAL_TURNS} turns x ${STEPS} tool steps (11 model calls each), pg pool ${POOL}, fsync on`);
    lines.push(line('runtime', rt));
    lines.push(line('floor', floor));
    lines.push(line('same commits', raw));
    lines.push(`  runtime / floor         ${ratios(rt, floor, serialWall)}`);
    lines.push(`  runtime / same commits  ${ratios(rt, raw, serialWall)}`);

    const rtc = await runtimeTurns(url('bench_runtime'), CONCURRENT_SESSIONS, 1);
    const floorc = await floorTurns(url('bench_floor'), CONCURRENT_SESSIONS, 1);
    const rawc = await rawTurns(url('bench_raw'), CONCURRENT_SESSIONS, 1);
    const latency = (x: Sample & { latencies: number[] }) => `, ${f(x.wallMs)} ms total, turn p50 ${f(pct(x.latencies, 50))} ms p99 ${f(pct(x.latencies, 99))} ms`;
    lines.push(`concurrent: ${CONCURRENT_SESSIONS} sessions at once, 1 turn x ${STEPS} tool steps each, pg pool ${POOL}, fsync on`);
    lines.push(line('runtime', rtc, latency(rtc)));
    lines.push(line('floor', floorc, latency(floorc)));
    lines.push(line('same commits', rawc, latency(rawc)));
    lines.push(`  runtime / floor         ${ratios(rtc, floorc, totalWall)}`);
    lines.push(`  runtime / same commits  ${ratios(rtc, rawc, totalWall)}`);
  } finally {
    server.stop();
  }
  return lines;
}
