/**
 * @module storage/pg-lanes
 * Single statements outside a transaction (every fact of a step, the trace batch, a lease renewal)
 * ride shared, pipelined connections of the pool: "lanes". A statement joins a lane already busy
 * with other statements instead of waiting in the pool's queue for a connection of its own, and
 * every statement a lane is given in one tick of the event loop leaves in ONE socket write.
 *
 * Why (issue 14, docs/decisions.md "Lanes revived"): with many sessions at once,
 * `pg` sends each statement with its own write (a `writev` syscall, which wakes the server backend
 * and, on a loaded machine, often hands it the CPU in the middle of the syscall), and a statement
 * that waits for a pool connection is only sent once Node has read the previous answer on that
 * connection, so the backends idle while Node catches up. A lane keeps its backend fed and writes
 * a tick's statements together.
 *
 * Why it is safe: `pg`'s pipeline mode ends each statement with its own Sync, so each one is its own
 * implicit transaction, as it was on a connection of its own: an error skips only that statement's
 * messages, and the answers come back in the order sent, each to its own query. Statements that
 * must share a transaction never ride a lane (transactions check a connection out for themselves, so
 * nothing else is written between their BEGIN and COMMIT). A statement's fence is evaluated by the
 * server when it executes, as before; two statements of one session are never in flight together
 * (the session awaits each fact), so lanes do not reorder anything the fence or recovery rely on.
 *
 * One drained lane rests instead of going back to the pool (docs/decisions.md "A resting lane"):
 * serial steps send one statement at a time, and a pool checkout and release around each one cost
 * more Node CPU than the statement's own protocol work (two timers, a promise, listeners). The
 * resting lane goes back to the pool as soon as anything else asks the pool for a connection, when
 * a checkout is waiting as it drains, on its connection's error, and after `REST_MS` unused.
 */
import type pg from 'pg';
import { isAnswerTimeout } from './postgres-timeouts.js';
import type { ConnectionGenerations } from './pg-generations.js';

/**
 * Whether a statement's failure leaves its connection unusable, so that it must be discarded rather
 * than carry another statement or go back to the pool:
 *
 * - the server's FATAL (or PANIC) error: the server ends the session right after sending it. A
 *   server stop sends `57P01` (admin shutdown) to every backend; the statement in flight receives it
 *   as its answer, and `pg` marks the client unqueryable only once the socket's close is read, an
 *   event-loop turn or more later. Until then the client looks healthy: given back to the pool, it
 *   was handed to the next checkout, whose statement then failed on the dead socket (`EPIPE`, or
 *   `57P01` again). This was the cause of `test/faults/degradation.test.ts`'s stop-and-restart
 *   failures with lanes (docs/decisions.md "Lanes revived", 1).
 *   `pg-pool`'s own `pool.query` discards a client on any error, which is why it never showed there.
 * - `pg`'s client-side `query_timeout`: the statement may still be on the wire; in pipeline mode
 *   `pg` destroys the socket, failing every statement in flight on it.
 * - any failure that is not the server's answer (no severity): a socket error, or a value `pg`
 *   could not bind (it then sends Close for a statement it goes on to record as parsed).
 * - a client that is no longer queryable (its socket failed).
 */
export function leavesConnectionUnusable(error: unknown, client?: pg.PoolClient): boolean {
  if (isAnswerTimeout(error)) return true;
  const severity = (error as { severity?: unknown } | null)?.severity;
  // No severity: not the server's answer (a socket error, or a value `pg` could not bind, after which
  // `pg` believes a statement parsed that its own Close removed again): discard, to be sure.
  if (severity === undefined || severity === 'FATAL' || severity === 'PANIC') return true;
  return client !== undefined && (client as unknown as { _queryable?: boolean })._queryable === false;
}

/**
 * A named statement whose Parse this connection has sent but not yet seen complete is sent unnamed
 * (parsed again, on its own). `pg` skips the Parse of a name it has submitted, so in pipeline mode a
 * second statement of that name is written as Bind-only behind the first; if the first's Parse fails
 * (a `statement_timeout` while parse analysis waits for a table lock, as under `LOCK TABLE`), the
 * statement never exists and the second fails `26000 prepared statement "..." does not exist`
 * instead of its own outcome (test/faults/postgres-pool-exhaustion.test.ts showed it). Only a
 * connection's first moments pay for this: once the Parse completed, the name is reused.
 */
function unnameIfParseInFlight(client: pg.PoolClient, query: pg.Query): void {
  const q = query as pg.Query & { name?: string };
  if (!q.name) return;
  const connection = (client as unknown as { connection?: { parsedStatements?: Record<string, unknown>; submittedNamedStatements?: Record<string, unknown> } }).connection;
  if (connection?.parsedStatements?.[q.name] === undefined && connection?.submittedNamedStatements?.[q.name] !== undefined) q.name = undefined;
}

/** One pooled connection shared by the single statements of the moment. */
interface Lane {
  client: pg.PoolClient | undefined;
  /** The checkout; every statement that joined the lane before it connected waits on it. */
  readonly ready: Promise<pg.PoolClient>;
  /** Statements given to this lane whose answer has not been handed back yet. */
  inFlight: number;
  /** When the lane last answered a statement, or took its first one (`performance.now()`). */
  progressAt: number;
  /** The connection's own error (lost connection): the lane takes no more statements. */
  broken: Error | undefined;
  /** A cork is on the socket until the end of this tick. */
  corked: boolean;
  /** The answer watchdog while statements are in flight (see `watch`). */
  watchdog: NodeJS.Timeout | undefined;
  readonly onError: (error: Error) => void;
}

/** A lane that has answered nothing for this long while statements are in flight on it is stalled (see `pick`). */
export const STALLED_MS = 50;

/** A drained lane kept for the next statement goes back to the pool after this long unused (see `rest`). */
export const REST_MS = 1_000;

export class StatementLanes {
  private readonly lanes: Lane[] = [];
  /**
   * At most `max - 1` lanes for a pool of `max` (and one for a pool of one): a transaction always
   * finds a connection that no lane keeps busy, however many statements are in flight.
   */
  private readonly maxLanes: number;

  constructor(
    /** A checkout from the pool (with the adapter's retry of a connection refused for now). */
    private readonly connect: () => Promise<pg.PoolClient>,
    poolSize: number,
    /** Sends one query on a client and answers its result (postgres.ts's `send`). */
    private readonly send: (client: pg.PoolClient, query: pg.Query) => Promise<pg.QueryResult>,
    /** The pool's `query_timeout` (0: none): how long a lane may answer nothing (see `watch`). */
    private readonly answerMs = 0,
    /** Whether a checkout waits in the pool's queue: a lane that drains then goes back instead of resting. */
    private readonly poolWanted: () => boolean = () => false,
    /** The connections' generations (pg-generations.ts): a lane on a suspect connection takes no new statement. */
    private readonly generations?: ConnectionGenerations,
  ) {
    this.maxLanes = Math.max(1, poolSize - 1);
  }

  /** The generation whose suspect lanes `pick` has already retired. */
  private sweptGeneration = 0;

  async query(query: pg.Query, again = true): Promise<pg.QueryResult> {
    const lane = this.pick();
    if (lane.inFlight === 0) lane.progressAt = performance.now();
    lane.inFlight += 1;
    let unsent = false;
    try {
      const client = lane.client ?? (await lane.ready);
      if (lane.broken) {
        // Broken by another statement while this one waited for the checkout: this one was never
        // written, so it goes to another lane once rather than fail with that statement's error.
        unsent = again;
        throw lane.broken;
      }
      this.corkUntilNextTick(lane, client);
      unnameIfParseInFlight(client, query);
      // The lane's watchdog bounds the answer (see `watch`); the pool's clients carry no
      // `query_timeout` of their own (postgres.ts), so `pg` arms no timer per statement here.
      if (this.answerMs > 0) this.watch(lane, client);
      return await this.send(client, query);
    } catch (error) {
      // A connection that cannot carry another statement (see `leavesConnectionUnusable`) takes no
      // more statements and is discarded once the ones in flight on it have answered.
      if (leavesConnectionUnusable(error, lane.client)) {
        this.generations?.failed(lane.client, error);
        this.breakLane(lane, error as Error);
      }
      if (!unsent) throw error;
    } finally {
      lane.progressAt = performance.now();
      lane.inFlight -= 1;
      // A drained lane rests for the next statement, or goes back to the pool (see `rest`).
      if (lane.inFlight === 0) this.rest(lane);
    }
    return this.query(query, false);
  }

  /**
   * The least busy lane that is not stalled, or a new one while every lane is busy (or stalled) and
   * there is room for another; with no room, the least busy lane of all.
   *
   * Head-of-line blocking: a lane's statements execute one after another, so one that waits for a
   * row lock (another session's transaction, another process) holds up every statement behind it.
   * A lane that has answered nothing for `STALLED_MS` while statements are in flight on it is taken
   * to be waiting so, and gets no new statements while another lane can take them. The wait itself
   * is bounded by the server's `statement_timeout` (the head fails 57014 and the rest proceed). It
   * cannot become a deadlock: a statement queued on a lane has not started, so it holds no lock; a
   * transaction runs on a connection of its own (at most `max - 1` lanes leave one to transactions)
   * and never awaits a lane's statement while it holds locks; a cycle among executing statements is
   * the server's deadlock detector's (40P01), as without lanes. docs/decisions.md "Lanes revived".
   */
  private pick(): Lane {
    // A connection was found dead since the last look: the lanes on connections opened before it
    // take no new statement (their statements in flight still answer), see pg-generations.ts.
    if (this.generations && this.generations.generation !== this.sweptGeneration) this.sweepSuspect(this.generations);
    const now = performance.now();
    let best: Lane | undefined;
    let bestAny: Lane | undefined;
    for (const lane of this.lanes) {
      if (!bestAny || lane.inFlight < bestAny.inFlight) bestAny = lane;
      if (lane.inFlight > 0 && now - lane.progressAt > STALLED_MS) continue;
      if (!best || lane.inFlight < best.inFlight) best = lane;
    }
    if (best && (best.inFlight === 0 || this.lanes.length >= this.maxLanes)) return best;
    if (this.lanes.length < this.maxLanes || !bestAny) return this.open();
    return bestAny;
  }

  private sweepSuspect(generations: ConnectionGenerations): void {
    this.sweptGeneration = generations.generation;
    for (const lane of [...this.lanes]) {
      if (lane.client && generations.suspect(lane.client)) this.breakLane(lane, new Error('Connection opened before a connection of the pool was lost'));
    }
  }

  private open(): Lane {
    const lane: Lane = {
      client: undefined,
      inFlight: 0,
      progressAt: performance.now(),
      broken: undefined,
      corked: false,
      watchdog: undefined,
      // A lost connection makes the client emit `error`; unheard, that would crash the host. `pg`
      // fails every statement in flight on it; the lane takes no new ones and is discarded.
      onError: (error: Error) => {
        this.generations?.failed(lane.client, error);
        this.breakLane(lane, error);
      },
      ready: this.connect().then(
        (client) => {
          lane.client = client;
          client.on('error', lane.onError);
          return client;
        },
        (error: unknown) => {
          this.drop(lane);
          throw error;
        },
      ),
    };
    // The checkout's failure reaches every statement waiting on it; this only keeps it from being
    // reported as unhandled when none is.
    lane.ready.catch(() => undefined);
    this.lanes.push(lane);
    return lane;
  }

  /**
   * Every statement `pg` writes on this lane until the end of the tick goes out in one write: the
   * socket is corked now and uncorked once the current tick's callbacks and promise reactions have
   * run (a `process.nextTick` queued now runs after them). `pg` corks around each statement's five
   * messages itself; this extends that to the statements submitted together.
   */
  private corkUntilNextTick(lane: Lane, client: pg.PoolClient): void {
    if (lane.corked) return;
    const stream = (client as unknown as { connection?: { stream?: { cork?: () => void; uncork?: () => void } } }).connection?.stream;
    if (!stream?.cork || !stream.uncork) return;
    stream.cork();
    lane.corked = true;
    process.nextTick(() => {
      lane.corked = false;
      stream.uncork!();
    });
  }

  private breakLane(lane: Lane, error: Error): void {
    lane.broken ??= error;
    this.drop(lane);
    // A resting lane has no statement whose end would give its connection back: it goes now.
    if (lane.inFlight === 0) this.retire(lane);
  }

  /** The drained lane kept for the next statement (see `rest`). */
  private resting: Lane | undefined;
  /** The timer that gives an unused resting lane back to the pool; at most one, re-armed lazily. */
  private restTimer: NodeJS.Timeout | undefined;

  /**
   * A drained lane keeps its connection for the next statement when it is the only one doing so, is
   * whole, and no checkout waits in the pool's queue; otherwise it goes back to the pool at once.
   * Serial steps then cost no checkout and release per statement. The connection is given back as
   * soon as the pool is asked for one (`yieldRest`, and the waiting checkout here), or after
   * `REST_MS` unused, so the pool's own idle policy applies to it from then on.
   */
  private rest(lane: Lane): void {
    if (lane.broken || !lane.client || (this.resting && this.resting !== lane) || this.poolWanted()) {
      this.retire(lane);
      return;
    }
    this.resting = lane;
    if (!this.restTimer) this.armRestTimer(REST_MS);
  }

  private armRestTimer(ms: number): void {
    this.restTimer = setTimeout(() => {
      this.restTimer = undefined;
      const lane = this.resting;
      if (!lane) return;
      if (lane.inFlight > 0) {
        // In use again: it rests again once drained, and the timer counts from then.
        this.armRestTimer(REST_MS);
        return;
      }
      const unused = performance.now() - lane.progressAt;
      if (unused >= REST_MS) this.retire(lane);
      else this.armRestTimer(REST_MS - unused + 1);
    }, ms);
    this.restTimer.unref?.();
  }

  /**
   * Gives the resting lane's connection back to the pool: called before anything else checks a
   * connection out (a transaction, `withConnection`), so that a lane never keeps one from it.
   */
  yieldRest(): void {
    const lane = this.resting;
    if (lane && lane.inFlight === 0) this.retire(lane);
  }

  /** Every resting connection back to the pool (before the pool ends). */
  close(): void {
    this.yieldRest();
    if (this.restTimer) clearTimeout(this.restTimer);
    this.restTimer = undefined;
  }

  private drop(lane: Lane): void {
    const at = this.lanes.indexOf(lane);
    if (at >= 0) this.lanes.splice(at, 1);
  }

  /**
   * The answer bound of a lane. `pg`'s `query_timeout` counts from when a statement was submitted, so
   * on a lane it also counted the wait behind the statements ahead of it: behind a head waiting for a
   * lock (cancelled by the server's `statement_timeout`, a known outcome), the statements queued
   * after it reached their client-side timeout, `pg` destroyed the socket and failed them all, while
   * the server went on to run and commit the ones already written (a begin turn reported failed but
   * stored: the next turn's begin hit `uq_turns_one_running_per_session`, postgres-pool-exhaustion).
   * Instead the lane is bounded as a whole: only a lane that answers NOTHING for `answerMs` (a silent
   * network; a slow server answers with its own cancel first) has its socket destroyed, which fails
   * its statements with `Query read timeout`: outcome unknown, as for pg's own timeout.
   */
  private watch(lane: Lane, client: pg.PoolClient): void {
    if (lane.watchdog) return;
    const check = () => {
      lane.watchdog = undefined;
      if (lane.inFlight === 0 || lane.client !== client) return;
      const silent = performance.now() - lane.progressAt;
      if (silent < this.answerMs) {
        lane.watchdog = setTimeout(check, this.answerMs - silent + 1);
        lane.watchdog.unref?.();
        return;
      }
      const stream = (client as unknown as { connection?: { stream?: { destroy: (error?: Error) => void } } }).connection?.stream;
      this.breakLane(lane, new Error('Query read timeout'));
      stream?.destroy(new Error('Query read timeout'));
    };
    lane.watchdog = setTimeout(check, this.answerMs);
    lane.watchdog.unref?.();
  }

  private retire(lane: Lane): void {
    if (this.resting === lane) this.resting = undefined;
    if (lane.watchdog) clearTimeout(lane.watchdog);
    lane.watchdog = undefined;
    this.drop(lane);
    const client = lane.client;
    if (!client) return;
    lane.client = undefined;
    client.off('error', lane.onError);
    // A broken connection is destroyed rather than pooled, so that the pool opens a fresh one.
    client.release(lane.broken);
  }
}
