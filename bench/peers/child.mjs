/**
 * One system of the peers benchmark in its own process: `node child.mjs <system>`, forked by run.mjs.
 * It sets the system up, warms it up, then runs each measured phase when the parent says `go` (the
 * parent snapshots the Postgres server's counters between the messages), and reports wall time and
 * its own CPU time per phase and its peak RSS at the end.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SYSTEMS } from './systems/index.mjs';

const name = process.argv[2];
const entry = SYSTEMS[name];
if (!entry) throw new Error(`unknown system ${name}`);
const SERIAL = Number(process.env.BENCH_PEERS_TURNS ?? 30);
const SESSIONS = Number(process.env.BENCH_PEERS_SESSIONS ?? 100);
const WARMUP = Number(process.env.BENCH_PEERS_WARMUP ?? 5);

const dir = mkdtempSync(join(tmpdir(), `openwork-peers-${name}-`));
const system = await entry.setup({ url: process.env.BENCH_PG_URL, dir });

function waitForGo() {
  return new Promise((resolve) => process.once('message', resolve));
}

async function phase(label, turns, fn) {
  process.send({ type: 'ready', phase: label });
  await waitForGo();
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  await fn();
  await system.drain?.();
  const wallMs = performance.now() - t0;
  const used = process.cpuUsage(cpu);
  process.send({ type: 'done', phase: label, wallMs, cpuMs: (used.user + used.system) / 1000, turns });
}

for (let i = 0; i < WARMUP; i += 1) await system.turn();
await system.drain?.();

// BENCH_PEERS_CPU_PROF=<dir>: a CPU profile (the format of --cpu-prof) of the serial phase alone,
// so that set-up and warm-up do not dilute the per-step breakdown (bench/peers/profile.mjs).
const profDir = process.env.BENCH_PEERS_CPU_PROF;
if (profDir) mkdirSync(profDir, { recursive: true });
const inspector = profDir ? new Session() : null;
await phase('serial', SERIAL, async () => {
  if (inspector) {
    inspector.connect();
    await inspector.post('Profiler.enable');
    await inspector.post('Profiler.setSamplingInterval', { interval: 200 });
    await inspector.post('Profiler.start');
  }
  for (let i = 0; i < SERIAL; i += 1) await system.turn();
  await system.drain?.();
  if (inspector) {
    const { profile } = await inspector.post('Profiler.stop');
    writeFileSync(`${profDir}/${name}.serial.cpuprofile`, JSON.stringify(profile));
    inspector.disconnect();
  }
});
await phase('concurrent', SESSIONS, async () => {
  await Promise.all(Array.from({ length: SESSIONS }, () => system.turn()));
});
await system.close();
rmSync(dir, { recursive: true, force: true });
process.send({ type: 'end', maxRssMb: process.resourceUsage().maxRSS / 1024 });
process.disconnect();
