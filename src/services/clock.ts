/**
 * @module services/clock
 * Time and identifiers are injected, never read globally, so tests can pin them.
 */
import { randomUUID } from 'node:crypto';

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** The clock's time as ISO-8601 UTC, never before `notBefore` (an end is never before its start). */
export function isoNow(clock: Clock, notBefore?: string): string {
  const now = clock.now();
  return new Date(notBefore ? Math.max(now, Date.parse(notBefore)) : now).toISOString();
}

export interface IdGenerator {
  /** A new unique id with the given prefix, e.g. `turn_…`. */
  next(prefix: string): string;
}

export const randomIds: IdGenerator = { next: (prefix) => `${prefix}_${randomUUID()}` };

/** Deterministic ids for tests: `prefix_1`, `prefix_2`, ... per prefix. */
export function sequentialIds(): IdGenerator {
  const counters = new Map<string, number>();
  return {
    next(prefix) {
      const n = (counters.get(prefix) ?? 0) + 1;
      counters.set(prefix, n);
      return `${prefix}_${n}`;
    },
  };
}
