/**
 * @module storage/sql/outcome-unknown
 * The failures of a fact statement after which nobody knows whether it committed (integrity3), and
 * how such a write is settled: run again, bounded, by a repeat that detects a commit of the first
 * attempt and then answers as the first attempt would have, without writing twice.
 *
 * Outcome unknown: the connection was lost or ended while the statement was on it (`Connection
 * terminated unexpectedly`, ECONNRESET, EPIPE), the server ended the session with a FATAL answer
 * (57P01 `terminating connection due to administrator command`, 57P05 `idle-session timeout`, a
 * crash's 57P02), or the answer never came (`Query read timeout`, the adapter's answer bound). In
 * each case the server may have run and committed the statement and only its reply is missing. A
 * pooled connection that died unnoticed (a server restart whose goodbye the pool had not read yet, a
 * proxy that dropped an idle connection) fails the first statement it is given in exactly this way,
 * although the database is healthy again.
 *
 * Not outcome unknown, and never run again here: an answer of the server that reports an error
 * (severity ERROR: the statement was rolled back whole; `rolled-back.ts` lists the ones worth
 * running again), a fact the fence refused (no error at all: no row), and a connection that could not
 * be opened (refused, not found, the connect bound: nothing was sent; `postgres-connect.ts` asks
 * again where that is worth it, and otherwise failing at once answers commands during an outage).
 *
 * Only the `pg` adapter loses connections: PGlite runs in this process, and its failures are its
 * answers.
 */
import { isAnswerTimeout } from '../postgres-timeouts.js';
import { sqlStateOf } from './sql-state.js';

/**
 * How many times a fact whose outcome is unknown runs again. Each repeat goes to a fresh lane (the
 * lost connection was discarded with the failure), so two cover a lost reply plus one more dead
 * pooled connection; each is bounded by the adapter's answer and connect bounds, and after an answer
 * timeout (a wait of the whole answer bound) only one repeat follows, so a hung network costs at
 * most two answer bounds, not three.
 */
export const UNKNOWN_OUTCOME_RERUNS = 2;

/** Socket-level codes of a connection that broke under a statement (not while being opened). */
const BROKEN_SOCKET = new Set(['ECONNRESET', 'EPIPE', 'ECONNABORTED', 'ETIMEDOUT']);

/** `pg`'s own messages for a connection that ended under a statement or before it could be sent. */
const BROKEN_CLIENT = /Connection terminated unexpectedly|is not queryable/;

/**
 * FATAL answers of a connection being opened: nothing was sent on it, and they are the connect
 * path's to judge (too many connections, starting up or shutting down, authentication, no such
 * database).
 */
const CONNECT_REFUSALS = /^(53300|57P03|28...|3D000)$/;

/** True when `error` leaves a statement's outcome unknown (see the module header). */
export function outcomeUnknown(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  if (isAnswerTimeout(error)) return true;
  const severity = (error as { severity?: unknown }).severity;
  if (severity === 'FATAL' || severity === 'PANIC') {
    const state = sqlStateOf(error);
    return state === undefined || !CONNECT_REFUSALS.test(state);
  }
  // Any other answer of the server is an ERROR, NOTICE or WARNING: the statement's fate is known.
  if (severity !== undefined) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && BROKEN_SOCKET.has(code)) return true;
  return BROKEN_CLIENT.test(error.message);
}

/**
 * Runs `attempt(false)`; when it fails with an unknown outcome, runs `attempt(true)` instead (the
 * repeat), at most `UNKNOWN_OUTCOME_RERUNS` times (once more only after an answer timeout). The repeat
 * must be safe whether or not an earlier attempt committed: it detects that commit and answers as
 * the first attempt would have. Every other failure, and the last unknown one, is thrown as it is.
 * One function for both, so that a fact allocates no closure for a repeat it will almost never run.
 */
export async function settleUnknownOutcome<T>(attempt: (repeat: boolean) => Promise<T>): Promise<T> {
  let reruns = 0;
  let timedOut = false;
  for (;;) {
    try {
      return await attempt(reruns > 0);
    } catch (error) {
      if (!outcomeUnknown(error) || reruns >= UNKNOWN_OUTCOME_RERUNS) throw error;
      if (isAnswerTimeout(error)) {
        if (timedOut) throw error;
        timedOut = true;
      }
      reruns += 1;
    }
  }
}
