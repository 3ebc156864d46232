/**
 * Where a step's Node CPU goes beyond the main thread (issue 14 point 2): runs the peers scenario on
 * openwork-core over Postgres (fsync on) serially and splits the process's CPU time into user and
 * kernel time (`process.resourceUsage()`), and into the main thread and every other thread of the
 * process (V8's GC and compiler workers, libuv's pool), read from /proc/self/task on Linux.
 *
 * `node bench/peers/cpu-split.mjs [dist-dir]` after `npm run build`; BENCH_PEERS_TURNS (30) serial
 * turns after BENCH_PEERS_WARMUP (5). Node names none of its threads, so "other threads" is one line.
 * BENCH_ALLOC_PROF=<file>: also samples every allocation of the measured turns (V8's sampling heap
 * profiler, collected objects included), writes the profile there and prints the bytes allocated
 * per step by the top functions (self) and by file (self).
 */
import { Session } from 'node:inspector/promises';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { writeFileSync } from 'node:fs';
import { readdirSync, readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import pg from 'pg';
import { startDurablePostgres } from './postgres.mjs';
import { K } from './scenario.mjs';
import { setupOpenwork } from './systems/openwork.mjs';

const TURNS = Number(process.env.BENCH_PEERS_TURNS ?? 30);
const WARMUP = Number(process.env.BENCH_PEERS_WARMUP ?? 5);
const dist = process.argv[2] ? resolve(process.argv[2]) : undefined;
const TICK_MS = 1000 / 100; // USER_HZ is 100 on Linux.

/** utime + stime of each thread of this process, in ms. */
function threadTimes() {
  const out = new Map();
  for (const tid of readdirSync('/proc/self/task')) {
    try {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // Fields 14 and 15 of stat (utime, stime) are 11 and 12 after the command name.
      out.set(tid, { user: Number(fields[11]) * TICK_MS, system: Number(fields[12]) * TICK_MS });
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return out;
}

const server = await startDurablePostgres();
const admin = new pg.Client({ connectionString: server.url('postgres') });
await admin.connect();
await admin.query('CREATE DATABASE split');
await admin.end();
const dir = mkdtempSync(join(tmpdir(), 'openwork-cpu-split-'));
const system = await setupOpenwork('postgres', { dist })({ url: server.url('split'), dir });
try {
  for (let i = 0; i < WARMUP; i += 1) await system.turn();
  await system.drain();
  const allocFile = process.env.BENCH_ALLOC_PROF;
  const inspector = allocFile ? new Session() : null;
  if (inspector) {
    inspector.connect();
    await inspector.post('HeapProfiler.enable');
    await inspector.post('HeapProfiler.startSampling', { samplingInterval: 4096, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: !process.env.BENCH_ALLOC_SURVIVORS });
  }
  if (process.env.BENCH_PHASE_MARKS) console.log('@@ measured phase begins');
  const t0 = threadTimes();
  const r0 = process.resourceUsage();
  const c0 = process.cpuUsage();
  for (let i = 0; i < TURNS; i += 1) await system.turn();
  await system.drain();
  const c1 = process.cpuUsage(c0);
  if (process.env.BENCH_PHASE_MARKS) console.log('@@ measured phase ends');
  const r1 = process.resourceUsage();
  const t1 = threadTimes();
  const steps = TURNS * K;
  if (inspector) {
    // Survivors only: one scavenge first, so that the last steps' short-lived garbage (not yet met by
    // a scavenge) does not count as surviving.
    if (process.env.BENCH_ALLOC_SURVIVORS) {
      setFlagsFromString('--expose-gc');
      runInNewContext('gc')({ type: 'minor' });
    }
    const { profile } = await inspector.post('HeapProfiler.stopSampling');
    writeFileSync(allocFile, JSON.stringify(profile));
    inspector.disconnect();
    const byFunction = new Map();
    const byFile = new Map();
    let total = 0;
    /** A native frame (Object.assign, new Set, ...) is charged to the nearest JavaScript caller. */
    const where = (frame) => {
      const { functionName, url, lineNumber } = frame;
      const file = url.includes('/node_modules/') ? url.replace(/^.*\/node_modules\//, 'node_modules/') : url.replace(/^.*\/(dist|bench)\//, '$1/');
      return { fn: `${functionName || '(anonymous)'} ${file}:${lineNumber + 1}`, group: file.startsWith('node_modules/') ? file.split('/').slice(0, 2).join('/') : file };
    };
    const walk = (node, caller) => {
      const self = node.selfSize;
      total += self;
      const own = node.callFrame.url === '' ? caller : where(node.callFrame);
      const at = own ?? { fn: node.callFrame.functionName || '(root)', group: '(native)' };
      byFunction.set(at.fn, (byFunction.get(at.fn) ?? 0) + self);
      byFile.set(at.group, (byFile.get(at.group) ?? 0) + self);
      for (const child of node.children) walk(child, own);
    };
    walk(profile.head, null);
    const kb = (b) => (b / steps / 1024).toFixed(1);
    console.log(`allocated ${kb(total)} kB per step (sampled)`);
    console.log('top functions (self, natives charged to their caller; kB per step):');
    for (const [fn, b] of [...byFunction].sort((a, b) => b[1] - a[1]).slice(0, 25)) console.log(`  ${kb(b).padStart(6)}  ${fn}`);
    console.log('by file or package (self, kB per step):');
    for (const [f, b] of [...byFile].sort((a, b) => b[1] - a[1]).slice(0, 20)) console.log(`  ${kb(b).padStart(6)}  ${f}`);
  }
  const per = (ms) => (ms / steps).toFixed(3);
  const main = String(process.pid);
  let mainUser = 0;
  let mainSystem = 0;
  let otherUser = 0;
  let otherSystem = 0;
  for (const [tid, after] of t1) {
    const before = t0.get(tid) ?? { user: 0, system: 0 };
    const du = after.user - before.user;
    const ds = after.system - before.system;
    if (tid === main) {
      mainUser += du;
      mainSystem += ds;
    } else {
      otherUser += du;
      otherSystem += ds;
    }
  }
  console.log(`openwork-core on Postgres, ${dist ?? 'dist'}: ${TURNS} turns x ${K} steps; ms per step`);
  console.log(`process CPU ${per((c1.user + c1.system) / 1000)} (user ${per(c1.user / 1000)}, kernel ${per(c1.system / 1000)})`);
  console.log(`main thread user ${per(mainUser)}, kernel ${per(mainSystem)}; other threads user ${per(otherUser)}, kernel ${per(otherSystem)} (10 ms ticks)`);
  console.log(`voluntary context switches ${((r1.voluntaryContextSwitches - r0.voluntaryContextSwitches) / steps).toFixed(1)}, involuntary ${((r1.involuntaryContextSwitches - r0.involuntaryContextSwitches) / steps).toFixed(1)} per step`);
} finally {
  await system.close();
  rmSync(dir, { recursive: true, force: true });
  server.stop();
}
