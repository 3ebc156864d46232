/**
 * @module services/sandbox/process
 * Runs one sandboxed command as its own process group: streams its output, enforces the timeout,
 * and on cancel or timeout kills the whole group with SIGKILL (reference §11.2). A kill or wait
 * that cannot be confirmed ends as `unconfirmed` (the tool reports `outcome_unknown`).
 */
import { spawn, type StdioOptions } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import type { Readable } from 'node:stream';

export interface RunOptions {
  file: string;
  args: string[];
  env: Record<string, string>;
  cwd: string;
  timeoutMs: number;
  signal: AbortSignal;
  /** Every chunk of the merged output (stdout of the launcher; the command's stderr is joined to it). */
  onOutput(chunk: Buffer): void;
  /** bubblewrap writes JSON status lines to fd 3 (`--json-status-fd 3`). */
  statusFd?: boolean;
  /** Files opened read-only as descriptors 4, 5, … of the launcher (bubblewrap's seccomp program). */
  inputFiles?: string[];
  /** Open descriptors passed on after the input files (their owner closes them, not this run). */
  descriptors?: number[];
  /** How long to wait for the group to go after SIGKILL before calling the outcome unknown. */
  killGraceMs?: number;
  /**
   * Looked at every `everyMs` while the command runs: a reason it answers stops the command like a
   * timeout does (its whole group killed) and the run ends `limit` (bash's disk budget).
   */
  watch?: { everyMs: number; exceeded(): string | null };
}

export type RunOutcome =
  | { kind: 'exited'; exitCode: number | null; signal: NodeJS.Signals | null; launcherStderr: string; status: string; durationMs: number }
  | { kind: 'timeout'; durationMs: number }
  | { kind: 'cancelled'; durationMs: number }
  | { kind: 'limit'; reason: string; durationMs: number }
  | { kind: 'spawn_failed'; message: string; durationMs: number }
  | { kind: 'unconfirmed'; message: string; durationMs: number };

function collect(stream: Readable | null | undefined, limit: number): () => string {
  const chunks: Buffer[] = [];
  let size = 0;
  stream?.on('data', (chunk: Buffer) => {
    if (size >= limit) return;
    chunks.push(chunk);
    size += chunk.length;
  });
  return () => Buffer.concat(chunks).toString('utf8');
}

/** Starts the command and resolves when it (and its process group) has ended. */
export function runProcess(options: RunOptions): Promise<RunOutcome> {
  const started = Date.now();
  const elapsed = () => Date.now() - started;
  return new Promise<RunOutcome>((resolve) => {
    if (options.signal.aborted) {
      resolve({ kind: 'cancelled', durationMs: 0 });
      return;
    }
    let child;
    const inputs: number[] = [];
    try {
      for (const file of options.inputFiles ?? []) inputs.push(openSync(file, 'r'));
      const stdio: StdioOptions = ['ignore', 'pipe', 'pipe', options.statusFd ? 'pipe' : 'ignore', ...inputs, ...(options.descriptors ?? [])];
      child = spawn(options.file, options.args, { cwd: options.cwd, env: options.env, detached: true, stdio });
    } catch (error) {
      resolve({ kind: 'spawn_failed', message: (error as Error).message, durationMs: elapsed() });
      return;
    } finally {
      // The child has its own copies now (or never started).
      for (const fd of inputs) closeSync(fd);
    }
    let stopping: 'timeout' | 'cancelled' | 'limit' | null = null;
    let limitReason = '';
    let watchTimer: NodeJS.Timeout | undefined;
    let settled = false;
    let graceTimer: NodeJS.Timeout | undefined;
    const finish = (outcome: RunOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearTimeout(graceTimer);
      clearInterval(watchTimer);
      options.signal.removeEventListener('abort', onAbort);
      resolve(outcome);
    };
    const kill = (why: 'timeout' | 'cancelled' | 'limit') => {
      if (stopping || settled) return;
      stopping = why;
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ESRCH') {
          finish({ kind: 'unconfirmed', message: `could not kill the command: ${(error as Error).message}`, durationMs: elapsed() });
          return;
        }
      }
      graceTimer = setTimeout(() => {
        finish({ kind: 'unconfirmed', message: 'the command did not exit after SIGKILL', durationMs: elapsed() });
      }, options.killGraceMs ?? 5_000);
    };
    const onAbort = () => kill('cancelled');
    options.signal.addEventListener('abort', onAbort, { once: true });
    const timer = setTimeout(() => kill('timeout'), options.timeoutMs);
    const watch = options.watch;
    if (watch) {
      watchTimer = setInterval(() => {
        if (stopping || settled) return;
        const reason = watch.exceeded();
        if (reason === null) return;
        limitReason = reason;
        kill('limit');
      }, watch.everyMs);
    }
    child.stdout?.on('data', (chunk: Buffer) => {
      if (!settled) options.onOutput(chunk);
    });
    const stderr = collect(child.stderr, 64 * 1024);
    const status = collect(options.statusFd ? (child.stdio[3] as Readable | null) : null, 64 * 1024);
    child.on('error', (error) => {
      finish({ kind: 'spawn_failed', message: error.message, durationMs: elapsed() });
    });
    // Background jobs left behind by the shell go with it: a fresh shell per call, nothing lingers.
    child.on('exit', () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // ESRCH: the group is already gone.
      }
    });
    // `close` fires once the process has exited and every pipe is closed, so no writer is left.
    child.on('close', (exitCode, signal) => {
      if (stopping === 'timeout') return finish({ kind: 'timeout', durationMs: elapsed() });
      if (stopping === 'cancelled') return finish({ kind: 'cancelled', durationMs: elapsed() });
      if (stopping === 'limit') return finish({ kind: 'limit', reason: limitReason, durationMs: elapsed() });
      finish({ kind: 'exited', exitCode, signal, launcherStderr: stderr(), status: status(), durationMs: elapsed() });
    });
  });
}
