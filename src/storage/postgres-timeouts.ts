/**
 * @module storage/postgres-timeouts
 * How long the `pg` adapter waits for the database (issue "faults-review": a database that hangs
 * must not wedge a session).
 *
 * `pg` waits forever by default: for a connection, for a free client of the pool, and for the
 * answer to a statement. A server that stops answering (a network partition, a stalled proxy, a
 * statement stuck behind a lock) then holds the turn's write, the session's commands queued behind
 * it, and the lease renewal, until the host restarts. So every wait gets a bound here:
 *
 * - `statementMs` is the server's `statement_timeout`: the server itself cancels a statement that
 *   runs longer (57014), so the write is known not to have happened and its locks are released.
 * - `answerMs` is the client's `query_timeout`: a statement whose answer does not come back at all
 *   (the network hangs) fails after it. It is longer than `statementMs`, so that a slow server
 *   answers with its own, certain, cancel first; only a silent network reaches it, and then the
 *   outcome of the statement is unknown: a fact runs again once on a fresh connection, with a repeat
 *   that recognises a committed first attempt (`sql/outcome-unknown.ts`); if that fails too, the
 *   turn fails `persistence_error`.
 * - `connectMs` bounds opening a connection and waiting for a free client of the pool (pool
 *   exhaustion behind hung statements fails the write instead of queueing it forever).
 * - `idleInTransactionMs` is the server's `idle_in_transaction_session_timeout`: a transaction
 *   whose client vanished mid-way (its connection hung) is ended by the server, so the row locks it
 *   holds (the session row, the lease row's `FOR SHARE`) do not block other writers and takeovers
 *   until TCP notices the dead peer hours later.
 *
 * The values are the pool's defaults; a host's own `pool` fields (`statement_timeout`,
 * `query_timeout`, `connectionTimeoutMillis`, `idle_in_transaction_session_timeout`) still win.
 */
import { InputError } from '../errors.js';

export interface PostgresTimeouts {
  /** Server-side limit of one statement, ms (default 30,000; 0 turns it off). */
  statementMs?: number;
  /** Client-side wait for a statement's answer, ms (default `statementMs` + 5,000; 0 turns it off). */
  answerMs?: number;
  /** Wait for a new connection or a free pooled client, ms (default 30,000; 0 waits forever). */
  connectMs?: number;
  /** Server-side end of a transaction left idle by its client, ms (default 60,000; 0 turns it off). */
  idleInTransactionMs?: number;
}

export const DEFAULT_STATEMENT_MS = 30_000;
export const DEFAULT_ANSWER_MARGIN_MS = 5_000;
export const DEFAULT_CONNECT_MS = 30_000;
export const DEFAULT_IDLE_IN_TRANSACTION_MS = 60_000;

function checked(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) {
    throw new InputError('configuration_invalid', `timeouts.${name} must be a whole number of milliseconds (0 turns it off), got ${String(value)}`);
  }
  return value;
}

/**
 * The `pg.Pool` fields for `timeouts`: spread before the host's own `pool` options. A field that is
 * off is left out, which is `pg`'s "no limit".
 */
export function poolTimeouts(timeouts: PostgresTimeouts = {}): Record<string, number | boolean> {
  const statementMs = checked('statementMs', timeouts.statementMs, DEFAULT_STATEMENT_MS);
  const answerMs = checked('answerMs', timeouts.answerMs, statementMs === 0 ? 0 : statementMs + DEFAULT_ANSWER_MARGIN_MS);
  const connectMs = checked('connectMs', timeouts.connectMs, DEFAULT_CONNECT_MS);
  const idleMs = checked('idleInTransactionMs', timeouts.idleInTransactionMs, DEFAULT_IDLE_IN_TRANSACTION_MS);
  return {
    // TCP keepalive lets the OS notice a peer that is gone for good; the timeouts above bound the wait until then.
    keepAlive: true,
    ...(statementMs > 0 ? { statement_timeout: statementMs } : {}),
    ...(answerMs > 0 ? { query_timeout: answerMs } : {}),
    ...(connectMs > 0 ? { connectionTimeoutMillis: connectMs } : {}),
    ...(idleMs > 0 ? { idle_in_transaction_session_timeout: idleMs } : {}),
  };
}

/**
 * Whether `error` is `pg`'s client-side `query_timeout`: the statement may still be on the wire or
 * running, and the connection is in an unknown state, so it must be discarded, not reused or rolled
 * back (a ROLLBACK would only queue behind the statement that does not answer).
 */
export function isAnswerTimeout(error: unknown): boolean {
  return error instanceof Error && error.message === 'Query read timeout';
}
