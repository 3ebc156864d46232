/**
 * Storage wrappers for fault injection: fail or freeze chosen methods of a real storage.
 */
import { StorageError } from '../../src/errors.js';
import type { SessionStorage } from '../../src/storage/storage.js';

export type StorageMethod = keyof SessionStorage;

export interface FaultyStorage extends SessionStorage {
  /** Makes the next `times` calls of `method` fail (default: every call until cleared). */
  failOn(method: StorageMethod, times?: number): void;
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
  'writeTraceSignals',
  'setSandboxMode',
  'insertCheckpoint',
  'advancePruneWatermark',
  'createSession',
  'reconcileChildren',
]);

export function faultyStorage(inner: SessionStorage): FaultyStorage {
  const failures = new Map<StorageMethod, number>();
  let frozen = false;
  const calls: FaultyStorage['calls'] = [];
  return new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === 'failOn') return (method: StorageMethod, times = Infinity) => failures.set(method, times);
      if (prop === 'freeze') return () => (frozen = true);
      if (prop === 'clear') return () => failures.clear();
      if (prop === 'calls') return calls;
      const value = Reflect.get(target, prop, receiver) as unknown;
      if (typeof value !== 'function') return value;
      const method = prop as StorageMethod;
      return (...args: unknown[]) => {
        calls.push({ method, args });
        if (frozen && WRITES.has(method)) return new Promise(() => undefined);
        const left = failures.get(method) ?? 0;
        if (left > 0) {
          failures.set(method, left - 1);
          return Promise.reject(new StorageError(`injected failure in ${String(method)}`));
        }
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  }) as FaultyStorage;
}
