/**
 * Scale (issue 14 point 5), on a PostgreSQL server the bench starts with its default durability:
 *
 * - **idle sessions**: the memory each idle loaded session costs beyond the first. `SCALE_IDLE`
 *   (default 1,000) sessions are created in one runtime, then loaded (`loadSession`) in a fresh
 *   runtime in a fresh process; heap and RSS are read after full collections with one session loaded
 *   and with all of them, and the difference is divided by the number of sessions beyond the first.
 *   Postgres keeps the rows in its own process, so the figures are the runtime's alone.
 * - **concurrent turns**: `SCALE_TURNS` (default 1,000) sessions each run one 10-step turn at once,
 *   on a `pg` pool of 10, next to the floor (raw `pg`, one autocommitted INSERT per message) doing
 *   the same number of turns at once on a pool of the same size. Both totals and their ratio.
 *   `SCALE_TURNS=0` skips it. `SCALE_BASE_DIST=<dist of another build>` runs that build's at-once
 *   phase too, in the same sitting (a before/after in one run); `SCALE_DIST=dist` runs the at-once
 *   phase on this checkout's build instead of its sources. `SCALE_IDLE=0` skips the idle part.
 *   `SCALE_CPU_PROF=<dir>` writes a CPU profile of each at-once phase there.
 *
 * Each measurement runs in its own child process (`--expose-gc`) so that one's heap does not colour
 * the next. Run: `npm run bench -- scale`.
 */
import { execFile } from 'node:child_process';
import net from 'node:net';
import { randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import pg from 'pg';
import { z } from 'zod';
import { createCore } from '../src/core.js';
import { scriptedModel } from '../src/services/model/scripted.js';
import { defineTool } from '../src/services/tools/define.js';
import { postgresStorage } from '../src/storage/postgres.js';
import { startPostgres } from '../test/support/postgres-server.js';

const STEPS = 10;
const POOL = 10;
const IDLE = Number(process.env.SCALE_IDLE ?? 1000);
const TURNS = Number(process.env.SCALE_TURNS ?? 1000);
const TARGET_KB = 30;
const BASE_DIST = process.env.SCALE_BASE_DIST ? resolve(process.env.SCALE_BASE_DIST) : undefined;
const DIST = process.env.SCALE_DIST ? resolve(process.env.SCALE_DIST) : undefined;
const PROFILE = process.env.SCALE_CPU_PROF ? resolve(process.env.SCALE_CPU_PROF) : undefined;

const instant = defineTool({ name: 'instant', description: 'Returns at once.', parameters: z.object({ i: z.number() }), execute: ({ i }) => `ok ${i}` });

function model() {
  return scriptedModel(
    (_request, i) => {
      const step = i % (STEPS + 1);
      if (step === STEPS) return { text: 'finished', usage: { inputTokens: 100, outputTokens: 5 } };
      return { toolCalls: [{ name: 'instant', arguments: { i: step } }], usage: { inputTokens: 100, outputTokens: 10 } };
    },
    { record: false },
  );
}

interface Memory {
  heap: number;
  rss: number;
}

async function settledMemory(): Promise<Memory> {
  // Pending promise reactions and timers of the last session settle first; then full collections,
  // each after a pause so that the concurrent sweeper has returned what the previous one freed.
  for (let i = 0; i < 4; i += 1) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    global.gc?.();
  }
  const m = process.memoryUsage();
  return { heap: m.heapUsed, rss: m.rss };
}

/**
 * V8 grows its young generation with the allocation rate (here from 1 MB to 32 MB while the first
 * few hundred sessions are made) and keeps it: a one-off of the process, not a cost per session, that
 * would otherwise be divided among the sessions. So the process first makes and closes `WARMUP`
 * throw-away sessions (which also compiles the hot paths), and only then loads the first measured one.
 */
const WARMUP = 300;

// ---------- child-process parts ----------

/** Creates `count` sessions and reports the memory with one and with all of them loaded. */
async function idleCreated(url: string, count: number): Promise<{ one: Memory; all: Memory; ids: string[] }> {
  const core = await createCore({ storage: postgresStorage({ connectionString: url, max: POOL }), model: model(), tools: [instant], worldState: false });
  for (let i = 0; i < WARMUP; i += 1) await (await core.createSession({ workingDirectory: process.cwd() })).shutdown();
  const handles = [await core.createSession({ workingDirectory: process.cwd() })];
  const one = await settledMemory();
  for (let i = 1; i < count; i += 1) handles.push(await core.createSession({ workingDirectory: process.cwd() }));
  const all = await settledMemory();
  const ids = handles.map((h) => h.sessionId);
  await core.shutdown();
  return { one, all, ids };
}

/** Loads stored sessions in a fresh runtime; then checks that each still answers a command. */
async function idleLoaded(url: string, ids: string[]): Promise<{ one: Memory; all: Memory }> {
  const core = await createCore({ storage: postgresStorage({ connectionString: url, max: POOL }), model: model(), tools: [instant], worldState: false });
  for (const id of ids.slice(0, WARMUP)) await (await core.loadSession(id)).shutdown();
  const handles = [await core.loadSession(ids[0]!)];
  const one = await settledMemory();
  for (const id of ids.slice(1)) handles.push(await core.loadSession(id));
  const all = await settledMemory();
  for (const h of handles) if (h.status().type !== 'idle') throw new Error(`${h.sessionId} is ${JSON.stringify(h.status())}`);
  await core.shutdown();
  return { one, all };
}

/**
 * Socket writes that reach the kernel (one write or writev syscall each) while `fn` runs: every one
 * passes `net.Socket`'s `_writeGeneric`.
 */
async function countingWrites<T>(fn: () => Promise<T>): Promise<T & { writes: number }> {
  const proto = net.Socket.prototype as unknown as { _writeGeneric: (...args: unknown[]) => unknown };
  const generic = proto._writeGeneric;
  let writes = 0;
  proto._writeGeneric = function (this: unknown, ...args: unknown[]) {
    writes += 1;
    return generic.apply(this, args);
  };
  try {
    return { ...(await fn()), writes };
  } finally {
    proto._writeGeneric = generic;
  }
}

/** The library under test: this checkout's sources, or another build's `dist/` (`SCALE_BASE_DIST`). */
async function library(dist: string | undefined) {
  if (!dist) return { createCore, postgresStorage, scriptedModel, instant };
  const lib = (await import(pathToFileURL(resolve(dist, 'index.js')).href)) as typeof import('../src/index.js');
  const testing = (await import(pathToFileURL(resolve(dist, 'services/model/scripted.js')).href)) as typeof import('../src/services/model/scripted.js');
  const tool = lib.defineTool({ name: 'instant', description: 'Returns at once.', parameters: z.object({ i: z.number() }), execute: ({ i }) => `ok ${i}` });
  return { createCore: lib.createCore, postgresStorage: lib.postgresStorage, scriptedModel: testing.scriptedModel, instant: tool };
}

interface Measured {
  wallMs: number;
  cpuMs: number;
  /** Socket writes (syscalls) in the measured phase. */
  writes: number;
}

async function runtimeAtOnce(url: string, sessions: number, dist?: string, profile?: string): Promise<Measured> {
  const { createCore, postgresStorage, scriptedModel, instant } = await library(dist);
  const model = () =>
    scriptedModel(
      (_request, i) => {
        const step = i % (STEPS + 1);
        if (step === STEPS) return { text: 'finished', usage: { inputTokens: 100, outputTokens: 5 } };
        return { toolCalls: [{ name: 'instant', arguments: { i: step } }], usage: { inputTokens: 100, outputTokens: 10 } };
      },
      { record: false },
    );
  const core = await createCore({
    storage: postgresStorage({ connectionString: url, max: POOL }),
    model: model(),
    tools: [instant],
    limits: { maxModelCalls: STEPS + 5 },
    worldState: false,
  });
  const handles = await Promise.all(Array.from({ length: sessions }, () => core.createSession({ workingDirectory: process.cwd(), model: model() })));
  global.gc?.();
  const inspector = profile ? new Session() : null;
  if (inspector) {
    inspector.connect();
    await inspector.post('Profiler.enable');
    await inspector.post('Profiler.setSamplingInterval', { interval: 500 });
    await inspector.post('Profiler.start');
  }
  const { wallMs, cpuMs, writes } = await countingWrites(async () => {
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    handles.map(async (h) => {
      const { turnId } = await h.startTurn({ clientRequestId: randomUUID(), input: [{ type: 'text', text: 'go' }] });
      const outcome = await h.waitForTurn(turnId);
      if (outcome.status !== 'completed') throw new Error(`turn ${turnId} ${JSON.stringify(outcome)}`);
    }),
  );
  await core.flushTrace(120_000);
  const used = process.cpuUsage(cpu);
  return { wallMs: performance.now() - t0, cpuMs: (used.user + used.system) / 1000 };
  });
  if (inspector) {
    const { profile: data } = await inspector.post('Profiler.stop');
    mkdirSync(profile!, { recursive: true });
    writeFileSync(resolve(profile!, `scale-runtime${dist === BASE_DIST && dist ? '-base' : ''}.cpuprofile`), JSON.stringify(data));
    inspector.disconnect();
  }
  await core.shutdown();
  return { wallMs, cpuMs, writes };
}

async function floorAtOnce(url: string, sessions: number): Promise<Measured> {
  const pool = new pg.Pool({ connectionString: url, max: POOL });
  await pool.query(`CREATE TABLE IF NOT EXISTS floor_messages (
    thread_id text NOT NULL, seq integer NOT NULL, role text NOT NULL, content jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (thread_id, seq))`);
  global.gc?.();
  return countingWrites(async () => {
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: sessions }, async () => {
      const threadId = randomUUID();
      let seq = 0;
      const append = (role: string, content: unknown) =>
        pool.query('INSERT INTO floor_messages (thread_id, seq, role, content) VALUES ($1, $2, $3, $4)', [threadId, (seq += 1), role, JSON.stringify(content)]);
      await append('user', [{ type: 'text', text: 'go' }]);
      for (let step = 1; step <= STEPS; step += 1) {
        await append('assistant', [{ type: 'tool_call', callId: `call_${step}`, name: 'instant', arguments: `{"i":${step}}` }]);
        await append('tool', [{ type: 'tool_result', callId: `call_${step}`, status: 'succeeded', text: `ok ${step}` }]);
      }
      await append('assistant', [{ type: 'text', text: 'finished' }]);
    }),
  );
  const wallMs = performance.now() - t0;
  const used = process.cpuUsage(cpu);
  await pool.end();
  return { wallMs, cpuMs: (used.user + used.system) / 1000 };
  });
}

/** Runs this file in a child process for one part; its JSON answer is the last stdout line. */
function part<T>(name: string, args: unknown): Promise<T> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--expose-gc', '--import', 'tsx', fileURLToPath(import.meta.url), name, JSON.stringify(args)],
      { maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) => {
        if (error) return reject(new Error(`${name}: ${error.message}\n${stderr.slice(-4000)}`));
        resolve(JSON.parse(stdout.trim().split('\n').at(-1)!) as T);
      },
    );
  });
}

const kb = (bytes: number) => (bytes / 1024).toFixed(1);

export async function runScaleBench(): Promise<string[]> {
  const server = await startPostgres({ durable: true });
  const lines: string[] = [];
  try {
    const admin = new pg.Client({ connectionString: server.url });
    await admin.connect();
    for (const db of ['scale_idle', 'scale_runtime', 'scale_floor', ...(BASE_DIST ? ['scale_base'] : [])]) await admin.query(`CREATE DATABASE ${db}`);
    await admin.end();
    const url = (db: string) => server.url.replace(/\/postgres$/, `/${db}`);
    for (const db of ['scale_idle', ...(BASE_DIST ? ['scale_base'] : [])]) {
      const migrate = postgresStorage({ connectionString: url(db) });
      await migrate.migrate();
      await migrate.close();
    }

    if (IDLE > 1) await idlePart(url('scale_idle'), lines);

    if (TURNS === 0) return lines;
    // Warm-up of the server's caches for both databases, then the measured runs.
    await part('floor', { url: url('scale_floor'), sessions: 20 });
    const rt = await part<Measured>('runtime', { url: url('scale_runtime'), sessions: TURNS, dist: DIST, profile: PROFILE });
    const floor = await part<Measured>('floor', { url: url('scale_floor'), sessions: TURNS });
    lines.push(`concurrent: ${TURNS} sessions at once, 1 turn x ${STEPS} tool steps each, pg pool ${POOL}, fsync on (target: within 1.5x of the floor)`);
    lines.push(`  runtime  ${(rt.wallMs / 1000).toFixed(2)} s total, ${((TURNS * 1000) / rt.wallMs).toFixed(1)} turns/s, node CPU ${(rt.cpuMs / 1000).toFixed(2)} s, ${(rt.writes / (TURNS * STEPS)).toFixed(2)} socket writes/step`);
    lines.push(`  floor    ${(floor.wallMs / 1000).toFixed(2)} s total, ${((TURNS * 1000) / floor.wallMs).toFixed(1)} turns/s, node CPU ${(floor.cpuMs / 1000).toFixed(2)} s, ${(floor.writes / (TURNS * STEPS)).toFixed(2)} socket writes/step`);
    const ratio = rt.wallMs / floor.wallMs;
    lines.push(`  runtime / floor  ${ratio.toFixed(2)}x wall (${ratio <= 1.5 ? 'met' : 'not met'}), ${(rt.cpuMs / floor.cpuMs).toFixed(2)}x CPU`);
    if (BASE_DIST) {
      const base = await part<Measured>('runtime', { url: url('scale_base'), sessions: TURNS, dist: BASE_DIST, profile: PROFILE });
      lines.push(`  base     ${(base.wallMs / 1000).toFixed(2)} s total, node CPU ${(base.cpuMs / 1000).toFixed(2)} s, ${(base.writes / (TURNS * STEPS)).toFixed(2)} socket writes/step (${BASE_DIST})`);
      lines.push(`  base / floor  ${(base.wallMs / floor.wallMs).toFixed(2)}x wall, ${(base.cpuMs / floor.cpuMs).toFixed(2)}x CPU`);
    }
  } finally {
    server.stop();
  }
  return lines;
}


async function idlePart(url: string, lines: string[]): Promise<void> {
  const created = await part<{ one: Memory; all: Memory; ids: string[] }>('idle-created', { url, count: IDLE });
  const loadedMem = await part<{ one: Memory; all: Memory }>('idle-loaded', { url, ids: created.ids });
  const per = (x: { one: Memory; all: Memory }, k: keyof Memory) => (x.all[k] - x.one[k]) / (IDLE - 1);
  lines.push(`idle: ${IDLE} sessions, memory per session beyond the first, after GC (target < ${TARGET_KB} KB)`);
  for (const [name, x] of [['created', created], ['loaded', loadedMem]] as const) {
    const heap = per(x, 'heap');
    const rss = per(x, 'rss');
    const met = Math.max(heap, rss) < TARGET_KB * 1024 ? 'met' : 'not met';
    lines.push(`  ${name.padEnd(8)} heap ${kb(heap)} KB, RSS ${kb(rss)} KB per session (${met}); heap ${kb(x.all.heap / 1024)} MB, RSS ${kb(x.all.rss / 1024)} MB with all loaded`);
  }
}

// A child process of this bench: `node scale.bench.ts <part> <json>`.
if (process.argv[1] === fileURLToPath(import.meta.url) && process.argv[2]) {
  const args = JSON.parse(process.argv[3] ?? '{}') as { url: string; count: number; ids: string[]; sessions: number; dist?: string; profile?: string };
  const parts: Record<string, () => Promise<unknown>> = {
    'idle-created': () => idleCreated(args.url, args.count),
    'idle-loaded': () => idleLoaded(args.url, args.ids),
    runtime: () => runtimeAtOnce(args.url, args.sessions, args.dist, args.profile),
    floor: () => floorAtOnce(args.url, args.sessions),
  };
  const result = await parts[process.argv[2]]!();
  process.stdout.write(`\n${JSON.stringify(result)}\n`);
  process.exit(0);
}
