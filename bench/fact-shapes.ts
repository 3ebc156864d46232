/**
 * What each part of a fenced fact statement costs (issue 14, branch perf-facts): the tool result's
 * and the assistant message's statements (`src/storage/step-sql.ts`) run in a loop, as written and
 * with one part taken out at a time, on a throw-away durable Postgres server (pg_stat_statements:
 * execution ms, WAL records and bytes per statement) and on PGlite in memory (wall ms per statement,
 * the client's share included, which is the same for every shape). Shapes and schema variants are
 * interleaved in rounds so the machine's drift falls on all alike. The variants are measurements, not
 * proposals: some take a guarantee away (see docs/benchmarks.md, "The fact statements' parts").
 * Run: `npx tsx bench/fact-shapes.ts` (knobs: FACT_N statements per shape and round, default 300;
 * FACT_ROUNDS, default 3; FACT_BACKENDS=postgres,pglite).
 */
import pg from 'pg';
import { pgliteStorage } from '../src/storage/pglite.js';
import { postgresStorage } from '../src/storage/postgres.js';
import { statement } from '../src/storage/sql.js';
import type { SqlSessionStorage } from '../src/storage/sql-storage.js';
import { COMMIT_ASSISTANT_MESSAGE, COMMIT_TOOL_RESULT } from '../src/storage/step-sql.js';
// @ts-expect-error plain ESM helper of the peers benchmark
import { startDurablePostgres } from './peers/postgres.mjs';

const N = Number(process.env.FACT_N ?? 300);
const ROUNDS = Number(process.env.FACT_ROUNDS ?? 3);
const BACKENDS = (process.env.FACT_BACKENDS ?? 'postgres,pglite').split(',');
const OWNER = 'bench-owner';

/** A schema variant: SQL run once after the migrations. */
const SCHEMAS: Record<string, string> = {
  schema: '',
  'no FK messages->turns': 'ALTER TABLE messages DROP CONSTRAINT messages_turn_session_fk',
  'no FK messages->sessions': 'ALTER TABLE messages DROP CONSTRAINT messages_session_id_fkey',
  'no uq_messages_tool_result': 'DROP INDEX uq_messages_tool_result',
};

/** Statement shapes: the fenced text as shipped, and with one part changed. */
function shapes(): Record<string, { tool: string; assistant: string }> {
  const tool = COMMIT_TOOL_RESULT.fenced.text;
  const assistant = COMMIT_ASSISTANT_MESSAGE.fenced.text;
  const both = (f: (t: string) => string) => ({ tool: f(tool), assistant: f(assistant) });
  return {
    shipped: { tool, assistant },
    'RETURNING sequence, created_at': both((t) => t.replace(/RETURNING id, session_id, turn_id, sequence, role, content, message_kind, provider_call_id, tool_name, created_at/, 'RETURNING sequence, created_at')),
    'no session row lock': both((t) => t.replace('FROM turns t JOIN sessions s ON s.id = t.session_id', 'FROM turns t')),
    'no fence (plain text)': { tool: COMMIT_TOOL_RESULT.plain.text, assistant: COMMIT_ASSISTANT_MESSAGE.plain.text },
  };
}

interface Cell {
  wallMs: number;
  n: number;
}

async function setUp(storage: SqlSessionStorage, schemaSql: string): Promise<void> {
  await storage.migrate();
  if (schemaSql) await storage.db.query(schemaSql);
}

/** A fresh session, lease and running turn under the lease's token; returns the turn id. */
async function freshTurn(storage: SqlSessionStorage, tag: string): Promise<string> {
  const session = `ses_${tag}`;
  const turn = `turn_${tag}`;
  await storage.db.query(`INSERT INTO sessions (id, working_directory) VALUES ($1, '/work')`, [session]);
  await storage.db.query(`INSERT INTO session_leases (session_id, owner_id, token, expires_at) VALUES ($1, $2, 1, now() + interval '1 hour')`, [session, OWNER]);
  await storage.db.query(
    `INSERT INTO turns (id, session_id, client_request_id, sequence, resolved_provider_id, resolved_model_name, app_version, status, lease_token)
     VALUES ($1, $2, 'r', 1, 'p', 'm', 'bench', 'running', 1)`,
    [turn, session],
  );
  return turn;
}

const CONTENT_TOOL = (callId: string) => JSON.stringify([{ type: 'tool_result', callId, status: 'succeeded', text: 'x'.repeat(200) }]);
const CONTENT_ASSISTANT = (callId: string) => JSON.stringify([{ type: 'text', text: 'y'.repeat(200) }, { type: 'tool_call', callId, name: 'echo', arguments: '{"text":"hi"}' }]);

async function runShape(storage: SqlSessionStorage, name: string, texts: { tool: string; assistant: string }, tag: string, plain: boolean): Promise<Cell> {
  const turn = await freshTurn(storage, tag);
  const tool = statement(`fs_t_${name.replace(/\W/g, '_')}`, texts.tool);
  const assistant = statement(`fs_a_${name.replace(/\W/g, '_')}`, texts.assistant);
  const owners = plain ? [] : [[OWNER]];
  const t0 = performance.now();
  for (let i = 0; i < N; i += 1) {
    const call = `c${i}`;
    await storage.db.query(assistant, [turn, `a_${tag}_${i}`, 'assistant', CONTENT_ASSISTANT(call), 'normal', null, null, 10, 5, 0, 0, 1, false, null, ...owners]);
    await storage.db.query(tool, [turn, `t_${tag}_${i}`, 'tool', CONTENT_TOOL(call), 'normal', call, 'echo', 0, ...owners]);
  }
  return { wallMs: performance.now() - t0, n: 2 * N };
}

async function main(): Promise<void> {
  const server = BACKENDS.includes('postgres')
    ? await startDurablePostgres({ settings: { shared_preload_libraries: 'pg_stat_statements', 'pg_stat_statements.track_planning': 'on' } })
    : null;
  const admin = server ? new pg.Client({ connectionString: server.url('postgres') }) : null;
  await admin?.connect();
  const stores: Array<{ backend: string; schema: string; storage: SqlSessionStorage; url?: string }> = [];
  for (const backend of BACKENDS) {
    for (const [schema, sql] of Object.entries(SCHEMAS)) {
      let storage: SqlSessionStorage;
      let url: string | undefined;
      if (backend === 'postgres') {
        const db = `fs_${stores.length}`;
        await admin!.query(`CREATE DATABASE ${db}`);
        url = server!.url(db);
        storage = postgresStorage({ connectionString: url, max: 1 });
      } else {
        storage = pgliteStorage();
      }
      await setUp(storage, sql);
      if (backend === 'postgres') await storage.db.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
      stores.push({ backend, schema, storage, ...(url ? { url } : {}) });
    }
  }
  const all = shapes();
  const results = new Map<string, Cell[]>();
  let tag = 0;
  const firstPg = stores.find((s) => s.backend === 'postgres');
  // Round 0 warms up (plans, caches) and is not counted.
  for (let round = 0; round <= ROUNDS; round += 1) {
    if (round === 1) {
      results.clear();
      if (firstPg) await firstPg.storage.db.query('SELECT pg_stat_statements_reset()');
    }
    // The order rotates every round (the first shape after a switch of store paid more, measured).
    const rotate = <T,>(xs: T[]) => xs.map((_, i) => xs[(i + round) % xs.length]!);
    for (const store of rotate(stores)) {
      // Statement shapes on the shipped schema; the shipped statement on each schema variant.
      const entries = store.schema === 'schema' ? rotate(Object.entries(all)) : [['shipped', all['shipped']!] as const];
      for (const [name, texts] of entries) {
        const key = `${store.backend}|${store.schema === 'schema' ? name : store.schema}`;
        const cell = await runShape(store.storage, name, texts, `${(tag += 1)}`, name === 'no fence (plain text)');
        results.set(key, [...(results.get(key) ?? []), cell]);
      }
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  console.log(`fact-shapes: ${N} assistant messages + ${N} tool results per shape and round, ${ROUNDS} rounds; wall = client + server, ms per statement (median of rounds)`);
  for (const [key, cells] of results) {
    console.log(`${key.padEnd(45)} wall ${median(cells.map((c) => c.wallMs / c.n)).toFixed(3)} ms`);
  }
  if (server) {
    console.log('\nPostgres, pg_stat_statements per statement (all rounds): exec ms, WAL records, WAL bytes');
    for (const store of stores.filter((s) => s.backend === 'postgres')) {
      const { rows } = await store.storage.db.query<{ query: string; calls: string; exec: number; wal_records: string; wal_bytes: string }>(
        `SELECT query, calls, total_exec_time / calls AS exec, wal_records / calls AS wal_records, wal_bytes / calls AS wal_bytes
         FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls >= $1 AND query LIKE 'WITH locked%'
         ORDER BY query`,
        [N],
      );
      for (const r of rows) {
        const kind = r.query.includes('reserved AS') ? 'tool result' : 'assistant';
        const shape = !r.query.includes('fence_l') ? 'no fence (plain text)' : r.query.includes('RETURNING sequence, created_at') ? 'RETURNING sequence, created_at' : !r.query.includes('JOIN sessions') ? 'no session row lock' : 'shipped';
        const label = store.schema === 'schema' ? shape : `${store.schema} (${shape})`;
        console.log(`  ${label.padEnd(44)} ${kind.padEnd(11)} exec ${Number(r.exec).toFixed(3)} ms  WAL ${Number(r.wal_records).toFixed(1)} rec ${Number(r.wal_bytes).toFixed(0)} B`);
      }
    }
  }
  for (const s of stores) await s.storage.close();
  await admin?.end();
  server?.stop();
}

await main();
