/**
 * `node bench/peers/client-cpu.mjs [dist-dir ...]`: the Node CPU the storage client spends on one
 * fact statement, for one or more builds of openwork-core in one sitting (issue 14, branch
 * perf-client). Each build runs in its own child process on its own database of one Postgres
 * server, calling its `SessionStorage` directly (no runtime, no model, no trace) in the peers
 * scenario's order: per turn a leased session, its begin, then K assistant messages with a tool call
 * and K tool results, and the final answer (fenced, as a core with ownership writes them). The
 * rounds interleave the builds, so a loaded machine slows them alike.
 *
 * Per fact statement it prints: Node CPU (user + system of the whole process, µs; the system part
 * is mostly the socket write and read), socket writes that reach the kernel and socket reads
 * (`_writeGeneric` / `push` calls; each one syscall), the async resources made per statement by type
 * (promises, timers, ticks: async_hooks, in one more round), and, with CLIENT_CPU_STRACE=1, the
 * kernel's own syscall counts from `strace -c -f` over one round.
 *
 * Knobs: CLIENT_CPU_TURNS (turns per round, 100 = 2,200 statements), CLIENT_CPU_ROUNDS (5),
 * CLIENT_CPU_WARMUP (turns, 30), CLIENT_CPU_PROF (a directory: a CPU profile of each build's first round,
 * for `profile.mjs <file> <statements>`).
 */
import { fork, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { basename, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { K, decide, FINAL_TEXT, instantTool, USER_TEXT } from './scenario.mjs';

const TURNS = Number(process.env.CLIENT_CPU_TURNS ?? 100);
const ROUNDS = Number(process.env.CLIENT_CPU_ROUNDS ?? 5);
const WARMUP = Number(process.env.CLIENT_CPU_WARMUP ?? 30);

async function child(dist, url) {
  const counts = { writes: 0, reads: 0 };
  const generic = net.Socket.prototype._writeGeneric;
  net.Socket.prototype._writeGeneric = function (writev, data, encoding, cb) {
    counts.writes += 1;
    return generic.call(this, writev, data, encoding, cb);
  };
  const { postgresStorage } = await import(pathToFileURL(resolve(dist, 'index.js')).href);
  const storage = postgresStorage({ connectionString: url, max: 10 });
  await storage.migrate();
  const ownerId = `bench-${process.pid}`;
  const tokens = new Map();
  storage.attachFence({ ownerId, tokenOf: (id) => tokens.get(id), refused() {} });
  // Reads: every chunk a socket hands up (one read syscall each).
  const push = net.Socket.prototype.push;
  net.Socket.prototype.push = function (chunk, encoding) {
    if (chunk) counts.reads += 1;
    return push.call(this, chunk, encoding);
  };
  const usage = { inputTokens: 100, outputTokens: 10, cachedInputTokens: 0, reasoningTokens: 0 };
  let statements = 0;
  async function turn() {
    const sessionId = randomUUID();
    const { lease } = await storage.createLeasedSession({ id: sessionId, workingDirectory: '/tmp' }, { ownerId, leaseMs: 600_000 });
    tokens.set(sessionId, lease.token);
    const turnId = randomUUID();
    await storage.beginTurn({
      turnId,
      sessionId,
      clientRequestId: randomUUID(),
      modelId: 'fake/zero',
      resolvedProviderId: 'fake',
      resolvedModelName: 'zero',
      appVersion: 'bench',
      messages: [{ id: randomUUID(), role: 'user', kind: 'normal', content: [{ type: 'text', text: USER_TEXT }] }],
      reserveModelCall: true,
    });
    statements += 2;
    for (let results = 0; ; results += 1) {
      const next = decide(results);
      if (next === null) {
        await storage.commitAssistantMessage(turnId, { id: randomUUID(), role: 'assistant', kind: 'normal', content: [{ type: 'text', text: FINAL_TEXT }] }, usage, 0, { planUnfinishedStepCount: 0 });
        statements += 1;
        break;
      }
      const callId = `call_${next}`;
      await storage.commitAssistantMessage(
        turnId,
        { id: randomUUID(), role: 'assistant', kind: 'normal', content: [{ type: 'tool_call', callId, name: 'instant', arguments: JSON.stringify({ i: next }) }] },
        usage,
        1,
      );
      await storage.commitToolResult(
        turnId,
        { id: randomUUID(), role: 'tool', kind: 'normal', providerCallId: callId, toolName: 'instant', content: [{ type: 'tool_result', callId, status: 'succeeded', text: instantTool(next) }] },
        next + 1 < K ? next + 2 : 0,
      );
      statements += 2;
    }
    tokens.delete(sessionId);
  }
  for (let i = 0; i < WARMUP; i += 1) await turn();
  let profiled = false;
  process.on('message', async (msg) => {
    if (msg === 'close') {
      await storage.close();
      process.disconnect();
      return;
    }
    let strace;
    const out = `/tmp/client-cpu-strace-${process.pid}.txt`;
    if (msg === 'strace') {
      strace = spawn('strace', [...(process.env.CLIENT_CPU_STRACE === 'trace' ? ['-tt', '-e', 'trace=epoll_pwait,writev,read,write'] : ['-c']), '-f', '-o', out, '-p', String(process.pid)], { stdio: 'ignore' });
      await new Promise((res) => setTimeout(res, 1500));
    }
    // CLIENT_CPU_PROF=<dir>: a CPU profile (the --cpu-prof format) of the first round, for profile.mjs.
    let session;
    if (process.env.CLIENT_CPU_PROF && !profiled) {
      profiled = true;
      const { Session } = await import('node:inspector');
      session = new Session();
      session.connect();
      const post = (method, params) => new Promise((res, rej) => session.post(method, params, (e, r) => (e ? rej(e) : res(r))));
      await post('Profiler.enable');
      await post('Profiler.setSamplingInterval', { interval: 100 });
      await post('Profiler.start');
      session.stop = async () => {
        const { profile } = await post('Profiler.stop');
        writeFileSync(resolve(process.env.CLIENT_CPU_PROF, `${basename(resolve(dist, '..'))}-${process.pid}.cpuprofile`), JSON.stringify(profile));
        session.disconnect();
      };
    }
    // The async resources made per statement, by type (promises, timers, ticks): deterministic counts
    // that a loaded machine reads the same as a quiet one. One round after the timed ones.
    let hook;
    const resources = {};
    if (msg === 'count') {
      const { createHook } = await import('node:async_hooks');
      hook = createHook({ init: (id, type) => void (resources[type] = (resources[type] ?? 0) + 1) });
      hook.enable();
    }
    counts.writes = 0;
    counts.reads = 0;
    statements = 0;
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    for (let i = 0; i < TURNS; i += 1) await turn();
    const wall = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    await session?.stop();
    hook?.disable();
    let syscalls;
    if (strace) {
      const exited = new Promise((res) => strace.once('exit', res));
      strace.kill('SIGINT');
      await exited;
      syscalls = readFileSync(out, 'utf8');
    }
    process.send({
      userUs: cpu.user / statements,
      systemUs: cpu.system / statements,
      wallUs: (wall * 1000) / statements,
      writes: counts.writes / statements,
      reads: counts.reads / statements,
      statements,
      syscalls,
      resources: Object.fromEntries(Object.entries(resources).map(([k, v]) => [k, +(v / statements).toFixed(2)])),
    });
  });
  process.send('ready');
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

if (process.argv[2] === '--child') {
  await child(process.argv[3], process.argv[4]);
} else {
  const { startDurablePostgres } = await import('./postgres.mjs');
  const pg = (await import('pg')).default;
  const dists = process.argv.slice(2);
  if (dists.length === 0) dists.push(fileURLToPath(new URL('../../dist', import.meta.url)));
  const server = await startDurablePostgres();
  const children = [];
  try {
    const admin = new pg.Client({ connectionString: server.url('postgres') });
    await admin.connect();
    for (const [i, dist] of dists.entries()) {
      await admin.query(`CREATE DATABASE client_cpu_${i}`);
      const c = fork(fileURLToPath(import.meta.url), ['--child', dist, server.url(`client_cpu_${i}`)], { stdio: 'inherit' });
      // A child that fails leaves no server behind.
      c.once('exit', (code) => {
        if (code) {
          server.stop();
          process.exit(1);
        }
      });
      await new Promise((res) => c.once('message', res));
      children.push({ dist, c, results: [] });
    }
    await admin.end();
    const ask = (c, msg) =>
      new Promise((res) => {
        c.once('message', res);
        c.send(msg);
      });
    for (let r = 0; r < ROUNDS; r += 1) {
      for (const entry of r % 2 ? [...children].reverse() : children) entry.results.push(await ask(entry.c, 'run'));
    }
    for (const entry of children) entry.resources = (await ask(entry.c, 'count')).resources;
    if (process.env.CLIENT_CPU_STRACE) for (const entry of children) entry.strace = (await ask(entry.c, 'strace')).syscalls;
    console.log(`${ROUNDS} rounds x ${TURNS} turns (${children[0].results[0].statements} statements a round); per fact statement, medians:`);
    console.log('CPU µs  (user  system)  wall µs  socket writes  socket reads  build');
    for (const { dist, results, strace, resources } of children) {
      const m = (k) => median(results.map((x) => x[k]));
      console.log(
        `${(m('userUs') + m('systemUs')).toFixed(1).padStart(6)}  (${m('userUs').toFixed(1).padStart(5)}  ${m('systemUs').toFixed(1).padStart(5)})  ${m('wallUs').toFixed(0).padStart(7)}  ${m('writes').toFixed(2).padStart(13)}  ${m('reads').toFixed(2).padStart(12)}  ${dist}`,
      );
      const cpus = results.map((x) => x.userUs + x.systemUs);
      console.log(`        CPU µs per round: ${cpus.map((x) => x.toFixed(0)).join(' ')} (min ${Math.min(...cpus).toFixed(1)})`);
      console.log(`        async resources per statement: ${JSON.stringify(resources)}`);
      if (strace) console.log(strace);
    }
    for (const { c } of children) c.send('close');
  } finally {
    server.stop();
  }
}
