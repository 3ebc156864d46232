/**
 * What `session.stream` costs its reader per update (branch updates-bounded), apart from the
 * session: the build's own `streamTurn` over a stand-in `TurnHost` whose `updates$` is an RxJS
 * Subject (of the instance the build resolves) and whose `startTurn` answers at once. Each round
 * publishes one turn of N updates in bursts of B (as a model's deltas arrive, several per macrotask)
 * and a `for await` reader takes every one; what is timed is the publish, the reader's queue and the
 * iterator's promise per update. Nothing is stored and no model is called.
 *
 * `node --expose-gc bench/peers/stream-reader.mjs [dist-dir ...]`: per build, CPU per update (the
 * fastest of ROUNDS rounds, so that a loaded machine reads closer to a quiet one) and bytes allocated
 * per update (heap used before and after a round with GC off in between, averaged). Several builds
 * are run alternately in separate child processes so that they do not share inline caches.
 */
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const N = Number(process.env.STREAM_READER_UPDATES ?? 4_000);
const BURST = Number(process.env.STREAM_READER_BURST ?? 8);
const ROUNDS = Number(process.env.STREAM_READER_ROUNDS ?? 30);
const PASSES = Number(process.env.STREAM_READER_PASSES ?? 6);

async function measure(dist) {
  const { streamTurn } = await import(pathToFileURL(`${dist}/index.js`).href);
  const require = createRequire(`${dist}/index.js`);
  const { Subject } = await import(pathToFileURL(require.resolve('rxjs')).href);
  const envelopes = Array.from({ length: N }, (_, i) => ({
    version: 7,
    sessionId: 's',
    turnId: 't',
    sequence: i + 2,
    occurredAtMs: 0,
    update: i === N - 1 ? { type: 'turn_finished', outcome: { status: 'completed', finalText: '' }, usage: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 } } : { type: 'text_delta', delta: 'x' },
  }));
  const round = async () => {
    const updates$ = new Subject();
    const host = { updates$, startTurn: async () => ({ turnId: 't' }), cancelTurn: async () => undefined };
    const stream = streamTurn(host, 'go');
    await stream.turnId;
    const publish = (async () => {
      for (let i = 0; i < N; i += BURST) {
        for (let j = i; j < Math.min(N, i + BURST); j += 1) updates$.next(envelopes[j]);
        await new Promise((r) => setImmediate(r));
      }
    })();
    let read = 0;
    for await (const envelope of stream) read += envelope.sequence > 0 ? 1 : 0;
    await publish;
    if (read !== N) throw new Error(`read ${read} of ${N}`);
  };
  for (let i = 0; i < 5; i += 1) await round();
  let best = Infinity;
  let bytes = 0;
  for (let i = 0; i < ROUNDS; i += 1) {
    globalThis.gc?.();
    const heap = process.memoryUsage().heapUsed;
    const cpu = process.cpuUsage();
    await round();
    const used = process.cpuUsage(cpu);
    bytes += process.memoryUsage().heapUsed - heap;
    best = Math.min(best, used.user + used.system);
  }
  return { cpuNsPerUpdate: (best * 1000) / N, bytesPerUpdate: bytes / ROUNDS / N };
}

if (process.env.STREAM_READER_CHILD) {
  const result = await measure(process.env.STREAM_READER_CHILD);
  process.stdout.write(JSON.stringify(result));
} else {
  const dists = (process.argv.length > 2 ? process.argv.slice(2) : [fileURLToPath(new URL('../../dist', import.meta.url))]).map((d) => resolve(d));
  const runs = new Map(dists.map((d) => [d, []]));
  for (let pass = 0; pass < PASSES; pass += 1) {
    for (const dist of dists) {
      const out = execFileSync(process.execPath, ['--expose-gc', '--max-semi-space-size=64', fileURLToPath(import.meta.url)], { env: { ...process.env, STREAM_READER_CHILD: dist } });
      runs.get(dist).push(JSON.parse(out.toString()));
    }
  }
  for (const [dist, results] of runs) {
    const cpu = Math.min(...results.map((r) => r.cpuNsPerUpdate));
    const bytes = results.map((r) => r.bytesPerUpdate).sort((a, b) => a - b)[results.length >> 1];
    console.log(`${dist}: ${N} updates in bursts of ${BURST}: CPU ${cpu.toFixed(0)} ns per update (best), ${bytes.toFixed(0)} B allocated per update (median)`);
  }
}
