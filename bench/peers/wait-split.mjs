/**
 * Where a step's wait on Postgres goes (issue 14 point 2, "the wait"): runs the peers scenario on
 * openwork-core over Postgres (fsync on) serially, timestamps every statement the build's `pg`
 * client sends and the moment its answer reaches JavaScript, and splits the wall time of the
 * measured turns into: time with a statement on the critical path in flight (per statement name:
 * round trips per step and mean latency), time with only a background statement (the trace batch,
 * lease renewal) in flight, and time with nothing in flight (Node's own work, timers, hops).
 *
 * `node bench/peers/wait-split.mjs [dist-dir]` after `npm run build`; BENCH_PEERS_TURNS (30) serial
 * turns in WAIT_ROUNDS (6) rounds after BENCH_PEERS_WARMUP (10), the systems taking turns round by
 * round: the build, `WAIT_BASE_DIST=<dist>` another build, `WAIT_TRACE_OFF=1` the build with the
 * trace dropped, `WAIT_FLOOR=1` the raw `pg` floor; `WAIT_STRACE=1` counts the server's WAL syscalls.
 * The figures are wall clock and move with the load; compare systems of one run, not across runs.
 * (A takeover scan's BEGIN and COMMIT are counted as critical-path statements: only the scan's own
 * statement is recognised as background.)
 */
import { spawn, execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startDurablePostgres } from './postgres.mjs';
import { K } from './scenario.mjs';
import { setupOpenwork } from './systems/openwork.mjs';
import { setupPg } from './systems/floor.mjs';

const TURNS = Number(process.env.BENCH_PEERS_TURNS ?? 30);
const WARMUP = Number(process.env.BENCH_PEERS_WARMUP ?? 10);
const dist = process.argv[2] ? resolve(process.argv[2]) : resolve(fileURLToPath(new URL('../../dist', import.meta.url)));

/** The `pg` the build loads (its own createRequire from dist/storage), not the bench's copy. */
const buildPg = createRequire(join(dist, 'storage', 'postgres.js'))('pg');

/** Background statements: not on a step's critical path (the trace is written behind the turn). */
const BACKGROUND = /^(ow_trace_batch|ow_span_|UPDATE session_leases|WITH running AS)/;

let recording = false;
/** The event loop's idle time so far (ms): it grows only while the main thread waits in epoll. */
const idleNow = () => performance.eventLoopUtilization().idle;
/** @type {{ key: string, start: number, end: number, background: boolean }[]} */
let spans = [];

function patch(Client) {
  const original = Client.prototype.query;
  Client.prototype.query = function (...args) {
    if (!recording) return original.apply(this, args);
    const first = args[0];
    const text = typeof first === 'string' ? first : (first?.text ?? '?');
    const name = typeof first === 'object' && first !== null ? first.name : undefined;
    const key = name ?? text.replace(/\s+/g, ' ').trim().slice(0, 50);
    const span = { key, start: performance.now(), end: NaN, idleStart: idleNow(), idleEnd: NaN, background: BACKGROUND.test(key) };
    spans.push(span);
    const done = () => {
      span.end = performance.now();
      span.idleEnd = idleNow();
    };
    const last = args.length - 1;
    if (typeof args[last] === 'function') {
      const cb = args[last];
      args[last] = function (...r) {
        done();
        return cb.apply(this, r);
      };
      return original.apply(this, args);
    }
    if (first && typeof first === 'object' && typeof first.callback === 'function') {
      const cb = first.callback;
      first.callback = function (...r) {
        done();
        return cb.apply(this, r);
      };
      return original.apply(this, args);
    }
    const result = original.apply(this, args);
    if (result && typeof result.then === 'function') result.then(done, done);
    return result;
  };
}
patch(buildPg.Client);
if (pg.Client !== buildPg.Client) patch(pg.Client);

/** Length of the union of intervals. */
function union(intervals) {
  const sorted = intervals.filter((s) => Number.isFinite(s.end)).map((s) => [s.start, s.end]).sort((a, b) => a[0] - b[0]);
  let total = 0;
  let cur = null;
  for (const [a, b] of sorted) {
    if (!cur || a > cur[1]) {
      if (cur) total += cur[1] - cur[0];
      cur = [a, b];
    } else cur[1] = Math.max(cur[1], b);
  }
  if (cur) total += cur[1] - cur[0];
  return total;
}

/**
 * The event loop's idle time split by what was in flight: each send and answer is an event with the
 * idle time at that moment; the idle time between two events is charged to the state between them.
 */
function idleSplit(idleTotal, t0, t1, idle0) {
  const events = [];
  for (const s of spans) {
    if (!Number.isFinite(s.end)) continue;
    events.push({ t: s.start, idle: s.idleStart, d: 1, bg: s.background });
    events.push({ t: s.end, idle: s.idleEnd, d: -1, bg: s.background });
  }
  events.sort((a, b) => a.t - b.t);
  let fg = 0;
  let bg = 0;
  let lastIdle = idle0;
  const out = { fg: 0, bgOnly: 0, nothing: 0 };
  for (const e of events) {
    const delta = e.idle - lastIdle;
    if (fg > 0) out.fg += delta;
    else if (bg > 0) out.bgOnly += delta;
    else out.nothing += delta;
    lastIdle = e.idle;
    if (e.bg) bg += e.d;
    else fg += e.d;
  }
  out.nothing += idleTotal - lastIdle;
  return out;
}

function report(label, wall, steps, idleTotal, idle, rounds) {
  const fg = spans.filter((s) => !s.background);
  const bg = spans.filter((s) => s.background);
  const fgTime = union(fg);
  const anyTime = union(spans);
  const per = (ms) => (ms / steps).toFixed(3);
  console.log(`\n${label}: ${steps} steps, wall ${per(wall)} ms/step`);
  console.log(`  critical-path statements in flight ${per(fgTime)} ms/step; only background in flight ${per(anyTime - fgTime)}; nothing in flight ${per(wall - anyTime)}`);
  console.log(`  event loop idle ${per(idleTotal)} ms/step: while a critical-path statement is in flight ${per(idle.fg)}, only background ${per(idle.bgOnly)}, nothing in flight ${per(idle.nothing)}`);
  const byKey = new Map();
  for (const s of spans) {
    const e = byKey.get(s.key) ?? { n: 0, ms: 0, bg: s.background, max: 0 };
    e.n += 1;
    e.ms += s.end - s.start;
    e.max = Math.max(e.max, s.end - s.start);
    byKey.set(s.key, e);
  }
  console.log('  | statement | per step | mean latency ms | max ms | ms/step | background |');
  for (const [k, e] of [...byKey].sort((a, b) => b[1].ms - a[1].ms)) {
    console.log(`  | ${k} | ${(e.n / steps).toFixed(2)} | ${(e.ms / e.n).toFixed(3)} | ${e.max.toFixed(2)} | ${per(e.ms)} | ${e.bg ? 'yes' : ''} |`);
  }
  // The gaps on the critical path: from one foreground answer to the next foreground send.
  const gaps = new Map();
  for (const round of rounds) {
    const ordered = round.filter((s) => !s.background && Number.isFinite(s.end)).sort((a, b) => a.start - b.start);
    for (let i = 1; i < ordered.length; i += 1) {
      const gap = ordered[i].start - ordered[i - 1].end;
      if (gap < 0) continue;
      const key = `${ordered[i - 1].key} -> ${ordered[i].key}`;
      const e = gaps.get(key) ?? { n: 0, ms: 0 };
      e.n += 1;
      e.ms += gap;
      gaps.set(key, e);
    }
  }
  console.log('  gaps between a critical-path answer and the next critical-path send:');
  for (const [k, e] of [...gaps].sort((a, b) => b[1].ms - a[1].ms).slice(0, 8)) {
    console.log(`    ${(e.n / steps).toFixed(2)}/step, mean ${(e.ms / e.n).toFixed(3)} ms, ${per(e.ms)} ms/step  ${k}`);
  }
}

/**
 * WAIT_STRACE=1: every server process (backends, WAL writer, checkpointer) is traced for the measured
 * turns and the WAL syscalls are counted: how many flushes a step costs, and how long they take.
 */
async function straced(fn) {
  if (process.env.WAIT_STRACE !== '1') return fn();
  const pids = execFileSync('pgrep', ['-f', 'postgres'], { encoding: 'utf8' })
    .split('\n')
    .filter(Boolean)
    .filter((p) => {
      try {
        return execFileSync('cat', [`/proc/${p}/cmdline`], { encoding: 'utf8' }).includes(server.dataDir) || isChild(p);
      } catch {
        return false;
      }
    });
  const tracer = spawn('strace', ['-c', '-f', '-e', 'trace=fdatasync,fsync,pwrite64,write,sendto,recvfrom,epoll_wait', ...pids.flatMap((p) => ['-p', p])], { stdio: ['ignore', 'ignore', 'pipe'] });
  let out = '';
  tracer.stderr.on('data', (d) => (out += d));
  await new Promise((r) => setTimeout(r, 500));
  try {
    return await fn();
  } finally {
    tracer.kill('SIGINT');
    await new Promise((r) => tracer.on('close', r));
    console.log(out);
  }
}

/** A process whose parent is the server's postmaster. */
function isChild(pid) {
  const stat = execFileSync('cat', [`/proc/${pid}/stat`], { encoding: 'utf8' });
  const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  return ppid === server.postmasterPid();
}

const server = await startDurablePostgres();
const admin = new pg.Client({ connectionString: server.url('postgres') });
await admin.connect();

/**
 * The systems measured, interleaved round by round so that the machine's load falls on each alike:
 * the build under test, `WAIT_BASE_DIST` (another build, e.g. main's) beside it, `WAIT_TRACE_OFF=1`
 * the build with the trace recorder dropping every signal, `WAIT_FLOOR=1` the raw `pg` floor.
 */
const systems = [];
const dir = mkdtempSync(join(tmpdir(), 'openwork-wait-split-'));
async function add(label, setup) {
  const db = `wait${systems.length}`;
  await admin.query(`CREATE DATABASE ${db}`);
  systems.push({ label, system: await setup({ url: server.url(db), dir }), spans: [], rounds: [], wall: 0, idle: 0, idleParts: { fg: 0, bgOnly: 0, nothing: 0 }, steps: 0 });
}
if (process.env.WAIT_FLOOR === '1') await add('raw pg floor', setupPg());
if (process.env.WAIT_BASE_DIST) await add(`openwork-core, ${process.env.WAIT_BASE_DIST}`, setupOpenwork('postgres', { dist: resolve(process.env.WAIT_BASE_DIST) }));
await add(`openwork-core, ${dist}`, setupOpenwork('postgres', { dist }));
if (process.env.WAIT_TRACE_OFF === '1') await add(`openwork-core, trace off, ${dist}`, setupOpenwork('postgres', { dist, trace: false }));
await admin.end();

const ROUNDS = Number(process.env.WAIT_ROUNDS ?? 6);
try {
  for (const s of systems) {
    for (let i = 0; i < WARMUP; i += 1) await s.system.turn();
    await s.system.drain?.();
  }
  const perRound = Math.max(1, Math.round(TURNS / ROUNDS));
  for (let r = 0; r < ROUNDS; r += 1) {
    for (const s of systems) {
      spans = [];
      recording = true;
      const idle0 = idleNow();
      const t0 = performance.now();
      await straced(async () => {
        for (let i = 0; i < perRound; i += 1) await s.system.turn();
      });
      const wall = performance.now() - t0;
      const idle1 = idleNow();
      recording = false;
      // The trace written behind these turns is drained outside the measured time, as the peers run does.
      await s.system.drain?.();
      const parts = idleSplit(idle1, 0, 0, idle0);
      s.wall += wall;
      s.idle += idle1 - idle0;
      for (const k of Object.keys(parts)) s.idleParts[k] += parts[k];
      s.spans.push(...spans);
      s.rounds.push(spans);
      s.steps += perRound * K;
    }
  }
  for (const s of systems) {
    spans = s.spans;
    report(s.label, s.wall, s.steps, s.idle, s.idleParts, s.rounds);
  }
} finally {
  for (const s of systems) await s.system.close();
  rmSync(dir, { recursive: true, force: true });
  server.stop();
}
