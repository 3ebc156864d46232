/**
 * `npm run bench:peers`: the peers benchmark of issue 14. Starts a PostgreSQL server with default
 * durability (fsync on), then runs every system of systems/index.mjs in its own child process, one
 * after the other in one sitting, each on its own database. Around each measured phase it snapshots
 * the server: transaction ids assigned (one per write transaction, i.e. per durable commit), WAL
 * position, and the server processes' CPU time. Prints one table and each figure as a ratio to the
 * floor (raw pg, or raw PGlite of the same kind) and to LangGraph + PostgresSaver (sync).
 *
 * Every system runs BENCH_PEERS_ROUNDS times (3), in rounds: each round runs every system once, in
 * an order rotated by one from the round before, and each figure printed is the median of a system's
 * rounds. A machine whose speed drifts over minutes (a shared VM: the same statement's server time
 * was seen to double between two runs minutes apart) then shifts every system alike instead of
 * whichever ran in the slow minutes.
 *
 * Knobs: BENCH_PEERS_ROUNDS (3), BENCH_PEERS_TURNS (serial turns, 30), BENCH_PEERS_SESSIONS (sessions at once, 100),
 * BENCH_PEERS_WARMUP (5), BENCH_PEERS_ONLY (comma-separated system names), BENCH_K (tool steps, 10),
 * BENCH_PEERS_JSON (write the raw results to this file), BENCH_PEERS_CPU_PROF (a directory: each
 * child writes a CPU profile of its serial phase there; read it with profile.mjs).
 */
import { fork } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { loadavg, cpus } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { postgresCpuMs, startDurablePostgres } from './postgres.mjs';
import { K } from './scenario.mjs';
import { SYSTEMS } from './systems/index.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const only = process.env.BENCH_PEERS_ONLY?.split(',').map((s) => s.trim()).filter(Boolean);
const names = Object.keys(SYSTEMS).filter((n) => !only || only.includes(n));

const server = await startDurablePostgres();
const admin = new pg.Client({ connectionString: server.url('postgres') });
await admin.connect();
const settings = (await admin.query(`SELECT name, setting FROM pg_settings WHERE name IN ('fsync','synchronous_commit','full_page_writes','wal_sync_method') ORDER BY name`)).rows;
const version = (await admin.query('SHOW server_version')).rows[0].server_version;

async function snapshot() {
  // pg_current_snapshot's xmax is the next transaction id: reading it assigns none.
  const { rows } = await admin.query(`SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xid, pg_current_wal_lsn() AS lsn`);
  return { xid: Number(rows[0].xid), lsn: rows[0].lsn, pgCpuMs: postgresCpuMs(server.postmasterPid()) };
}

async function walBytes(from, to) {
  const { rows } = await admin.query('SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::bigint AS bytes', [from, to]);
  return Number(rows[0].bytes);
}

function runChild(name, round) {
  return new Promise((resolve, reject) => {
    const db = `peers_${name.replace(/-/g, '_')}_${round}`;
    const child = fork(join(here, 'child.mjs'), [name], { env: { ...process.env, BENCH_PG_URL: server.url(db) }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const result = { name, phases: {} };
    let before = null;
    // Messages are handled one after the other: a phase's closing snapshot must be taken before the
    // next phase's opening one.
    let chain = Promise.resolve();
    child.on('message', (m) => (chain = chain.then(() => handle(m)).catch(reject)));
    async function handle(m) {
      {
        if (m.type === 'ready') {
          before = await snapshot();
          child.send('go');
        } else if (m.type === 'done') {
          const after = await snapshot();
          const steps = m.turns * K;
          result.phases[m.phase] = {
            wallMs: m.wallMs,
            turns: m.turns,
            wallPerStepMs: m.wallMs / steps,
            cpuPerStepMs: m.cpuMs / steps,
            turnsPerSec: (m.turns * 1000) / m.wallMs,
            commitsPerStep: (after.xid - before.xid) / steps,
            walBytesPerStep: (await walBytes(before.lsn, after.lsn)) / steps,
            pgCpuPerStepMs: (after.pgCpuMs - before.pgCpuMs) / steps,
          };
        } else if (m.type === 'end') result.maxRssMb = m.maxRssMb;
      }
    }
    child.on('exit', (code) => chain.then(() => (code === 0 && result.maxRssMb ? resolve(result) : reject(new Error(`${name} exited with ${code}`)))));
    admin.query(`CREATE DATABASE ${db}`).catch(reject);
  });
}

const SESSIONS = Number(process.env.BENCH_PEERS_SESSIONS ?? 100);
const ROUNDS = Math.max(1, Number(process.env.BENCH_PEERS_ROUNDS ?? 3));
const runs = Object.fromEntries(names.map((n) => [n, []]));
const started = new Date();
for (let round = 0; round < ROUNDS; round += 1) {
  const order = names.map((_, i) => names[(i + round) % names.length]);
  for (const name of order) {
    process.stderr.write(`round ${round + 1}/${ROUNDS}: running ${name} ...\n`);
    runs[name].push(await runChild(name, round));
  }
}

/** The median of each figure over a system's rounds (the mean of the middle two for an even count). */
function median(values) {
  const v = [...values].sort((a, b) => a - b);
  const mid = v.length >> 1;
  return v.length % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}
function medianRun(list) {
  const phases = {};
  for (const phase of Object.keys(list[0].phases)) {
    phases[phase] = Object.fromEntries(Object.keys(list[0].phases[phase]).map((key) => [key, median(list.map((r) => r.phases[phase][key]))]));
  }
  return { name: list[0].name, phases, maxRssMb: median(list.map((r) => r.maxRssMb)) };
}
const results = Object.fromEntries(names.map((n) => [n, medianRun(runs[n])]));
await admin.end();
server.stop();

// ---------- the table ----------
const fmt = (v, d = 2) => (v === undefined || Number.isNaN(v) ? '' : v.toFixed(d));
const ratio = (a, b) => (a === undefined || !b ? '' : `${(a / b).toFixed(1)}x`);
const floorOf = (name) => (name.includes('pglite-mem') ? 'floor-pglite-mem' : name.includes('pglite-file') ? 'floor-pglite-file' : 'floor-pg');
const LG = 'langgraph-pg-sync';

const rows = [];
for (const name of names) {
  const r = results[name];
  const s = r.phases.serial;
  const c = r.phases.concurrent;
  const pgSystem = SYSTEMS[name].postgres;
  rows.push({
    name,
    label: SYSTEMS[name].label,
    wall: s.wallPerStepMs,
    cpu: s.cpuPerStepMs,
    pgCpu: pgSystem ? s.pgCpuPerStepMs : undefined,
    commits: pgSystem ? s.commitsPerStep : undefined,
    wal: pgSystem ? s.walBytesPerStep : undefined,
    concWall: c.wallMs / 1000,
    turnsPerSec: c.turnsPerSec,
    concCpu: c.cpuPerStepMs,
    rss: r.maxRssMb,
    durable: SYSTEMS[name].durable,
  });
}
const byName = Object.fromEntries(rows.map((r) => [r.name, r]));

const out = [];
out.push(`peers benchmark, ${started.toISOString()}: Node ${process.version}, PostgreSQL ${version} (${settings.map((s) => `${s.name}=${s.setting}`).join(', ')}), ${cpus().length} cores, load average at end ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
out.push(`scenario: K=${K} tool steps per turn (${K + 1} model calls), a fresh session/thread per turn; serial ${results[names[0]].phases.serial.turns} turns; ${results[names[0]].phases.concurrent.turns} sessions at once, 1 turn each; each figure the median of ${ROUNDS} round${ROUNDS === 1 ? '' : 's'} (systems interleaved)`);
out.push('');
out.push(`| system | wall/step ms | Node CPU/step ms | PG CPU/step ms | commits/step | WAL B/step | ${SESSIONS} at once: s | turns/s | Node CPU/step at once ms | peak RSS MB | durable |`);
out.push('|---|---|---|---|---|---|---|---|---|---|---|');
for (const r of rows) {
  out.push(`| ${r.label} | ${fmt(r.wall)} | ${fmt(r.cpu)} | ${fmt(r.pgCpu)} | ${fmt(r.commits, 1)} | ${fmt(r.wal, 0)} | ${fmt(r.concWall)} | ${fmt(r.turnsPerSec, 0)} | ${fmt(r.concCpu)} | ${fmt(r.rss, 0)} | ${r.durable ? 'yes' : 'no'} |`);
}
out.push('');
out.push('Ratios: each durable system to its floor (raw pg, or raw PGlite of the same kind) / to LangGraph + PostgresSaver (sync). Lower is better.');
out.push('');
out.push(`| system | wall/step | Node CPU/step | PG CPU/step | commits/step | WAL/step | ${SESSIONS} at once: wall | peak RSS |`);
out.push('|---|---|---|---|---|---|---|---|');
for (const r of rows) {
  const f = byName[floorOf(r.name)];
  const l = byName[LG];
  const pair = (key) => `${ratio(r[key], f?.[key]) || '–'} / ${ratio(r[key], l?.[key]) || '–'}`;
  out.push(`| ${r.label} | ${pair('wall')} | ${pair('cpu')} | ${pair('pgCpu')} | ${pair('commits')} | ${pair('wal')} | ${pair('concWall')} | ${pair('rss')} |`);
}
console.log(out.join('\n'));
if (process.env.BENCH_PEERS_JSON) writeFileSync(process.env.BENCH_PEERS_JSON, JSON.stringify({ started, rounds: runs, results }, null, 2));
process.exit(0);
