/**
 * Runs the real `openwork` command (bin/openwork.js → dist/) as a child process, building dist/
 * first when any source file is newer than it.
 */
import { execFileSync, spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const BIN = join(ROOT, 'bin', 'openwork.js');

function newestMtime(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestMtime(path) : statSync(path).mtimeMs);
  }
  return newest;
}

function distIsFresh(): boolean {
  let built = 0;
  try {
    built = statSync(join(ROOT, 'dist', 'cli', 'main.js')).mtimeMs;
  } catch {
    built = 0;
  }
  // The inspector's page is copied into dist/ too.
  return built > Math.max(newestMtime(join(ROOT, 'src')), newestMtime(join(ROOT, 'inspector', 'page')));
}

/** One build at a time across the suite's workers (the build starts by deleting dist/). */
const BUILD_LOCK = join(tmpdir(), `openwork-build-${createHash('sha1').update(ROOT).digest('hex').slice(0, 12)}.lock`);

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** Builds dist/ unless it is newer than every file under src/ (under a lock shared by test files). */
export function ensureBuilt(): void {
  if (distIsFresh()) return;
  const deadline = Date.now() + 300_000;
  for (;;) {
    try {
      mkdirSync(BUILD_LOCK);
      break;
    } catch {
      // A lock left by a killed run is stale after ten minutes.
      try {
        if (Date.now() - statSync(BUILD_LOCK).mtimeMs > 600_000) rmSync(BUILD_LOCK, { recursive: true, force: true });
      } catch {
        // Released meanwhile.
      }
      if (Date.now() > deadline) throw new Error(`ensureBuilt: ${BUILD_LOCK} held for five minutes`);
      sleepSync(200);
    }
  }
  try {
    // Another worker may have built while this one waited.
    if (!distIsFresh()) execFileSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs')], { cwd: ROOT, stdio: 'pipe' });
  } finally {
    rmSync(BUILD_LOCK, { recursive: true, force: true });
  }
}

export interface CliRun {
  child: ChildProcessWithoutNullStreams;
  readonly stdout: string;
  readonly stderr: string;
  /** Resolves once stdout (or stderr) matches. */
  waitFor(pattern: RegExp, stream?: 'stdout' | 'stderr', timeoutMs?: number): Promise<void>;
  /** Writes a line to stdin. */
  type(line: string): void;
  exit: Promise<number | null>;
}

/** An environment without the caller's OpenAI and database settings. */
export function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
  for (const key of Object.keys(env)) {
    if (key.startsWith('OPENAI_') || key.startsWith('OPENWORK_') || key === 'DATABASE_URL') delete env[key];
  }
  return { ...env, ...extra };
}

export function runCli(args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv }): CliRun {
  const child = spawn(process.execPath, [BIN, ...args], { cwd: options.cwd, env: options.env ?? cleanEnv(), stdio: 'pipe' });
  let stdout = '';
  let stderr = '';
  const listeners = new Set<() => void>();
  const changed = () => {
    for (const l of [...listeners]) l();
  };
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
    changed();
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
    changed();
  });
  const exit = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  return {
    child,
    get stdout() {
      return stdout;
    },
    get stderr() {
      return stderr;
    },
    waitFor(pattern, stream = 'stdout', timeoutMs = 60_000) {
      return new Promise<void>((resolve, reject) => {
        const check = () => {
          if (pattern.test(stream === 'stdout' ? stdout : stderr)) {
            listeners.delete(check);
            clearTimeout(timer);
            resolve();
          }
        };
        const timer = setTimeout(() => {
          listeners.delete(check);
          reject(new Error(`timed out waiting for ${pattern} on ${stream}\n--- stdout\n${stdout}\n--- stderr\n${stderr}`));
        }, timeoutMs);
        listeners.add(check);
        void exit.then(() => {
          if (!listeners.has(check)) return;
          listeners.delete(check);
          clearTimeout(timer);
          if (pattern.test(stream === 'stdout' ? stdout : stderr)) resolve();
          else reject(new Error(`the process exited before ${pattern} appeared on ${stream}\n--- stdout\n${stdout}\n--- stderr\n${stderr}`));
        });
        check();
      });
    },
    type(line) {
      child.stdin.write(`${line}\n`);
    },
    exit,
  };
}
