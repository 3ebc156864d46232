/**
 * Counts what a step of the peers scenario asks of PGlite in memory (issue 14 point 2): transactions,
 * statements, and calls into the WASM backend, and times each call by the protocol message that opens
 * it: Parse (parse, analyse and plan a text), Bind (bind, plan a prepared statement's parameters and
 * execute it), simple Query (BEGIN, COMMIT, scripts), Describe, Sync. The split of the backend's time
 * into parse/plan and execute comes from those kinds (the WASM module has no function names).
 * `node bench/peers/pglite-calls.mjs [dist-dir]` after `npm run build`.
 */
import { randomUUID } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { z } from '../../node_modules/zod/index.js';
import { PGlite } from '../../node_modules/@electric-sql/pglite/dist/index.js';
import { USER_TEXT, K } from './scenario.mjs';
import { fakeModelPort, instantToolOf } from './openwork-setup.mjs';

const dist = resolve(process.argv[2] ?? new URL('../../dist', import.meta.url).pathname);
const { createCore, defineTool, pgliteStorage } = await import(pathToFileURL(`${dist}/index.js`).href);

let counting = false;
const calls = new Map(); // first message type -> { n, ms }
let statements = 0;
const KINDS = { P: 'Parse (+Describe)', B: 'Bind+Execute (prepared or unnamed)', Q: 'simple Query (BEGIN/COMMIT/script)', D: 'Describe', S: 'Sync', E: 'Execute', H: 'Flush' };
const rawSync = PGlite.prototype.execProtocolRawSync;
PGlite.prototype.execProtocolRawSync = function (message) {
  if (!counting) return rawSync.call(this, message);
  const t0 = performance.now();
  const out = rawSync.call(this, message);
  const ms = performance.now() - t0;
  let kind = KINDS[String.fromCharCode(message[0])] ?? String.fromCharCode(message[0]);
  // A buffer that opens with BEGIN's simple query and goes on with a statement counts as the latter.
  if (message[0] === 81 && message.length > 11) {
    const next = String.fromCharCode(message[11]);
    if (KINDS[next] && next !== 'S') kind = `BEGIN + ${KINDS[next]}`;
  }
  const entry = calls.get(kind) ?? { n: 0, ms: 0 };
  entry.n += 1;
  entry.ms += ms;
  calls.set(kind, entry);
  // One Parse or one Bind of a named statement is one statement; BEGIN/COMMIT count apart.
  if (message[0] === 80) statements += 1;
  return out;
};
// PGlite's query() parses every time (a Parse per statement); the prepared path binds without Parse.
// Count statements as Execute messages in the buffers instead: robust to both.
let executes = 0;
let transactions = 0;
const stream = PGlite.prototype.execProtocolStream;
PGlite.prototype.execProtocolStream = function (message, options) {
  if (counting) {
    for (let i = 0; i + 5 <= message.length; ) {
      const type = message[i];
      const length = (message[i + 1] << 24) | (message[i + 2] << 16) | (message[i + 3] << 8) | message[i + 4];
      if (type === 69) executes += 1;
      if (type === 81) {
        const text = Buffer.from(message.subarray(i + 5, i + length)).toString('utf8').replace(/\0$/, '');
        if (text === 'BEGIN') transactions += 1;
        else if (text !== 'COMMIT' && text !== 'ROLLBACK') executes += 1;
      }
      i += 1 + length;
    }
  }
  return stream.call(this, message, options);
};

const instant = instantToolOf(defineTool, z);
const model = fakeModelPort();

// PGLITE_SETTINGS='name=value,...': extra Postgres settings to try (e.g. plan_cache_mode).
const postgresSettings = Object.fromEntries((process.env.PGLITE_SETTINGS ?? '').split(',').filter(Boolean).map((kv) => kv.split('=')));
const storage = pgliteStorage({ postgresSettings });
const core = await createCore({ storage, model, tools: [instant], worldState: false });
const TURNS = Number(process.env.PGLITE_CALLS_TURNS ?? 20);
const run = async () => {
  const session = await core.createSession({ workingDirectory: process.cwd() });
  const { turnId } = await session.startTurn({ clientRequestId: randomUUID(), input: [{ type: 'text', text: USER_TEXT }] });
  const outcome = await session.waitForTurn(turnId);
  if (outcome.status !== 'completed') throw new Error(JSON.stringify(outcome));
};
for (let i = 0; i < 3; i++) await run();
counting = true;
for (let i = 0; i < TURNS; i++) await run();
counting = false;
const steps = TURNS * K;
const per = (n) => (n / steps).toFixed(2);
let wasmMs = 0;
let wasmCalls = 0;
for (const { n, ms } of calls.values()) {
  wasmMs += ms;
  wasmCalls += n;
}
console.log(`${dist}: per step (${TURNS} turns x ${K} tool steps, turn overhead included)`);
console.log(`statements ${per(executes)}, transactions ${per(transactions)}, Parse messages ${per(statements)}, calls into the backend ${per(wasmCalls)}, time in those calls ${(wasmMs / steps).toFixed(3)} ms`);
console.log('| first message of the call | calls/step | ms/step | ms/call |');
console.log('|---|---|---|---|');
for (const [kind, { n, ms }] of [...calls].sort((a, b) => b[1].ms - a[1].ms)) {
  console.log(`| ${kind} | ${per(n)} | ${(ms / steps).toFixed(3)} | ${(ms / n).toFixed(3)} |`);
}
if (storage.db) {
  const { rows } = await storage.db.query('SELECT name, generic_plans, custom_plans FROM pg_prepared_statements ORDER BY custom_plans + generic_plans DESC');
  console.log('prepared statements (plans over the whole run):', rows.map((r) => `${r.name} generic ${r.generic_plans} custom ${r.custom_plans}`).join('; '));
}
await core.shutdown();
