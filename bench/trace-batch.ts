/**
 * What the trace writer costs per tool step, free of timing: the peers benchmark's turns run on a
 * throw-away durable Postgres with a recorder that only keeps the signals (nothing written), then
 * the kept signals are written through the storage's own `writeTraceSignals`, one batch per turn
 * (as the runtime's turn-end flush mostly makes them) or `TRACE_SPLIT=n` batches per turn (a turn
 * slower than the writer's linger). The same signals in the same batches whatever the machine's
 * load, so two builds compare by their counts: per step, the batch statements, their execution
 * time (`pg_stat_statements`), WAL records and bytes, and the Node CPU of the writes.
 * Run from the source: `npx tsx bench/trace-batch.ts` (knobs: TRACE_TURNS, default 20;
 * TRACE_SPLIT, default 1; TRACE_WALDUMP=1 lists the batches' WAL records by kind and relation;
 * TRACE_PREFILL=n first stores n older spans with three payload mappings each, analysed, so that a
 * plan that reads whole trace tables shows in the buffer counts; TRACE_SQL=<sql> runs after the
 * migrations, a schema variant to bound what a part costs; TRACE_REPEAT=n writes the measured
 * turns' signals n times, each time under fresh span ids, for a steadier server CPU figure).
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { z } from 'zod';
import { createCore, defineTool, postgresStorage } from '../src/index.js';
import type { TraceSignal } from '../src/protocol/trace-signals.js';
// @ts-expect-error plain ESM helper of the peers benchmark
import { postgresCpuMs, startDurablePostgres } from './peers/postgres.mjs';
// @ts-expect-error plain ESM helper of the peers benchmark
import { USER_TEXT, K } from './peers/scenario.mjs';
// @ts-expect-error plain ESM helper of the peers benchmark
import { fakeModelPort, instantToolOf } from './peers/openwork-setup.mjs';

const TURNS = Number(process.env.TRACE_TURNS ?? 20);
const SPLIT = Math.max(1, Number(process.env.TRACE_SPLIT ?? 1));
const server = await startDurablePostgres({ settings: { shared_preload_libraries: 'pg_stat_statements' } });
const admin = new pg.Client({ connectionString: server.url('postgres') });
await admin.connect();
await admin.query('CREATE DATABASE trace');
const url = server.url('trace');
const probe = new pg.Client({ connectionString: url });
await probe.connect();
await probe.query('CREATE EXTENSION pg_stat_statements');

/** The signals of the current turn, kept instead of written. */
let kept: TraceSignal[] = [];
const keeper = {
  record(signal: TraceSignal) {
    kept.push(signal);
  },
  async flush() {
    return { flushed: true, droppedSignals: 0, writeFailures: 0, written: 0, queued: 0 };
  },
  stats: () => ({ droppedSignals: 0, writeFailures: 0, written: 0, queued: 0 }),
  async close() {},
};
const storage = postgresStorage({ connectionString: url, max: 4 });
const core = await createCore({ storage, model: fakeModelPort() as never, tools: [instantToolOf(defineTool, z)], worldState: false, trace: keeper });
const turns: TraceSignal[][] = [];
for (let i = 0; i < TURNS + 3; i += 1) {
  const session = await core.createSession({ workingDirectory: process.cwd() });
  const { turnId } = await session.startTurn({ clientRequestId: randomUUID(), input: [{ type: 'text', text: USER_TEXT }] });
  const outcome = await session.waitForTurn(turnId);
  if (outcome.status !== 'completed') throw new Error(`turn ended ${JSON.stringify(outcome)}`);
  turns.push(kept);
  kept = [];
}
const write = async (signals: TraceSignal[]) => {
  const size = Math.ceil(signals.length / SPLIT);
  for (let at = 0; at < signals.length; at += size) {
    const report = await storage.writeTraceSignals(signals.slice(at, at + size));
    if (report.failed > 0) throw new Error(`batch refused: ${JSON.stringify(report)}`);
  }
};
const PREFILL = Number(process.env.TRACE_PREFILL ?? 0);
if (PREFILL > 0) {
  await probe.query(`INSERT INTO sessions (id, working_directory) VALUES ('prefill', '/work')`);
  await probe.query(`INSERT INTO trace_spans (id, trace_id, session_id, kind, name, status, started_at, ended_at, attributes)
    SELECT 'prefill' || g, 'trace-prefill' || (g / 20), 'prefill', 'compaction', 'session.compact', 'succeeded', now(), now(), '{"schemaVersion":1}'
    FROM generate_series(1, ${PREFILL}) g`);
  await probe.query(`INSERT INTO trace_payloads (hash, body, byte_size) SELECT md5(id), '{}', 2 FROM trace_spans WHERE session_id = 'prefill'`);
  await probe.query(`INSERT INTO trace_span_payloads (span_id, slot, payload_hash) SELECT s.id, slot, md5(s.id) FROM trace_spans s,
    unnest(ARRAY['request', 'system_context', 'tool_definitions']) slot WHERE s.session_id = 'prefill'`);
  await probe.query('VACUUM ANALYZE');
}
if (process.env.TRACE_SQL) await probe.query(process.env.TRACE_SQL);
// Warm-up: three turns (prepared statement, payload hashes already known).
for (const signals of turns.slice(0, 3)) await write(signals);
// The text the batches send: their parameters' characters.
let sent = 0;
const query = storage.db.query.bind(storage.db);
storage.db.query = ((text: never, params?: unknown[]) => {
  for (const p of params ?? []) sent += typeof p === 'string' ? p.length : JSON.stringify(p).length;
  return query(text, params);
}) as typeof storage.db.query;
await probe.query('SELECT pg_stat_statements_reset()');
const { rows: lsn0 } = await probe.query('SELECT pg_current_wal_lsn() AS lsn');
const REPEAT = Math.max(1, Number(process.env.TRACE_REPEAT ?? 1));
/** The signals of a turn again under fresh span ids (the payload bodies stay shared, as in a run). */
const renamed = (signals: TraceSignal[], r: number): TraceSignal[] =>
  r === 0 ? signals : (JSON.parse(JSON.stringify(signals).replaceAll('"span.', `"r${r}.span.`).replaceAll('.model', `.r${r}model`)) as TraceSignal[]);
const serverCpu0 = postgresCpuMs(server.postmasterPid());
const cpu0 = process.cpuUsage();
for (let r = 0; r < REPEAT; r += 1) for (const signals of turns.slice(3)) await write(renamed(signals, r));
const cpu = process.cpuUsage(cpu0);
const serverCpu = postgresCpuMs(server.postmasterPid()) - serverCpu0;
const { rows: lsn1 } = await probe.query('SELECT pg_current_wal_lsn() AS lsn');
const steps = TURNS * K * REPEAT;
const signalCount = turns.slice(3).reduce((n, t) => n + t.length, 0) * REPEAT;
const { rows } = await probe.query(`SELECT query, calls, total_exec_time, wal_records, wal_bytes, shared_blks_hit + shared_blks_read AS blocks
  FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND query NOT LIKE '%pg_stat%' AND query NOT LIKE '%pg_current_wal_lsn%' ORDER BY wal_bytes DESC`);
const per = (n: unknown, digits = 2) => (Number(n) / steps).toFixed(digits);
console.log(`turns ${TURNS}, steps ${steps}, ${(signalCount / steps).toFixed(2)} signals a step, ${SPLIT} batch(es) a turn`);
console.log(`parameters sent ${Math.round(sent / steps)} characters a step`);
console.log(`Node CPU of the writes ${((cpu.user + cpu.system) / 1000 / steps).toFixed(3)} ms a step`);
console.log(`Postgres CPU of the writes ${(serverCpu / steps).toFixed(3)} ms a step (all server processes, 10 ms ticks)`);
console.log('  calls  exec ms  WAL rec   WAL B  blocks  statement');
for (const r of rows) console.log(`${per(r.calls).padStart(7)} ${per(r.total_exec_time, 3).padStart(8)} ${per(r.wal_records, 1).padStart(8)} ${per(r.wal_bytes, 0).padStart(7)} ${per(r.blocks, 0).padStart(7)}  ${String(r.query).replace(/\s+/g, ' ').trim().slice(0, 60)}`);
if (process.env.TRACE_WALDUMP === '1') {
  const { execFileSync } = await import('node:child_process');
  const { join } = await import('node:path');
  const bin = execFileSync('sh', ['-c', 'ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1'], { encoding: 'utf8' }).trim();
  await probe.query('SELECT pg_switch_wal()');
  const out = execFileSync(join(bin, 'pg_waldump'), ['-s', lsn0[0].lsn, '-e', lsn1[0].lsn, '-p', join(server.dataDir, 'pg_wal')], { encoding: 'utf8', maxBuffer: 1 << 28 });
  const names = new Map((await probe.query(`SELECT relfilenode::text AS node, relname FROM pg_class`)).rows.map((r) => [r.node as string, r.relname as string]));
  const kinds = new Map<string, { n: number; b: number }>();
  for (const line of out.split('\n')) {
    const len = /len \(rec\/tot\):\s*\d+\/\s*(\d+)/.exec(line);
    if (!len) continue;
    const rel = /rel \d+\/\d+\/(\d+)/.exec(line)?.[1];
    const key = `${/rmgr: (\w+)/.exec(line)?.[1]}/${/desc: (\w+)/.exec(line)?.[1]} ${rel ? (names.get(rel) ?? rel) : ''}`;
    const k = kinds.get(key) ?? { n: 0, b: 0 };
    k.n += 1;
    k.b += Number(len[1]);
    kinds.set(key, k);
  }
  console.log('\nWAL records of the writes (records and bytes a step):');
  for (const [key, k] of [...kinds.entries()].sort((a, b) => b[1].b - a[1].b)) console.log(`${per(k.n).padStart(7)} ${String(Math.round(k.b / steps)).padStart(6)} B  ${key}`);
}
await core.shutdown();
await probe.end();
await admin.end();
server.stop();
