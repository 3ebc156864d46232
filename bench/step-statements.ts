/**
 * Counts what one durable tool step of openwork-core costs on Postgres: statements (each a round
 * trip), write transactions (commits) and WAL bytes, on a throw-away server with default durability
 * (fsync on), with the peers benchmark's scenario (bench/peers/scenario.mjs). Run from the source:
 * `npx tsx bench/step-statements.ts` (knobs: STEP_TURNS, default 20; STEP_TRACE=0 drops the trace).
 * It prints the statements per step grouped by their first words, so a change to the step's SQL shows
 * up as a change in this table (docs/benchmarks.md, "Run 4").
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { z } from 'zod';
import { createCore, defineTool, postgresStorage } from '../src/index.js';
// @ts-expect-error plain ESM helper of the peers benchmark
import { startDurablePostgres } from './peers/postgres.mjs';
// @ts-expect-error plain ESM helper of the peers benchmark
import { decide, FINAL_TEXT, instantTool, USER_TEXT, K } from './peers/scenario.mjs';

const TURNS = Number(process.env.STEP_TURNS ?? 20);
const counts = new Map<string, number>();
let counting = false;
const original = pg.Client.prototype.query;
pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
  if (counting) {
    const first = args[0];
    const text = typeof first === 'string' ? first : ((first as { text?: string; name?: string })?.text ?? (first as { name?: string })?.name ?? '?');
    const key = text.replace(/\s+/g, ' ').trim().slice(0, 60);
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return (original as (...a: unknown[]) => unknown).apply(this, args);
} as typeof pg.Client.prototype.query;

const server = await startDurablePostgres();
const admin = new pg.Client({ connectionString: server.url('postgres') });
await admin.connect();
await admin.query('CREATE DATABASE steps');
const url = server.url('steps');
const probe = new pg.Client({ connectionString: url });
await probe.connect();

let calls = 0;
const model = {
  id: 'fake/zero',
  providerId: 'fake',
  model: 'zero',
  contextWindow: 200_000,
  maxOutputTokens: 8_000,
  async *stream(request: { messages: Array<{ role: string }> }) {
    let results = 0;
    for (const m of request.messages) if (m.role === 'tool') results += 1;
    const next = decide(results);
    const usage = { inputTokens: 100, outputTokens: 10, cachedInputTokens: 0, reasoningTokens: 0 };
    if (next === null) {
      yield { type: 'text_delta', delta: FINAL_TEXT };
      yield { type: 'completed', usage, finishReason: 'stop' };
      return;
    }
    calls += 1;
    yield { type: 'tool_call', callId: `call_${calls}`, name: 'instant', arguments: JSON.stringify({ i: next }) };
    yield { type: 'completed', usage, finishReason: 'tool_use' };
  },
};
const instant = defineTool({ name: 'instant', description: 'Returns at once.', parameters: z.object({ i: z.number() }), execute: ({ i }) => instantTool(i) });
const noTrace = {
  record() {},
  async flush() {
    return { flushed: true, droppedSignals: 0, writeFailures: 0, written: 0, queued: 0 };
  },
  stats: () => ({ droppedSignals: 0, writeFailures: 0, written: 0, queued: 0 }),
  async close() {},
};
const core = await createCore({
  storage: postgresStorage({ connectionString: url, max: 10 }),
  model: model as never,
  tools: [instant],
  worldState: false,
  ...(process.env.STEP_TRACE === '0' ? { trace: noTrace } : {}),
});
const turn = async () => {
  const session = await core.createSession({ workingDirectory: process.cwd() });
  const { turnId } = await session.startTurn({ clientRequestId: randomUUID(), input: [{ type: 'text', text: USER_TEXT }] });
  const outcome = await session.waitForTurn(turnId);
  if (outcome.status !== 'completed') throw new Error(`turn ended ${JSON.stringify(outcome)}`);
};
for (let i = 0; i < 3; i += 1) await turn();
await core.flushTrace(60_000);

const snap = async () => {
  const { rows } = await probe.query(`SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax, pg_current_wal_lsn() AS lsn`);
  return rows[0] as { xmax: string; lsn: string };
};
const before = await snap();
counting = true;
const t0 = performance.now();
for (let i = 0; i < TURNS; i += 1) await turn();
await core.flushTrace(60_000);
const wall = performance.now() - t0;
counting = false;
const after = await snap();
const { rows } = await probe.query(`SELECT pg_wal_lsn_diff($1, $2)::bigint AS wal`, [after.lsn, before.lsn]);
const steps = TURNS * K;
const total = [...counts.values()].reduce((a, b) => a + b, 0);
console.log(`turns ${TURNS}, steps ${steps}, wall/step ${(wall / steps).toFixed(2)} ms`);
console.log(`statements (round trips) / step ${(total / steps).toFixed(2)}`);
console.log(`commits / step ${((Number(after.xmax) - Number(before.xmax)) / steps).toFixed(2)}`);
console.log(`WAL / step ${(Number(rows[0].wal) / steps).toFixed(0)} B`);
for (const [text, n] of [...counts.entries()].sort((a, b) => b[1] - a[1])) console.log(`${(n / steps).toFixed(2).padStart(6)}  ${text}`);
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
await core.shutdown();
await probe.end();
await admin.end();
server.stop();
