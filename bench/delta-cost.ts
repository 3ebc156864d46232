/**
 * The cost of one streamed text delta (issue 14, perf-delta), for each build given, in one run:
 * one turn whose model streams N text deltas of S characters, through the scripted model and
 * through the real `openai` client against the fake server of `test/support` (Responses and Chat),
 * on PGlite in memory. The cost per delta is the turn's CPU and wall time less that of the same
 * turn with N/10 deltas, over the 9N/10 deltas between: what the final store of the text costs
 * (linear in its size) stays in both, so what is left is what a delta costs while the draft grows.
 * A cost that grows with the draft shows as a long-delta figure far above the short one.
 *
 * `npx tsx bench/delta-cost.ts [dist ...]` (default `dist`; e.g. `dist /tmp/main-base/dist`).
 * Env: DELTA_COUNT (2000), DELTA_SIZES ("10,3000"), DELTA_ROUNDS (3), DELTA_PATHS ("scripted,responses,chat").
 * Each measurement runs in a child process of its own (a cold heap per build), rounds interleaved.
 */
import { randomUUID } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { pathToFileURL, fileURLToPath } from 'node:url';
import { resolve } from 'node:path';

const COUNT = Number(process.env.DELTA_COUNT ?? 2000);
const SIZES = (process.env.DELTA_SIZES ?? '10,3000').split(',').map(Number);
const ROUNDS = Number(process.env.DELTA_ROUNDS ?? 3);
const PATHS = (process.env.DELTA_PATHS ?? 'scripted,responses,chat').split(',');

interface Figures {
  cpuPerDelta: number;
  wallPerDelta: number;
}

async function child(dist: string, path: string, size: number): Promise<Figures> {
  const { createCore, pgliteStorage, openaiModel } = await import(pathToFileURL(`${dist}/index.js`).href);
  const { scriptedModel } = await import(pathToFileURL(`${dist}/testing/index.js`).href);
  const { startFakeOpenAI } = await import('../test/support/fake-openai-server.js');
  let current = 1;
  const text = (n: number) => {
    let out = '';
    for (let i = 0; i < n; i++) out += String.fromCharCode(97 + (i % 26)).repeat(size);
    return out;
  };
  const usage = { inputTokens: 1, outputTokens: 1, cachedInputTokens: 0, reasoningTokens: 0 };
  let model;
  let server: Awaited<ReturnType<typeof startFakeOpenAI>> | null = null;
  if (path === 'scripted') {
    model = scriptedModel(() => ({ text: text(current), chunk: size, usage }), { record: false, delayMs: 0 });
  } else {
    server = await startFakeOpenAI();
    model = openaiModel({ model: 'fake', api: path as 'responses' | 'chat', baseURL: server.url, apiKey: 'k', maxRetries: 0 });
  }
  const core = await createCore({ storage: pgliteStorage(), model, worldState: false });
  const session = await core.createSession({ workingDirectory: process.cwd() });
  const turn = async (n: number) => {
    current = n;
    server?.script({ text: text(n), chunk: size });
    const t0 = performance.now();
    const c0 = process.cpuUsage();
    const { turnId } = await session.startTurn({ clientRequestId: randomUUID(), input: [{ type: 'text', text: 'go' }] });
    const outcome = await session.waitForTurn(turnId);
    if (outcome.status !== 'completed') throw new Error(JSON.stringify(outcome));
    const c = process.cpuUsage(c0);
    return { wall: performance.now() - t0, cpu: (c.user + c.system) / 1000 };
  };
  const short = Math.max(1, Math.floor(COUNT / 10));
  await turn(short);
  await turn(short);
  const base = await turn(short);
  const long = await turn(COUNT);
  await core.shutdown();
  await server?.close();
  return { cpuPerDelta: (long.cpu - base.cpu) / (COUNT - short), wallPerDelta: (long.wall - base.wall) / (COUNT - short) };
}

if (process.argv[2] === '--child') {
  const figures = await child(process.argv[3]!, process.argv[4]!, Number(process.argv[5]));
  process.stdout.write(JSON.stringify(figures));
} else {
  const dists = process.argv.slice(2).length ? process.argv.slice(2) : ['dist'];
  const rows = new Map<string, Figures[]>();
  for (let r = 0; r < ROUNDS; r++) {
    for (const path of PATHS) {
      for (const size of SIZES) {
        for (const dist of dists) {
          const out = execFileSync(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--child', resolve(dist), path, String(size)], { encoding: 'utf8', maxBuffer: 1 << 26 });
          const key = `${path.padEnd(9)} ${String(size).padStart(5)} chars  ${dist}`;
          rows.set(key, [...(rows.get(key) ?? []), JSON.parse(out) as Figures]);
        }
      }
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  console.log(`${COUNT} text deltas a turn (cost of the last ${COUNT - Math.floor(COUNT / 10)}), PGlite in memory; medians of ${ROUNDS}`);
  for (const [key, rs] of rows) {
    console.log(`${key.padEnd(60)} cpu ${median(rs.map((x) => x.cpuPerDelta)).toFixed(4)} ms/delta  wall ${median(rs.map((x) => x.wallPerDelta)).toFixed(4)} ms/delta`);
  }
}
