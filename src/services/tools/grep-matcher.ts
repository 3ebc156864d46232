/**
 * @module services/tools/grep-matcher
 * grep's regular-expression matching, off the main thread (issue 12 point 8). JavaScript's regex
 * engine backtracks, so a pattern like `(a+)+$` on one long line can run for hours; on the main
 * thread that froze every session and the inspector, and nothing (not even cancel) could run. Each
 * grep call gets one `worker_threads` Worker that matches the files it is sent; the main thread
 * only waits, and on the deadline or on cancel it terminates the worker, which stops the match
 * wherever it is.
 *
 * The worker's code is inline JavaScript (`eval: true`) rather than a file beside this one, so it
 * is the same whether the library runs from its TypeScript sources (vitest, tsx) or from `dist/`.
 */
import { Worker } from 'node:worker_threads';

/** Each matched line comes back cut to this many characters (the tool cuts it further to 2,000 bytes). */
export const MATCHED_LINE_CHARS = 2_001;

/** The worker's heap cap: a runaway match or a huge file fails that one call, never the host. */
const WORKER_HEAP_MB = 256;

/** Runs inside the worker: plain JavaScript, CommonJS (the form `eval: true` runs). */
const WORKER_SOURCE = `
'use strict';
const { parentPort, workerData } = require('node:worker_threads');
const regex = new RegExp(workerData.pattern, workerData.flags);
parentPort.on('message', ({ id, bytes, limit }) => {
  const lines = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8').split('\\n');
  const matches = [];
  let more = false;
  for (let i = 0; i < lines.length; i += 1) {
    if (!regex.test(lines[i])) continue;
    if (matches.length >= limit) {
      more = true;
      break;
    }
    matches.push({ line: i + 1, text: lines[i].slice(0, ${MATCHED_LINE_CHARS}) });
  }
  parentPort.postMessage({ id, matches, more });
});
`;

export interface LineMatch {
  /** 1-based line number. */
  line: number;
  /** The line, at most `MATCHED_LINE_CHARS` characters of it. */
  text: string;
}

export type MatchOutcome =
  | { kind: 'matched'; matches: LineMatch[]; more: boolean }
  /** The deadline passed while this file was being matched; the worker was terminated. */
  | { kind: 'deadline' }
  /** The call was cancelled while this file was being matched; the worker was terminated. */
  | { kind: 'aborted' }
  /** The worker failed (out of memory, for instance); it is gone. */
  | { kind: 'failed'; message: string };

interface Reply {
  id: number;
  matches: LineMatch[];
  more: boolean;
}

/**
 * One grep call's matcher: a worker started on the first file and terminated by `close`, by the
 * deadline or by the call's abort signal.
 *
 * @example
 * const matcher = new LineMatcher('(a+)+$', 'u');
 * try {
 *   const outcome = await matcher.match(buffer, 50, { signal, deadline: Date.now() + 30_000 });
 * } finally {
 *   matcher.close();
 * }
 */
export class LineMatcher {
  private worker: Worker | null = null;
  private nextId = 0;
  /** Set once the worker has been terminated or has died; a dead matcher answers `failed`. */
  private dead: string | null = null;

  constructor(
    private readonly pattern: string,
    private readonly flags: string,
  ) {}

  /** Matches every line of `bytes` (UTF-8): at most `limit` matches, and whether there were more. */
  match(bytes: Uint8Array, limit: number, stop: { signal: AbortSignal; deadline: number; now?: () => number }): Promise<MatchOutcome> {
    if (stop.signal.aborted) return Promise.resolve({ kind: 'aborted' });
    if (this.dead !== null) return Promise.resolve({ kind: 'failed', message: this.dead });
    const worker = this.start();
    const id = (this.nextId += 1);
    return new Promise<MatchOutcome>((resolve) => {
      const finish = (outcome: MatchOutcome) => {
        clearTimeout(timer);
        stop.signal.removeEventListener('abort', onAbort);
        worker.off('message', onMessage);
        worker.off('error', onError);
        worker.off('exit', onExit);
        resolve(outcome);
      };
      const onMessage = (reply: Reply) => {
        if (reply.id === id) finish({ kind: 'matched', matches: reply.matches, more: reply.more });
      };
      const onError = (error: Error) => {
        this.dead = error.message;
        finish({ kind: 'failed', message: error.message });
      };
      const onExit = (code: number) => {
        this.dead ??= `the matcher stopped (exit ${code})`;
        finish({ kind: 'failed', message: this.dead });
      };
      const onAbort = () => {
        this.terminate('cancelled');
        finish({ kind: 'aborted' });
      };
      const timer = setTimeout(
        () => {
          this.terminate('deadline');
          finish({ kind: 'deadline' });
        },
        Math.max(0, stop.deadline - (stop.now ?? Date.now)()),
      );
      worker.on('message', onMessage);
      worker.on('error', onError);
      worker.on('exit', onExit);
      stop.signal.addEventListener('abort', onAbort, { once: true });
      // A copy is posted: the caller's buffer may be a slice of Node's shared pool.
      worker.postMessage({ id, bytes, limit });
    });
  }

  /** Terminates the worker, if one was started. */
  close(): void {
    this.terminate('closed');
  }

  private start(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { pattern: this.pattern, flags: this.flags },
      resourceLimits: { maxOldGenerationSizeMb: WORKER_HEAP_MB },
    });
    // An idle matcher must not keep the host process alive.
    worker.unref();
    // Errors after a terminate have nobody waiting; they must not become unhandled.
    worker.on('error', () => {});
    this.worker = worker;
    return worker;
  }

  private terminate(reason: string): void {
    this.dead ??= `the matcher was stopped (${reason})`;
    const worker = this.worker;
    if (!worker) return;
    // Terminating interrupts the regex wherever it is; the host does not wait for the thread to go.
    void worker.terminate().catch(() => {});
  }
}
