/**
 * Counts what one durable tool step of openwork-core costs on Postgres: statements (each a round
 * trip), write transactions (commits) and WAL bytes, on a throw-away server with default durability
 * (fsync on), with the peers benchmark's scenario (bench/peers/scenario.mjs). Run from the source:
 * `npx tsx bench/step-statements.ts` (knobs: STEP_TURNS, default 20; STEP_TRACE=0 drops the trace).
 * It prints the statements per step grouped by their prepared-statement name (or first words), so a
 * change to the step's SQL shows up as a change in this table (docs/benchmarks.md, "Run 4"); which
 * transaction each statement runs in (client side: BEGIN ... COMMIT blocks, or alone in an implicit
 * one); and, from the server's `pg_stat_statements` (preloaded on this throw-away server), each
 * statement's calls, planning and execution time, and WAL records, full-page images and bytes per step,
 * and the server processes' CPU per step. (`pg_stat_wal` is not used: backends report to it up to
 * seconds late, so a reset before the measured turns still collects WAL of the warm-up.) `STEP_CHECKPOINT=1` runs a
 * CHECKPOINT just before the measured turns, so every page the step touches first writes a full-page
 * image, the worst case after each checkpoint (docs/benchmarks.md, "The Postgres side of a step");
 * `STEP_PREFILL=200000` first fills the database with that many older messages, spans and payload
 * mappings, so the indexes are wide and full-page images show what they cost in a database in use.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { z } from 'zod';
import { createCore, defineTool, postgresStorage } from '../src/index.js';
// @ts-expect-error plain ESM helper of the peers benchmark
import { postgresCpuMs, startDurablePostgres } from './peers/postgres.mjs';
// @ts-expect-error plain ESM helper of the peers benchmark
import { USER_TEXT, K } from './peers/scenario.mjs';
// @ts-expect-error plain ESM helper of the peers benchmark
import { fakeModelPort, instantToolOf, NO_TRACE } from './peers/openwork-setup.mjs';

const TURNS = Number(process.env.STEP_TURNS ?? 20);
const counts = new Map<string, number>();
/** Transactions by their statements in order ("alone" for a statement in its own implicit one). */
const transactions = new Map<string, number>();
const open = new WeakMap<object, string[]>();
let counting = false;
/** STEP_PLANS=1: the last measured call of each trace batch statement, EXPLAINed at the end. */
const traceBatches = new Map<string, { text: string; values: unknown[] }>();
const original = pg.Client.prototype.query;
pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
  if (counting) {
    const first = args[0];
    const text = typeof first === 'string' ? first : ((first as { text?: string })?.text ?? '?');
    const name = typeof first === 'object' && first !== null ? (first as { name?: string }).name : undefined;
    const key = name ?? text.replace(/\s+/g, ' ').trim().slice(0, 60);
    counts.set(key, (counts.get(key) ?? 0) + 1);
    if (name?.startsWith('ow_trace_batch')) {
      const values = (first as { values?: unknown[] }).values ?? (args[1] as unknown[]) ?? [];
      const ends = Array.isArray(values[2]) ? values[2].length : 0;
      traceBatches.set(`${name}, ${ends > 0 ? 'with' : 'no'} stored ends`, { text, values });
    }
    const verb = text.trim().split(/\s+/)[0]!.toUpperCase();
    if (verb === 'BEGIN') open.set(this, []);
    else if (verb === 'COMMIT' || verb === 'ROLLBACK') {
      const sig = `${verb === 'COMMIT' ? 'BEGIN' : 'ROLLED BACK'}: ${(open.get(this) ?? []).join(' + ')}`;
      transactions.set(sig, (transactions.get(sig) ?? 0) + 1);
      open.delete(this);
    } else if (open.has(this)) open.get(this)!.push(key);
    else transactions.set(`alone: ${key}`, (transactions.get(`alone: ${key}`) ?? 0) + 1);
  }
  return (original as (...a: unknown[]) => unknown).apply(this, args);
} as typeof pg.Client.prototype.query;

const server = await startDurablePostgres({
  settings: {
    shared_preload_libraries: process.env.STEP_EXPLAIN === '1' ? 'pg_stat_statements,auto_explain' : 'pg_stat_statements',
    'pg_stat_statements.track_planning': 'on',
    // STEP_EXPLAIN=1: every statement's plan with its timing, triggers (foreign key checks) and WAL, in the server log.
    ...(process.env.STEP_EXPLAIN === '1'
      ? { 'auto_explain.log_min_duration': '0', 'auto_explain.log_analyze': 'on', 'auto_explain.log_triggers': 'on', 'auto_explain.log_wal': 'on', 'auto_explain.log_buffers': 'on' }
      : {}),
  },
});
const admin = new pg.Client({ connectionString: server.url('postgres') });
await admin.connect();
await admin.query('CREATE DATABASE steps');
const url = server.url('steps');
const probe = new pg.Client({ connectionString: url });
await probe.connect();
await probe.query('CREATE EXTENSION pg_stat_statements');

const model = fakeModelPort();
const instant = instantToolOf(defineTool, z);
const core = await createCore({
  storage: postgresStorage({ connectionString: url, max: 10 }),
  model: model as never,
  tools: [instant],
  worldState: false,
  ...(process.env.STEP_TRACE === '0' ? { trace: NO_TRACE } : {}),
});
const turn = async () => {
  const session = await core.createSession({ workingDirectory: process.cwd() });
  const { turnId } = await session.startTurn({ clientRequestId: randomUUID(), input: [{ type: 'text', text: USER_TEXT }] });
  const outcome = await session.waitForTurn(turnId);
  if (outcome.status !== 'completed') throw new Error(`turn ended ${JSON.stringify(outcome)}`);
};
const PREFILL = Number(process.env.STEP_PREFILL ?? 0);
if (PREFILL > 0) {
  // A database that has been in use: PREFILL messages, model-call spans and payload mappings of older
  // turns, with ids shaped as the runtime's (random UUIDs), so that the indexes are many pages wide
  // and a step's inserts land on pages a checkpoint has not seen written since (full-page images).
  const turns = Math.ceil(PREFILL / 20);
  // Older ids shaped as the runtime's id generator makes them: time-ordered (UUID version 7, older
  // than now) if it makes those, random (version 4) otherwise, so before and after compare alike.
  const { randomIds } = await import('../src/services/clock.js');
  const ordered = randomIds.next('x').charAt(16) === '7';
  const id = (ordinal: string) =>
    ordered
      ? `(SELECT overlay(gen_random_uuid()::text placing (substr(h.h, 1, 8) || '-' || substr(h.h, 9, 4) || '-7') from 1 for 15)
         FROM (SELECT lpad(to_hex((extract(epoch from now()) * 1000)::bigint - 86400000 + (${ordinal})), 12, '0') AS h) h)`
      : `gen_random_uuid()::text`;
  console.log(`prefill ids: ${ordered ? 'time-ordered' : 'random'}`);
  await probe.query(`INSERT INTO sessions (id, working_directory) VALUES ('prefill', '/work')`);
  await probe.query(`INSERT INTO turns (id, session_id, client_request_id, sequence, resolved_provider_id, resolved_model_name, app_version, status, ended_at)
    SELECT 'turn_' || ${id('g * 20')}, 'prefill', 'r' || g, g, 'fake', 'zero', 'bench', 'completed', now() FROM generate_series(1, ${turns}) g`);
  await probe.query(`INSERT INTO messages (id, session_id, turn_id, sequence, role, content)
    SELECT 'msg_' || ${id('t.sequence * 20 + g')}, 'prefill', t.id, row_number() OVER (), 'user', '[{"type":"text","text":"hello"}]'
    FROM turns t CROSS JOIN generate_series(1, 20) g WHERE t.session_id = 'prefill'`);
  await probe.query(`INSERT INTO trace_spans (id, trace_id, session_id, turn_id, kind, name, status, started_at, ended_at, attributes)
    SELECT t.id || '.model' || g, t.id, 'prefill', t.id, 'model_call', 'model.call', 'succeeded', now(), now(), '{"schemaVersion":1}'
    FROM turns t CROSS JOIN generate_series(1, 20) g WHERE t.session_id = 'prefill'`);
  await probe.query(`INSERT INTO trace_payloads (hash, body, byte_size) SELECT md5(id), '{}', 2 FROM trace_spans WHERE session_id = 'prefill'`);
  await probe.query(`INSERT INTO trace_span_payloads (span_id, slot, payload_hash) SELECT id, 'request', md5(id) FROM trace_spans WHERE session_id = 'prefill'`);
  await probe.query('VACUUM ANALYZE');
  const { rows: size } = await probe.query(`SELECT pg_size_pretty(pg_database_size(current_database())) AS size`);
  console.log(`prefilled ${PREFILL} messages, spans and payload mappings in ${turns} turns: database ${size[0].size}`);
}
for (let i = 0; i < 3; i += 1) await turn();
await core.flushTrace(60_000);

const snap = async () => {
  const { rows } = await probe.query(`SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax, pg_current_wal_lsn() AS lsn`);
  return rows[0] as { xmax: string; lsn: string };
};
if (process.env.STEP_CHECKPOINT === '1') await probe.query('CHECKPOINT');
await probe.query('SELECT pg_stat_statements_reset()');
const before = await snap();
const cpu0 = postgresCpuMs(server.postmasterPid());
// STEP_PERF=<file>: `perf record` of every server process (backends, WAL writer, ...) over the
// measured turns, for `perf report -i <file> --no-children` (where the server's CPU per step goes).
let perfChild: import('node:child_process').ChildProcess | undefined;
if (process.env.STEP_PERF) {
  const { spawn, execFileSync } = await import('node:child_process');
  const pids = execFileSync('pgrep', ['-P', String(server.postmasterPid())], { encoding: 'utf8' }).trim().split(/\s+/).join(',');
  perfChild = spawn('perf', ['record', '-F', '2999', '-g', '-o', process.env.STEP_PERF, '-p', pids], { stdio: 'ignore' });
  await new Promise((resolve) => setTimeout(resolve, 500));
}
counting = true;
const t0 = performance.now();
for (let i = 0; i < TURNS; i += 1) await turn();
await core.flushTrace(60_000);
const wall = performance.now() - t0;
counting = false;
if (perfChild) {
  perfChild.kill('SIGINT');
  await new Promise((resolve) => perfChild!.once('exit', resolve));
}
const cpu = postgresCpuMs(server.postmasterPid()) - cpu0;
const after = await snap();
const { rows } = await probe.query(`SELECT pg_wal_lsn_diff($1, $2)::bigint AS wal`, [after.lsn, before.lsn]);
const steps = TURNS * K;
const total = [...counts.values()].reduce((a, b) => a + b, 0);
const per = (n: number | string, digits = 2) => (Number(n) / steps).toFixed(digits);
console.log(`turns ${TURNS}, steps ${steps}, wall/step ${(wall / steps).toFixed(2)} ms, Postgres CPU/step ${(cpu / steps).toFixed(2)} ms (all server processes, 10 ms ticks)`);
console.log(`statements (round trips) / step ${(total / steps).toFixed(2)}`);
console.log(`commits / step ${((Number(after.xmax) - Number(before.xmax)) / steps).toFixed(2)}`);
console.log(`WAL / step ${(Number(rows[0].wal) / steps).toFixed(0)} B`);
console.log('\nstatements per step (client side, by prepared name or first words):');
for (const [text, n] of [...counts.entries()].sort((a, b) => b[1] - a[1])) console.log(`${(n / steps).toFixed(2).padStart(6)}  ${text}`);
console.log('\ntransactions per step (client side; "alone": an implicit transaction of one statement, a commit only if it wrote):');
for (const [sig, n] of [...transactions.entries()].sort((a, b) => b[1] - a[1])) console.log(`${(n / steps).toFixed(2).padStart(6)}  ${sig}`);
const stats = await probe.query(`SELECT query, calls, plans, total_plan_time, total_exec_time, rows, wal_records, wal_fpi, wal_bytes,
    shared_blks_hit + shared_blks_read AS blocks, shared_blks_dirtied
  FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND query NOT LIKE '%pg_stat%' AND query NOT LIKE '%pg_current_snapshot%' AND query NOT LIKE '%pg_wal_lsn_diff%'
  ORDER BY wal_bytes DESC, total_exec_time DESC`);
console.log('\npg_stat_statements per step (server side; times in ms; plan = planning, exec = execution, without the commit):');
console.log('  calls  plans   plan ms  exec ms   rows  WAL rec  FPI   WAL B  blocks dirtied  statement');
let planSum = 0;
let execSum = 0;
let fpiSum = 0;
let walSum = 0;
type StatRow = Record<'query' | 'calls' | 'plans' | 'total_plan_time' | 'total_exec_time' | 'rows' | 'wal_records' | 'wal_fpi' | 'wal_bytes' | 'blocks' | 'shared_blks_dirtied', string | number>;
for (const r of stats.rows as StatRow[]) {
  planSum += Number(r.total_plan_time);
  execSum += Number(r.total_exec_time);
  fpiSum += Number(r.wal_fpi);
  walSum += Number(r.wal_bytes);
  const label = String(r.query).replace(/\s+/g, ' ').trim().slice(0, 70);
  console.log(`${per(r.calls).padStart(7)} ${per(r.plans).padStart(6)} ${per(r.total_plan_time, 3).padStart(9)} ${per(r.total_exec_time, 3).padStart(8)} ${per(r.rows).padStart(6)} ${per(r.wal_records, 1).padStart(8)} ${per(r.wal_fpi, 1).padStart(4)} ${per(r.wal_bytes, 0).padStart(7)} ${per(r.blocks, 0).padStart(7)} ${per(r.shared_blks_dirtied, 1).padStart(7)}  ${label}`);
}
console.log(`  sum: plan ${(planSum / steps).toFixed(3)} ms, exec ${(execSum / steps).toFixed(3)} ms, ${per(fpiSum, 1)} full-page images and ${per(walSum, 0)} B of WAL per step (the rest of the LSN difference: commit records and background writers)`);
if (process.env.STEP_WALDUMP === '1') {
  // Which records the WAL of the measured turns holds (pg_waldump of the server's own binaries).
  const { execFileSync } = await import('node:child_process');
  const { join } = await import('node:path');
  const bin = execFileSync('sh', ['-c', 'ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1'], { encoding: 'utf8' }).trim();
  await probe.query('SELECT pg_switch_wal()');
  const dump = (args: string[]) => execFileSync(join(bin, 'pg_waldump'), [...args, '-s', before.lsn, '-e', after.lsn, '-p', join(server.dataDir, 'pg_wal')], { encoding: 'utf8', maxBuffer: 1 << 28 });
  console.log(dump(['--stats=record']));
  // WAL bytes per step by relation (table or index), from the records' block references.
  const names = new Map((await probe.query(`SELECT relfilenode::text AS node, relname FROM pg_class`)).rows.map((r) => [r.node as string, r.relname as string]));
  const byRel = new Map<string, number>();
  for (const line of dump([]).split('\n')) {
    const len = /len \(rec\/tot\):\s*\d+\/\s*(\d+)/.exec(line);
    const rel = /rel \d+\/\d+\/(\d+)/.exec(line);
    const key = rel ? (names.get(rel[1]!) ?? rel[1]!) : (/rmgr: (\w+)/.exec(line)?.[1] ?? '?');
    if (len) byRel.set(key, (byRel.get(key) ?? 0) + Number(len[1]));
  }
  for (const [rel, bytes] of [...byRel.entries()].sort((a, b) => b[1] - a[1])) console.log(`${String(Math.round(bytes / steps)).padStart(6)} B/step  ${rel}`);
}
if (process.env.STEP_SAMPLE === '1') {
  // What the stored rows of a step weigh: rows per step and average stored size per table, and one
  // span of each kind with its attributes (the trace's share of the WAL is mostly these rows).
  for (const table of ['messages', 'turns', 'trace_spans', 'trace_span_payloads', 'trace_payloads']) {
    const { rows: r } = await probe.query(`SELECT count(*)::int AS n, avg(pg_column_size(t.*))::int AS size FROM ${table} t`);
    console.log(`${table}: ${r[0].n} rows, average ${r[0].size} B a row`);
  }
  const { rows: spans } = await probe.query(`SELECT DISTINCT ON (kind) kind, pg_column_size(s.*) AS size, pg_column_size(attributes) AS attr_size, s.* FROM trace_spans s ORDER BY kind, started_at DESC`);
  for (const span of spans) console.log(JSON.stringify(span));
  const { rows: maps } = await probe.query(`SELECT slot, count(*)::int AS n, count(DISTINCT payload_hash)::int AS bodies FROM trace_span_payloads GROUP BY slot`);
  console.log(JSON.stringify(maps));
}
await core.shutdown();
if (process.env.STEP_PLANS === '1') {
  // The trace batch's plans on this database (with STEP_PREFILL, one in use): each batch statement
  // the measured turns ran, prepared on the probe's connection with its last parameters, and its
  // custom and generic plans' estimated costs. A prepared statement keeps a custom plan while the
  // generic plan's cost is above the custom plans' average (plus their planning cost), so this says
  // which one Postgres picks after its five custom plans.
  let n = 0;
  for (const [name, { text, values }] of traceBatches) {
    n += 1;
    await probe.query(`PREPARE plans_${n} AS ${text}`);
    const args = values.map((v) => (v === null ? 'NULL' : Array.isArray(v) ? `ARRAY[${v.map((x) => `'${String(x).replace(/'/g, "''")}'`).join(',')}]::text[]` : `'${String(v).replace(/'/g, "''")}'`));
    for (const mode of ['force_custom_plan', 'force_generic_plan']) {
      await probe.query(`SET plan_cache_mode = ${mode}`);
      const { rows } = await probe.query(`EXPLAIN EXECUTE plans_${n}(${args.join(', ')})`);
      console.log(`\n${name}, ${mode}:`);
      for (const r of rows) console.log(`  ${r['QUERY PLAN']}`);
    }
    await probe.query('RESET plan_cache_mode');
  }
}
if (process.env.STEP_EXPLAIN === '1') {
  const { readFileSync } = await import('node:fs');
  const { join, dirname } = await import('node:path');
  const log = readFileSync(join(dirname(server.dataDir), 'server.log'), 'utf8');
  // The last plan of each statement kind (by its first line).
  const plans = new Map<string, string>();
  for (const entry of log.split(/\n(?=\S+ \S+ UTC \[)/)) {
    const m = /Query Text: ([\s\S]*)/.exec(entry);
    if (m) plans.set(m[1]!.replace(/\s+/g, ' ').slice(0, 200), entry);
  }
  for (const plan of plans.values()) console.log(plan);
}
await probe.end();
await admin.end();
server.stop();
