/**
 * Allocation and CPU of a step of the peers scenario on PGlite in memory (issue 14 point 3): the
 * heap's growth over MEASURE turns with a young generation large enough that nothing is collected
 * in the window, after WARMUP turns, median of ROUNDS rounds; and the process CPU (compiler and GC
 * threads included) over the same turns. Counts do not depend on load; the CPU does.
 *
 * `node --expose-gc --min-semi-space-size=256 --max-semi-space-size=256 bench/peers/step-alloc.mjs <dist>`
 * (the method of docs/benchmarks.md "Perf-fold"). STEP_ALLOC_WARMUP (40), STEP_ALLOC_TURNS (8),
 * STEP_ALLOC_ROUNDS (5).
 */
import { randomUUID } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
import { z } from '../../node_modules/zod/index.js';
import { USER_TEXT, K } from './scenario.mjs';
import { fakeModelPort, instantToolOf } from './openwork-setup.mjs';

if (typeof globalThis.gc !== 'function') throw new Error('run with node --expose-gc --min-semi-space-size=256 --max-semi-space-size=256');
const dist = resolve(process.argv[2] ?? new URL('../../dist', import.meta.url).pathname);
const { createCore, defineTool, pgliteStorage } = await import(pathToFileURL(`${dist}/index.js`).href);
const WARMUP = Number(process.env.STEP_ALLOC_WARMUP ?? 40);
const TURNS = Number(process.env.STEP_ALLOC_TURNS ?? 8);
const ROUNDS = Number(process.env.STEP_ALLOC_ROUNDS ?? 5);

const core = await createCore({ storage: pgliteStorage(), model: fakeModelPort(), tools: [instantToolOf(defineTool, z)], worldState: false });
const turn = async () => {
  const session = await core.createSession({ workingDirectory: process.cwd() });
  const { turnId } = await session.startTurn({ clientRequestId: randomUUID(), input: [{ type: 'text', text: USER_TEXT }] });
  const outcome = await session.waitForTurn(turnId);
  if (outcome.status !== 'completed') throw new Error(JSON.stringify(outcome));
};
for (let i = 0; i < WARMUP; i++) await turn();
const heap = [];
const cpu = [];
for (let r = 0; r < ROUNDS; r++) {
  globalThis.gc();
  const before = process.memoryUsage().heapUsed;
  const c0 = process.cpuUsage();
  for (let i = 0; i < TURNS; i++) await turn();
  const c1 = process.cpuUsage(c0);
  heap.push((process.memoryUsage().heapUsed - before) / (TURNS * K) / 1024);
  cpu.push((c1.user + c1.system) / 1000 / (TURNS * K));
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(`${dist}: heap growth a step ${median(heap).toFixed(1)} kB (rounds ${heap.map((x) => x.toFixed(1)).join(' ')}); process CPU a step ${median(cpu).toFixed(2)} ms (rounds ${cpu.map((x) => x.toFixed(2)).join(' ')})`);
await core.shutdown();
