/**
 * The latency of one fact statement seen from the client, beside the floor's INSERT, on the same
 * durable server and with nothing else of the runtime running (issue 14 point 2, "the wait"):
 * splits a step's wait into the server's share (execution and the commit's WAL flush) and the
 * share that only appears when the runtime runs around it (CPU contention, scheduling).
 *
 * A core on Postgres starts a turn whose model never answers, so the turn stays running under its
 * lease; a separate `pg` client then runs, interleaved N times each: the floor's INSERT, the fenced
 * tool-result statement of the build (`dist/storage/step-sql.js`) against that turn, both again
 * with `synchronous_commit = off` on their connection (no flush wait: execution and round trip
 * only), and `SELECT 1` (the bare round trip). `node bench/peers/fact-latency.mjs [dist-dir]`,
 * FACT_N (400) times each. Medians and means in ms.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath, pathToFileURL } from 'node:url';
import pg from 'pg';
import { z } from '../../node_modules/zod/index.js';
import { startDurablePostgres } from './postgres.mjs';
import { instantToolOf } from './openwork-setup.mjs';

const N = Number(process.env.FACT_N ?? 400);
const dist = process.argv[2] ? resolve(process.argv[2]) : resolve(fileURLToPath(new URL('../../dist', import.meta.url)));
const { createCore, defineTool, postgresStorage } = await import(pathToFileURL(join(dist, 'index.js')).href);
const stepSql = await import(pathToFileURL(join(dist, 'storage', 'step-sql.js')).href);
/** FACT_BASE_DIST: another build's fact statements beside these (prepared under names ending `_base`). */
const baseSql = process.env.FACT_BASE_DIST ? await import(pathToFileURL(join(resolve(process.env.FACT_BASE_DIST), 'storage', 'step-sql.js')).href) : null;

const server = await startDurablePostgres({ settings: { shared_preload_libraries: 'pg_stat_statements' } });
const admin = new pg.Client({ connectionString: server.url('postgres') });
await admin.connect();
await admin.query('CREATE DATABASE facts');
await admin.end();
const url = server.url('facts');
const dir = mkdtempSync(join(tmpdir(), 'openwork-fact-latency-'));

/** A model that never answers: the turn stays running, its lease held. */
let release;
const hung = new Promise((r) => (release = r));
const model = {
  id: 'fake/hung',
  providerId: 'fake',
  model: 'hung',
  contextWindow: 200_000,
  maxOutputTokens: 8_000,
  async *stream() {
    await hung;
    yield { type: 'text_delta', delta: 'x' };
    yield { type: 'completed', usage: { inputTokens: 1, outputTokens: 1, cachedInputTokens: 0, reasoningTokens: 0 }, finishReason: 'stop' };
  },
};
const core = await createCore({ storage: postgresStorage({ connectionString: url, max: 4 }), model, tools: [instantToolOf(defineTool, z)], worldState: false });
const session = await core.createSession({ workingDirectory: dir });
const { turnId } = await session.startTurn({ clientRequestId: randomUUID(), input: [{ type: 'text', text: 'go' }] });

const clients = [];
const connect = async (settings) => {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  if (settings) await c.query(settings);
  clients.push(c);
  return c;
};
const durable = await connect();
await durable.query('CREATE EXTENSION pg_stat_statements');
const async = await connect('SET synchronous_commit = off');
await durable.query(`CREATE TABLE floor_messages (thread_id text NOT NULL, seq integer NOT NULL, role text NOT NULL, content jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (thread_id, seq))`);
// Wait for the turn row (the model call has begun once its counters are stored).
let owners;
for (;;) {
  const { rows } = await durable.query(`SELECT l.owner_id FROM turns t JOIN session_leases l ON l.session_id = t.session_id WHERE t.id = $1 AND t.status = 'running'`, [turnId]);
  if (rows[0]) {
    owners = [rows[0].owner_id];
    break;
  }
  await new Promise((r) => setTimeout(r, 20));
}

let seq = 0;
const thread = randomUUID();
const floorInsert = (c) => {
  seq += 1;
  return c.query('INSERT INTO floor_messages (thread_id, seq, role, content) VALUES ($1, $2, $3, $4)', [
    thread,
    seq,
    'tool',
    JSON.stringify([{ type: 'tool_result', callId: `call_${seq}`, text: `ok ${seq}` }]),
  ]);
};
let calls = 0;
/** The next model call a tool result reserves: one more each time, as a turn's calls go. */
let nextCall = 1;
/** The build's tool result (reserving the next model call, as every result of the peers scenario does) and assistant message. */
const factsOf = (sql, suffix) => ({
  toolResult: (c) => {
    calls += 1;
    const callId = `call_${calls}`;
    const content = [{ type: 'tool_result', callId, output: { type: 'text', text: `ok ${calls}` }, isError: false }];
    const stmt = sql.COMMIT_TOOL_RESULT.fenced;
    return c.query({ name: stmt.name + suffix, text: stmt.text, values: [turnId, randomUUID(), 'tool', JSON.stringify(content), 'normal', callId, 'instant', (nextCall += 1), owners] }).then(wrote);
  },
  assistant: (c) => {
    calls += 1;
    const content = [{ type: 'tool_call', callId: `call_${calls}`, name: 'instant', arguments: JSON.stringify({ i: calls }) }];
    const stmt = sql.COMMIT_ASSISTANT_MESSAGE.fenced;
    return c.query({ name: stmt.name + suffix, text: stmt.text, values: [turnId, randomUUID(), 'assistant', JSON.stringify(content), 'normal', null, null, 100, 10, 0, 0, 1, owners] }).then(wrote);
  },
});
const wrote = (r) => {
  if (r.rows.length !== 1) throw new Error('the fact wrote nothing');
};
const mine = factsOf(stepSql, '');
const base = baseSql ? factsOf(baseSql, '_base') : null;
const kinds = {
  'floor INSERT, flushed commit': () => floorInsert(durable),
  'tool result, flushed commit': () => mine.toolResult(durable),
  'assistant message, flushed commit': () => mine.assistant(durable),
  ...(base
    ? { 'base: tool result, flushed commit': () => base.toolResult(durable), 'base: assistant message, flushed commit': () => base.assistant(durable) }
    : {}),
  'floor INSERT, synchronous_commit off': () => floorInsert(async),
  'tool result, synchronous_commit off': () => mine.toolResult(async),
  'SELECT 1': () => durable.query('SELECT 1'),
};
const times = Object.fromEntries(Object.keys(kinds).map((k) => [k, []]));
try {
  for (let i = 0; i < 20; i += 1) for (const run of Object.values(kinds)) await run();
  await durable.query('SELECT pg_stat_statements_reset()');
  for (let i = 0; i < N; i += 1) {
    for (const [k, run] of Object.entries(kinds)) {
      const t0 = performance.now();
      await run();
      times[k].push(performance.now() - t0);
    }
  }
  console.log(`one statement's latency from the client, ${N} each, interleaved (${dist}); ms`);
  console.log('| statement | median | mean | p90 |');
  console.log('|---|---|---|---|');
  for (const [k, t] of Object.entries(times)) {
    t.sort((a, b) => a - b);
    const mean = t.reduce((a, b) => a + b, 0) / t.length;
    console.log(`| ${k} | ${t[Math.floor(t.length / 2)].toFixed(3)} | ${mean.toFixed(3)} | ${t[Math.floor(t.length * 0.9)].toFixed(3)} |`);
  }
  // The server's side of each statement: execution without the commit, its WAL and its buffers.
  const { rows } = await durable.query(`SELECT calls, mean_exec_time, wal_records, wal_bytes, shared_blks_hit + shared_blks_read AS blocks, shared_blks_dirtied AS dirtied, left(regexp_replace(query, '\\s+', ' ', 'g'), 90) AS q
    FROM pg_stat_statements WHERE calls >= ${N} AND query NOT LIKE '%pg_stat%' ORDER BY query`);
  console.log('\nserver side, per call (pg_stat_statements): | exec ms | WAL records | WAL B | buffers | dirtied | statement |');
  for (const r of rows) {
    const n = Number(r.calls);
    console.log(`| ${Number(r.mean_exec_time).toFixed(4)} | ${(Number(r.wal_records) / n).toFixed(1)} | ${(Number(r.wal_bytes) / n).toFixed(0)} | ${(Number(r.blocks) / n).toFixed(1)} | ${(Number(r.dirtied) / n).toFixed(2)} | ${r.q} |`);
  }
} finally {
  for (const c of clients) await c.end();
  release();
  await core.shutdown().catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
  server.stop();
}
