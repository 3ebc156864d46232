/**
 * @module storage/postgres-connect
 * Connections the server refuses for now (faults-review): `too many connections` (53300: the
 * server's `max_connections`, or the role's or database's `CONNECTION LIMIT`, reached by this and
 * other processes). It comes while a connection is being opened, before any statement is sent, so
 * nothing was written and asking again is safe. The adapter asks again with a growing pause, within
 * the pool's connection bound (`connectMs`), instead of failing the turn's write at once for a
 * condition that usually passes in milliseconds (a connection elsewhere is released).
 *
 * Also asked again: 57P03 for a server that is `starting up`, `in recovery` or `not yet accepting
 * connections` (a restart or a failover in progress: it usually accepts within seconds), within the
 * same bound. Before the pipelined lanes discarded connections that answered a FATAL error
 * (`pg-lanes.ts`), retrying it made `test/faults/degradation.test.ts`'s server stop-and-restart case
 * fail its first turn after the restart: the pool handed out a connection whose server had said
 * goodbye; with that fixed, and a lost statement now run again (`sql/outcome-unknown.ts`), the
 * retry is safe (integrity3, re-tested).
 *
 * Not retried: 57P03 for a server `shutting down` (it will not accept soon; failing at once answers
 * commands during the outage rather than holding each for the whole bound), a refused TCP connection
 * (ECONNREFUSED: the server is down; failing at once answers commands during an outage without
 * delay), and every error after a statement was sent (`sql/outcome-unknown.ts` judges those).
 */
import { sqlStateOf } from './sql/sql-state.js';

/** 57P03's message for a server on its way down, which is not waited for. */
const SHUTTING_DOWN = /shutting down/i;

/** True for a connection the server refused for now (see the module header). */
export function refusedForNow(error: unknown): boolean {
  const state = sqlStateOf(error);
  if (state === '53300') return true;
  return state === '57P03' && !SHUTTING_DOWN.test(error instanceof Error ? error.message : '');
}

const FIRST_PAUSE_MS = 25;
const LONGEST_PAUSE_MS = 500;

/**
 * Runs `attempt` again while it fails with a connection refused for now, until `boundMs` has passed
 * since the first attempt (0: no bound, as `pg`'s `connectionTimeoutMillis` 0); then the last
 * failure is thrown as it is.
 */
export async function retryRefusedConnect<T>(attempt: () => Promise<T>, boundMs: number): Promise<T> {
  const started = Date.now();
  let pause = FIRST_PAUSE_MS;
  for (;;) {
    try {
      return await attempt();
    } catch (error) {
      if (!refusedForNow(error)) throw error;
      const left = boundMs > 0 ? boundMs - (Date.now() - started) : Infinity;
      if (left <= 0) throw error;
      await new Promise((resolve) => setTimeout(resolve, Math.min(pause, left)));
      pause = Math.min(pause * 2, LONGEST_PAUSE_MS);
    }
  }
}
