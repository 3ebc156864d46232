/**
 * Storage wrappers for fault injection: fail or freeze chosen methods of a real storage.
 */
import { z } from 'zod';
import { StorageError } from '../../src/errors.js';
import { defineTool } from '../../src/services/tools/define.js';
import type { ModelRequest } from '../../src/services/model/port.js';
import type { SessionStorage } from '../../src/storage/storage.js';

export type StorageMethod = keyof SessionStorage;

export interface FaultyStorage extends SessionStorage {
  /**
   * Makes the next `times` calls of `method` fail (default: every call until cleared); with
   * `after`, the first `after` calls from now still succeed (`after: 1, times: 1` fails the 2nd).
   */
  failOn(method: StorageMethod, times?: number, options?: { after?: number }): void;
  /**
   * Holds the next call of `method` before it reaches the database, until `release()`; `reached`
   * resolves when that call is made, `settled` when the released call has committed (or failed).
   */
  hold(method: StorageMethod): { reached: Promise<void>; release(): void; settled: Promise<void> };
  /** From now on, every write hangs forever: the process "died" as far as the database can tell. */
  freeze(): void;
  clear(): void;
  calls: Array<{ method: StorageMethod; args: unknown[] }>;
}

const WRITES = new Set<StorageMethod>([
  'beginTurn',
  'recordModelCallStart',
  'commitAssistantMessage',
  'commitToolResult',
  'commitPlanUpdate',
  'appendTurnMessages',
  'finishTurn',
  'interruptTurn',
  'writeTraceSignals',
  'setPermissionMode',
  'insertCheckpoint',
  'advancePruneWatermark',
  'createSession',
  'reconcileChildren',
]);

interface Hold {
  reached: () => void;
  gate: Promise<void>;
  settled: () => void;
}

export function faultyStorage(inner: SessionStorage): FaultyStorage {
  const failures = new Map<StorageMethod, { after: number; times: number }>();
  const holds = new Map<StorageMethod, Hold>();
  let frozen = false;
  const calls: FaultyStorage['calls'] = [];
  const hold = (method: StorageMethod) => {
    let reached!: () => void;
    let release!: () => void;
    let settled!: () => void;
    const result = {
      reached: new Promise<void>((resolve) => (reached = resolve)),
      settled: new Promise<void>((resolve) => (settled = resolve)),
      release: () => release(),
    };
    holds.set(method, { reached, gate: new Promise<void>((resolve) => (release = resolve)), settled });
    return result;
  };
  const frozenLeases = (leases: NonNullable<SessionStorage['leases']>) =>
    new Proxy(leases, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver) as unknown;
        if (typeof value !== 'function') return value;
        return (...args: unknown[]) => (frozen ? new Promise(() => undefined) : (value as (...a: unknown[]) => unknown).apply(target, args));
      },
    });
  return new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === 'failOn') {
        return (method: StorageMethod, times = Infinity, options: { after?: number } = {}) => failures.set(method, { after: options.after ?? 0, times });
      }
      if (prop === 'hold') return hold;
      if (prop === 'freeze') return () => (frozen = true);
      if (prop === 'clear') return () => failures.clear();
      if (prop === 'calls') return calls;
      const value = Reflect.get(target, prop, receiver) as unknown;
      // A frozen process's lease keeper is as dead as the rest of it: its timers still fire, but
      // no renewal or takeover scan of it reaches the database. (Left live, its scan corrected the
      // running turns of the "dead" process between its successor's release of the old leases and
      // its successor's takeover scan, so that the successor's startup correction found 0 turns.)
      if (prop === 'leases' && value !== null && typeof value === 'object') return frozenLeases(value as NonNullable<SessionStorage['leases']>);
      if (typeof value !== 'function') return value;
      const method = prop as StorageMethod;
      return (...args: unknown[]) => {
        calls.push({ method, args });
        if (frozen && WRITES.has(method)) return new Promise(() => undefined);
        const failure = failures.get(method);
        if (failure && failure.after > 0) {
          failure.after -= 1;
        } else if (failure && failure.times > 0) {
          failure.times -= 1;
          return Promise.reject(new StorageError(`injected failure in ${String(method)}`));
        }
        const held = holds.get(method);
        if (held) {
          holds.delete(method);
          held.reached();
          return held.gate.then(() => (value as (...a: unknown[]) => Promise<unknown>).apply(target, args)).finally(() => held.settled());
        }
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  }) as FaultyStorage;
}

/**
 * `promise`, or a rejection naming `what` once `ms` have passed: a fault suite's bound on an outcome
 * that must come (a wedged session fails the test instead of hanging it).
 */
export async function within<T>(ms: number, what: string, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A scripted model's step that answers each request with its last user text. */
export function echoLastUser(request: ModelRequest): { text: string } {
  const user = request.messages.filter((m) => m.role === 'user').at(-1);
  return { text: user && user.role === 'user' ? user.content.map((b) => ('text' in b ? b.text : '')).join('') : '' };
}

/**
 * A tool with a visible side effect: every run is recorded in `ran`, and `during` runs while the tool
 * does (between the model call that asked for it and its result's write).
 */
export function spyTool(ran: number[], during: () => void = () => undefined) {
  return defineTool({
    name: 'spy',
    description: 'Records its run.',
    parameters: z.object({ n: z.number() }),
    execute: ({ n }) => {
      ran.push(n);
      during();
      return `ran ${n}`;
    },
  });
}
