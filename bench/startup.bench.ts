/**
 * Start-up and memory of `openwork chat` on its embedded store (issue 14.4), measured on the built
 * CLI (`bin/openwork.js`, `dist/`, with the PGlite seed the build ships) in a child process:
 *
 * - time from spawn to the first prompt (the "reading prompts from stdin" line) and to the store
 *   being ready (the session header, `openwork chat · session <id>`: chat shows a new session's
 *   prompt while its store finishes opening, and the first line typed waits for it), in a new working
 *   directory (no `.openwork/`), in that directory again (an existing store), and in a new one with
 *   the seed hidden (initdb, which is what every new store cost before the seed);
 * - peak RSS (the child's own `maxRSS`) of a 20-turn conversation against the fake OpenAI server.
 *
 * `STARTUP_RUNS` (default 3) repetitions; the median is printed.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, renameSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { startFakeOpenAI } from '../test/support/fake-openai-server.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const seed = join(root, 'dist', 'storage', 'pglite-seed.tar.gz');
const READY = 'reading prompts from stdin';
const STORE_READY = /openwork chat · session ses_/;
// Printed by the child itself on exit: its peak resident set (kB) and its CPU time at the first prompt.
const usageHook = pathToFileURL(join(root, 'bench', 'support', 'child-usage.mjs')).href;

interface ChatRun {
  firstPromptMs: number;
  /** CPU time (user + system) of the child when the first prompt appeared. */
  firstPromptCpuMs: number;
  /** When the session header appeared: the store open, the runtime loaded, the session created. */
  storeReadyMs: number;
  storeReadyCpuMs: number;
  maxRssMb: number;
}

function runChat(cwd: string, baseURL: string, prompts: number): Promise<ChatRun> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(process.execPath, ['--import', usageHook, join(root, 'bin', 'openwork.js'), 'chat', '--base-url', baseURL, '--model', 'bench'], {
      cwd,
      env: { ...process.env, OPENAI_API_KEY: 'bench', NO_COLOR: '1' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    let firstPromptMs = -1;
    let storeReadyMs = -1;
    let answered = 0;
    const next = () => {
      if (answered < prompts) child.stdin.write(`turn ${++answered}\n`);
      else child.stdin.end();
    };
    child.stdout.on('data', (chunk: Buffer) => {
      const before = out.length;
      out += chunk.toString();
      if (storeReadyMs < 0 && STORE_READY.test(out)) storeReadyMs = performance.now() - started;
      if (firstPromptMs < 0 && out.includes(READY)) {
        firstPromptMs = performance.now() - started;
        next();
      } else if (firstPromptMs >= 0) {
        // One prompt at a time: the next line goes in when the reply (PONG) has been printed.
        const fresh = out.slice(before);
        for (let i = fresh.indexOf('PONG'); i >= 0; i = fresh.indexOf('PONG', i + 4)) next();
      }
    });
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      const rss = /MAXRSS (\d+)/.exec(err);
      const cpu = /FIRSTCPU (\d+)/.exec(err);
      const readyCpu = /READYCPU (\d+)/.exec(err);
      if (code !== 0 || firstPromptMs < 0 || storeReadyMs < 0 || !rss || !cpu || !readyCpu) reject(new Error(`openwork chat exited ${code}: ${err.slice(-2000)}`));
      else resolve({ firstPromptMs, firstPromptCpuMs: Number(cpu[1]), storeReadyMs, storeReadyCpuMs: Number(readyCpu[1]), maxRssMb: Number(rss[1]) / 1024 });
    });
  });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

export async function runStartupBench(): Promise<string[]> {
  if (!existsSync(seed)) execFileSync(process.execPath, [join(root, 'scripts', 'build.mjs')], { stdio: 'inherit' });
  const server = await startFakeOpenAI();
  const refill = setInterval(() => {
    if (server.remaining < 50) server.script(...Array.from({ length: 200 }, () => ({ text: 'PONG' })));
  }, 20);
  server.script(...Array.from({ length: 200 }, () => ({ text: 'PONG' })));
  const runs = Number(process.env.STARTUP_RUNS ?? 3);
  const dirs: string[] = [];
  const fresh = () => {
    const dir = mkdtempSync(join(tmpdir(), 'openwork-startup-'));
    dirs.push(dir);
    return dir;
  };
  try {
    const newDir: ChatRun[] = [];
    const existing: ChatRun[] = [];
    const withoutSeed: ChatRun[] = [];
    const rss20: number[] = [];
    for (let i = 0; i < runs; i++) {
      const dir = fresh();
      newDir.push(await runChat(dir, server.url, 0));
      const requestsBefore = server.requests.length;
      const again = await runChat(dir, server.url, 20);
      if (server.requests.length - requestsBefore !== 20) throw new Error(`expected 20 model calls, saw ${server.requests.length - requestsBefore}`);
      existing.push(again);
      rss20.push(again.maxRssMb);
    }
    // The seed hidden: a new store runs initdb, as every new store did before the seed.
    renameSync(seed, `${seed}.hidden`);
    try {
      for (let i = 0; i < runs; i++) withoutSeed.push(await runChat(fresh(), server.url, 0));
    } finally {
      renameSync(`${seed}.hidden`, seed);
    }
    const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
    const both = (xs: ChatRun[]) =>
      `prompt shown ${s(median(xs.map((x) => x.firstPromptMs)))} (CPU ${s(median(xs.map((x) => x.firstPromptCpuMs)))}), ` +
      `store ready ${s(median(xs.map((x) => x.storeReadyMs)))} (CPU ${s(median(xs.map((x) => x.storeReadyCpuMs)))})`;
    return [
      `openwork chat to its first prompt and to its store being ready, wall (CPU of the child) (median of ${runs}; target for the prompt: existing 1 s, new 3 s; load average ${loadavg()[0]!.toFixed(1)})`,
      `  existing directory        ${both(existing)}`,
      `  new directory (seed)      ${both(newDir)}`,
      `  new directory (initdb)    ${both(withoutSeed)}`,
      `peak RSS of a 20-turn openwork chat (target 300 MB): ${median(rss20).toFixed(0)} MB`,
    ];
  } finally {
    clearInterval(refill);
    await server.close();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  }
}
