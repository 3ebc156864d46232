/**
 * `node bench/peers/wire-count.mjs [dist-dir ...]`: the client side of the wire, per step, for one or
 * more builds of openwork-core on Postgres in one sitting (the peers scenario, serial turns): socket
 * write calls that reach the kernel (each is one write/writev syscall: Node's `_writeGeneric`),
 * statements the `pg` clients submitted, and pool checkouts. Counts, not timings, so a loaded machine
 * reads the same as a quiet one. Each build runs in its own child process on its own database.
 *
 * Knobs: WIRE_TURNS (serial turns measured, 20), WIRE_WARMUP (3). With `strace -f -c -e
 * trace=write,writev,sendto,sendmsg -p <child pid>` the syscalls can be cross-checked.
 */
import { fork, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { K } from './scenario.mjs';

const TURNS = Number(process.env.WIRE_TURNS ?? 20);
const WARMUP = Number(process.env.WIRE_WARMUP ?? 3);

if (process.argv[2] === '--child') {
  const dist = process.argv[3];
  const url = process.argv[4];
  const counts = { socketWrites: 0, chunks: 0, queries: 0, checkouts: 0 };
  // Every write that reaches the kernel passes _writeGeneric (one write or writev syscall, unless
  // libuv must queue the rest of a partial write, which a few hundred bytes on loopback never needs).
  const generic = net.Socket.prototype._writeGeneric;
  net.Socket.prototype._writeGeneric = function (writev, data, encoding, cb) {
    counts.socketWrites += 1;
    counts.chunks += writev ? data.length : 1;
    return generic.call(this, writev, data, encoding, cb);
  };
  const pg = createRequire(resolve(dist, 'index.js'))('pg');
  const submit = pg.Query.prototype.submit;
  pg.Query.prototype.submit = function (connection) {
    counts.queries += 1;
    return submit.call(this, connection);
  };
  const connect = pg.Pool.prototype.connect;
  pg.Pool.prototype.connect = function (...args) {
    counts.checkouts += 1;
    return connect.apply(this, args);
  };
  const { setupOpenwork } = await import('./systems/openwork.mjs');
  const system = await setupOpenwork('postgres', { dist })({ url, dir: process.cwd() });
  for (let i = 0; i < WARMUP; i += 1) await system.turn();
  await system.drain();
  for (const k of Object.keys(counts)) counts[k] = 0;
  // WIRE_STRACE=1: the kernel's own count of the write syscalls of this process (all threads) over
  // the measured turns, from strace attached to it.
  let strace;
  const out = `/tmp/wire-strace-${process.pid}.txt`;
  if (process.env.WIRE_STRACE) {
    strace = spawn('strace', ['-f', '-c', '-e', 'trace=write,writev,sendto,sendmsg', '-o', out, '-p', String(process.pid)], { stdio: 'ignore' });
    await new Promise((res) => setTimeout(res, 1500));
  }
  for (let i = 0; i < TURNS; i += 1) await system.turn();
  await system.drain();
  if (strace) {
    const exited = new Promise((res) => strace.once('exit', res));
    strace.kill('SIGINT');
    await exited;
    counts.strace = readFileSync(out, 'utf8');
  }
  const steps = TURNS * K;
  process.send(Object.fromEntries(Object.entries(counts).map(([k, v]) => [k, typeof v === 'number' ? v / steps : v])));
  await system.close();
  process.disconnect();
} else {
  const { startDurablePostgres } = await import('./postgres.mjs');
  const pg = (await import('pg')).default;
  const dists = process.argv.slice(2);
  if (dists.length === 0) dists.push(fileURLToPath(new URL('../../dist', import.meta.url)));
  const server = await startDurablePostgres();
  try {
    const admin = new pg.Client({ connectionString: server.url('postgres') });
    await admin.connect();
    console.log(`${TURNS} turns x ${K} steps, per step:`);
    console.log('socket writes  chunks  statements  checkouts  build');
    for (const [i, dist] of dists.entries()) {
      await admin.query(`CREATE DATABASE wire_${i}`);
      const child = fork(fileURLToPath(import.meta.url), ['--child', resolve(dist), server.url(`wire_${i}`)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
      const r = await new Promise((res, rej) => {
        child.once('message', res);
        child.once('exit', (code) => rej(new Error(`child exited ${code}`)));
      });
      console.log(`${r.socketWrites.toFixed(2).padStart(13)}  ${r.chunks.toFixed(2).padStart(6)}  ${r.queries.toFixed(2).padStart(10)}  ${r.checkouts.toFixed(2).padStart(9)}  ${dist}`);
      if (r.strace) console.log(`strace -c of that build's process over the ${TURNS * K} measured steps:\n${r.strace}`);
      await new Promise((res) => child.once('exit', res));
    }
    await admin.end();
  } finally {
    server.stop();
  }
}
