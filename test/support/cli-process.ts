/**
 * Runs the real `openwork` command (bin/openwork.js → dist/) as a child process, building dist/
 * first when any source file is newer than it.
 */
import { execFileSync, spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
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

/** Builds dist/ unless it is newer than every file under src/. */
export function ensureBuilt(): void {
  let built = 0;
  try {
    built = statSync(join(ROOT, 'dist', 'cli', 'main.js')).mtimeMs;
  } catch {
    built = 0;
  }
  if (built > newestMtime(join(ROOT, 'src'))) return;
  execFileSync(process.execPath, [join(ROOT, 'scripts', 'build.mjs')], { cwd: ROOT, stdio: 'pipe' });
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
