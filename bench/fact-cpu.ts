/**
 * The database's own CPU per fact statement (issue 14, branch perf-pgcpu): the fenced assistant
 * message and tool result of `src/storage/step-sql.ts` (the tool result reserving the next model
 * call, as every step of the peers scenario does) run in a loop, for each schema variant (SQL run
 * after the migrations, each in its own database), interleaved in rounds so that the machine's drift
 * falls on all alike; the figure is the median of the rounds.
 *
 * - `FACT_BACKEND=postgres` (default): one connection of a throw-away durable Postgres server per
 *   variant; the backend process's CPU (utime + stime from /proc: bind, execution, commit and its WAL
 *   flush) per statement, and pg_stat_statements' execution ms and WAL per statement.
 *   `FACT_PERF=<file>` records the backends with `perf record -g` over the measured rounds (`perf
 *   script -F pid,ip,sym` splits the samples by backend, one per variant, as the lines above the
 *   table say).
 * - `FACT_BACKEND=pglite`: one in-memory PGlite per variant, in this process; the process's CPU per
 *   statement (the client's share is the same for every variant).
 *
 * Knobs: FACT_CONTENT_BYTES (the tool result's text size, default 200), FACT_N statements per variant and round (default 1000), FACT_ROUNDS (default 5),
 * FACT_VARIANTS (a comma list of the names to keep), FACT_EXTRA (JSON: more variants, `{name: {sql}}`).
 * Run: `npx tsx bench/fact-cpu.ts`. The variants are measurements, not proposals: "no CHECK" takes
 * rules away, to show what the constraints cost at most (docs/benchmarks.md, "The CHECK
 * constraints' cost per statement").
 */
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { pgliteStorage } from '../src/storage/pglite.js';
import { postgresStorage } from '../src/storage/postgres.js';
import { statement } from '../src/storage/sql.js';
import { COMMIT_ASSISTANT_MESSAGE, COMMIT_TOOL_RESULT } from '../src/storage/step-sql.js';
// @ts-expect-error plain ESM helper of the peers benchmark
import { startDurablePostgres } from './peers/postgres.mjs';

const N = Number(process.env.FACT_N ?? 1000);
const ROUNDS = Number(process.env.FACT_ROUNDS ?? 5);
const BACKEND = process.env.FACT_BACKEND ?? 'postgres';
const OWNER = 'bench-owner';

/**
 * The CHECK constraints migration 0009 rewrote, as migrations 0001-0003 wrote them (the same list
 * as test/storage/check-forms.test.ts), so the variant "before 0009" puts them back.
 */
const BEFORE_0009: Array<[table: string, name: string, expr: string]> = [
  ['turns', 'turns_status_valid', `status IN ('running', 'completed', 'failed', 'cancelled', 'interrupted')`],
  ['turns', 'turns_counts_non_negative', `model_call_count >= 0 AND model_submission_count >= 0 AND tool_call_count >= 0`],
  ['turns', 'turns_tokens_non_negative', `(input_tokens IS NULL OR input_tokens >= 0) AND (output_tokens IS NULL OR output_tokens >= 0) AND (cached_input_tokens IS NULL OR cached_input_tokens >= 0) AND (reasoning_tokens IS NULL OR reasoning_tokens >= 0)`],
  ['turns', 'turns_terminal_time_valid', `(status = 'running' AND ended_at IS NULL) OR (status <> 'running' AND ended_at IS NOT NULL)`],
  ['turns', 'turns_end_after_start', `ended_at IS NULL OR ended_at >= started_at`],
  ['turns', 'turns_plan_unfinished_non_negative', `plan_unfinished_step_count IS NULL OR plan_unfinished_step_count >= 0`],
  ['messages', 'messages_role_valid', `role IN ('system', 'user', 'assistant', 'tool')`],
  ['messages', 'messages_kind_valid', `message_kind IN ('normal', 'skill_instruction', 'agent_message', 'world_state')`],
  ['messages', 'messages_tool_identity_valid', `(role = 'tool' AND provider_call_id IS NOT NULL AND btrim(provider_call_id) <> '' AND tool_name IS NOT NULL AND btrim(tool_name) <> '') OR (role <> 'tool' AND provider_call_id IS NULL AND tool_name IS NULL)`],
];

interface Variant {
  sql?: string;
}
const ALL: Record<string, Variant> = {
  schema: {},
  'before 0009 (old CHECK forms)': { sql: BEFORE_0009.map(([t, n, e]) => `ALTER TABLE ${t} DROP CONSTRAINT ${n}, ADD CONSTRAINT ${n} CHECK (${e})`).join(';\n') },
  'no CHECK on turns, messages': {
    sql: `DO $$ DECLARE c record; BEGIN
    FOR c IN SELECT conrelid::regclass AS t, conname FROM pg_constraint WHERE contype = 'c' AND conrelid IN ('turns'::regclass, 'messages'::regclass)
    LOOP EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', c.t, c.conname); END LOOP; END $$`,
  },
  ...JSON.parse(process.env.FACT_EXTRA ?? '{}'),
};
const keep = process.env.FACT_VARIANTS?.split(',');
const VARIANTS = Object.fromEntries(Object.entries(ALL).filter(([name]) => !keep || keep.includes(name)));

/** A process's CPU in ms (utime + stime, clock ticks of 10 ms). */
function cpuMs(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/**
 * FACT_CONTENT_BYTES: the tool result's text size (default 200; over ~2 kB the row is compressed and
 * TOASTed). The text is this repository's source, as a tool that reads files returns it.
 */
const SOURCE = readFileSync(new URL('../src/storage/step-sql.ts', import.meta.url), 'utf8') + readFileSync(new URL('../src/storage/sql/turns.ts', import.meta.url), 'utf8');
const TOOL_TEXT = SOURCE.repeat(Math.ceil(Number(process.env.FACT_CONTENT_BYTES ?? 200) / SOURCE.length)).slice(0, Number(process.env.FACT_CONTENT_BYTES ?? 200));
const CONTENT_TOOL = (callId: string) => JSON.stringify([{ type: 'tool_result', callId, status: 'succeeded', text: TOOL_TEXT }]);
const CONTENT_ASSISTANT = (callId: string) => JSON.stringify([{ type: 'text', text: 'y'.repeat(200) }, { type: 'tool_call', callId, name: 'echo', arguments: '{"text":"hi"}' }]);

type Query = (text: string | { name: string; text: string }, params?: unknown[]) => Promise<{ rows: Array<Record<string, unknown>> }>;
interface Db {
  name: string;
  query: Query;
  pid: number;
  cpu: number[];
  close: () => Promise<void>;
}

const server = BACKEND === 'postgres' ? await startDurablePostgres({ settings: { shared_preload_libraries: 'pg_stat_statements' } }) : null;
const admin = server ? new pg.Client({ connectionString: server.url('postgres') }) : null;
await admin?.connect();
const dbs: Db[] = [];
let i = 0;
for (const [name, variant] of Object.entries(VARIANTS)) {
  let db: Db;
  if (server) {
    const dbName = `fc_${(i += 1)}`;
    await admin!.query(`CREATE DATABASE ${dbName}`);
    const storage = postgresStorage({ connectionString: server.url(dbName), max: 1 });
    await storage.migrate();
    await storage.close();
    const client = new pg.Client({ connectionString: server.url(dbName) });
    await client.connect();
    await client.query('CREATE EXTENSION pg_stat_statements');
    const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    db = { name, query: (text, params) => client.query(text as string, params), pid: rows[0]!.pid, cpu: [], close: () => client.end() };
    console.log(`${name}: backend pid ${db.pid}`);
  } else {
    const storage = pgliteStorage({ seed: null });
    await storage.migrate();
    db = {
      name,
      query: (text, params) => storage.db.query(typeof text === 'string' ? text : statement(text.name.replace(/^ow_/, ''), text.text), params),
      pid: process.pid,
      cpu: [],
      close: () => storage.close(),
    };
  }
  if (variant.sql) await db.query(variant.sql);
  dbs.push(db);
}

let tag = 0;
async function run(query: Query): Promise<void> {
  tag += 1;
  const session = `ses_${tag}`;
  const turn = `turn_${tag}`;
  await query(`INSERT INTO sessions (id, working_directory) VALUES ($1, '/work')`, [session]);
  await query(`INSERT INTO session_leases (session_id, owner_id, token, expires_at) VALUES ($1, $2, 1, now() + interval '1 hour')`, [session, OWNER]);
  await query(
    `INSERT INTO turns (id, session_id, client_request_id, sequence, resolved_provider_id, resolved_model_name, app_version, status, lease_token)
     VALUES ($1, $2, 'r', 1, 'p', 'm', 'bench', 'running', 1)`,
    [turn, session],
  );
  const a = COMMIT_ASSISTANT_MESSAGE.fenced;
  const t = COMMIT_TOOL_RESULT.fenced;
  for (let k = 0; k < N / 2; k += 1) {
    const call = `c${k}`;
    await query({ name: a.name, text: a.text }, [turn, `a_${tag}_${k}`, 'assistant', CONTENT_ASSISTANT(call), 'normal', null, null, 10, 5, 0, 0, 1, false, null, [OWNER]]);
    await query({ name: t.name, text: t.text }, [turn, `t_${tag}_${k}`, 'tool', CONTENT_TOOL(call), 'normal', call, 'echo', k + 1, [OWNER]]);
  }
}

// FACT_PERF=<file>: `perf record -g` of the variants' backends over the measured rounds.
let perfChild: import('node:child_process').ChildProcess | undefined;
// FACT_CPU_PROF=<file> (PGlite): a V8 CPU profile of the measured rounds only, for
// bench/peers/pglite-wasm-profile.mjs <file> <statements> (PGlite's backend runs in this process).
const { Session } = await import('node:inspector/promises');
const inspector = process.env.FACT_CPU_PROF && !server ? new Session() : null;
for (let round = 0; round <= ROUNDS; round += 1) {
  if (round === 1 && inspector) {
    inspector.connect();
    await inspector.post('Profiler.enable');
    await inspector.post('Profiler.start');
  }
  if (round === 1 && process.env.FACT_PERF && server) {
    const { spawn } = await import('node:child_process');
    perfChild = spawn('perf', ['record', '-F', '2999', '-g', '-o', process.env.FACT_PERF, '-p', dbs.map((d) => d.pid).join(',')], { stdio: 'ignore' });
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  const order = dbs.map((_, k) => dbs[(k + round) % dbs.length]!);
  for (const db of order) {
    const c0 = cpuMs(db.pid);
    await run(db.query);
    if (round > 0) db.cpu.push((cpuMs(db.pid) - c0) / N);
  }
}
if (inspector) {
  const { profile } = await inspector.post('Profiler.stop');
  const { writeFileSync } = await import('node:fs');
  writeFileSync(process.env.FACT_CPU_PROF!, JSON.stringify(profile));
  inspector.disconnect();
}
if (perfChild) {
  perfChild.kill('SIGINT');
  await new Promise((resolve) => perfChild!.once('exit', resolve));
}
const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
console.log(`fact-cpu on ${BACKEND}: ${N} fenced facts (half assistant messages, half tool results) per variant and round, ${ROUNDS} rounds; ${server ? 'backend' : 'process'} CPU ms per statement, median (min-max)`);
for (const db of dbs) {
  let parts = '';
  if (server) {
    // pg_stat_statements of this database (all rounds): execution ms and WAL records and bytes per statement.
    const { rows } = await db.query(
      `SELECT CASE WHEN query LIKE '%input_tokens%' THEN 'assistant' ELSE 'tool' END AS kind,
         sum(total_exec_time) / sum(calls) AS exec, sum(wal_records)::float8 / sum(calls) AS rec, sum(wal_bytes)::float8 / sum(calls) AS bytes
       FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls >= $1
         AND query LIKE 'WITH%' GROUP BY 1 ORDER BY 1`,
      [N / 2],
    );
    parts = rows.map((r) => `${r.kind} exec ${Number(r.exec).toFixed(3)} ms ${Number(r.rec).toFixed(1)} rec ${Number(r.bytes).toFixed(0)} B`).join('; ');
  }
  console.log(`${db.name.padEnd(32)} ${median(db.cpu).toFixed(4)} (${Math.min(...db.cpu).toFixed(4)}-${Math.max(...db.cpu).toFixed(4)})  ${parts}`);
}
for (const db of dbs) await db.close();
await admin?.end();
server?.stop();
