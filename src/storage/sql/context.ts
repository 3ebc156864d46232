/**
 * @module storage/sql/context
 * What every per-concept SQL module of `SqlSessionStorage` shares: the database handle, the write
 * fences of the cores writing through it (issue 15), error wrapping into `StorageError`, and the
 * fenced, race-retrying way a fact statement runs.
 */
import { CommandError, OpenworkError, StorageError, errorMessage } from '../../errors.js';
import { fenceSql, ownershipLost, type WriteFence } from '../fence.js';
import { numOrNull, type NamedStatement, type Row, type SqlDatabase, type SqlExecutor } from '../sql.js';
import { TURN_OWNERSHIP, TURN_STATUS, type FactStatement } from '../step-sql.js';
import { lostSequenceRace } from './rows.js';
import { sqlStateOf } from './sql-state.js';
import { rolledBackWhole } from './rolled-back.js';

/** How often a fact statement runs again after losing a sequence race (see `step-sql.ts`). */
const SEQUENCE_RACE_ATTEMPTS = 8;

/** How many running turns' submission counts one storage object keeps (see `SqlContext.submissions`). */
const TRACKED_TURNS = 10_000;

/**
 * The shared state of one `SqlSessionStorage`, handed to each per-concept module. The database is
 * read through `openDb` on every use, so it is opened lazily and reopened after `close`.
 */
export class SqlContext {
  constructor(
    private readonly openDb: () => SqlDatabase,
    /** The fences of the cores writing through this storage object (usually one; none without ownership). */
    readonly fences: ReadonlySet<WriteFence>,
  ) {}

  /** The database handle, opened on first use. */
  get db(): SqlDatabase {
    return this.openDb();
  }

  /**
   * The fence parameters of a session-keyed write: [owners, token] of the fence with the newest token
   * for the session; both null when no fence ever leased it (a core without ownership writes it).
   */
  fenceOf(sessionId: string): [string[] | null, number | null] {
    let best: [string[], number] | null = null;
    for (const fence of this.fences) {
      const token = fence.tokenOf(sessionId);
      if (token !== undefined && (!best || token > best[1])) best = [[fence.ownerId], token];
    }
    return best ?? [null, null];
  }

  /** `fenceOwners` as last computed; undefined until the first write and after the fences change. */
  private owners: readonly string[] | null | undefined;

  /**
   * The owners parameter of a turn-keyed write (the token is the turn's own `lease_token`): one
   * frozen array until `fencesChanged`, not two new arrays for every fact (issue 14, perf-alloc).
   */
  get fenceOwners(): readonly string[] | null {
    if (this.owners === undefined) this.owners = this.fences.size === 0 ? null : Object.freeze([...this.fences].map((f) => f.ownerId));
    return this.owners;
  }

  /** Called by the storage object when a fence is attached or detached. */
  fencesChanged(): void {
    this.owners = undefined;
  }

  /**
   * The `model_submission_count` of each turn begun through this storage object and still running,
   * as its own committed facts left it (begin, a tool result's reserved call, a model-call start): the
   * key that lets the repeat of a model-call start whose outcome is unknown recognise a committed first
   * attempt (`turns.ts` `recordModelCallStart`). A turn runs in one process, and its facts are the
   * only writes of the counter while it runs. At most `TRACKED_TURNS` entries: an entry a turn that
   * ended without its end recorded (an outage) left behind is dropped oldest first.
   */
  private readonly submissions = new Map<string, number>();

  /** The turn's submission count as this storage object knows it, or undefined. */
  submissionsOf(turnId: string): number | undefined {
    return this.submissions.get(turnId);
  }

  /** Records the turn's submission count after a committed fact (undefined: `by` on the known count). */
  submitted(turnId: string, count: number | undefined, by = 1): void {
    const next = count ?? this.submissions.get(turnId);
    if (next === undefined) return;
    this.submissions.delete(turnId);
    if (this.submissions.size >= TRACKED_TURNS) this.submissions.delete(this.submissions.keys().next().value!);
    this.submissions.set(turnId, count === undefined ? next + by : next);
  }

  /** The turn ended: its count is not needed any more. */
  ended(turnId: string): void {
    this.submissions.delete(turnId);
  }

  /** Tells every fence that `sessionId`'s write was refused, and returns the `ownership_lost` error to throw. */
  refuse(sessionId: string, token: number | null): CommandError {
    for (const fence of this.fences) fence.refused(sessionId, token);
    return ownershipLost(sessionId);
  }

  /**
   * After a fenced single-statement write changed no row: whether the fence refused it (then
   * `ownership_lost` is thrown) or the row simply was not in the state the write expects. Inside a
   * transaction, pass its executor: a transaction that awaited a statement of the pool while holding
   * its connection waited on a second connection (on `pg`, a lane's checkout), and transactions doing
   * so together exhausted the pool (postgres-pool-exhaustion.test.ts, with lanes: `timeout exceeded
   * when trying to connect`).
   */
  async explainTurnMiss(turnId: string, exec: SqlExecutor = this.db): Promise<void> {
    if (this.fences.size === 0) return;
    const { rows } = await exec.query<{ session_id: string; lease_token: unknown; owned: boolean }>(
      `SELECT t.session_id, t.lease_token, ${fenceSql({ session: 't.session_id', token: 't.lease_token', owners: '$2' })} AS owned FROM turns t WHERE t.id = $1`,
      [turnId, this.fenceOwners],
    );
    if (rows[0] && !rows[0].owned) throw this.refuse(rows[0].session_id, numOrNull(rows[0].lease_token));
  }

  /** Runs `fn`, wrapping any failure that is not already typed into a `StorageError` (with its SQLSTATE). */
  async run<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (error) {
      if (error instanceof OpenworkError) throw error;
      const sqlState = sqlStateOf(error);
      throw new StorageError(`${what} failed: ${errorMessage(error)}`, { cause: error, ...(sqlState ? { sqlState } : {}) });
    }
  }

  /**
   * Locks the session row: message sequences of a session are allocated only under this lock. The
   * next free sequence is read by the INSERT itself, a later statement with a fresh snapshot, so a
   * writer that waited for the lock sees the rows its predecessor committed.
   */
  async lockSession(tx: SqlExecutor, sessionId: string): Promise<number | null> {
    const [owner, token] = this.fenceOf(sessionId);
    const { rows } = await tx.query<{ id: string; owned: boolean }>(
      `SELECT id, ${fenceSql({ session: 'id', token: '$3::bigint', owners: '$2' })} AS owned FROM sessions WHERE id = $1 FOR NO KEY UPDATE`,
      [sessionId, owner, token],
    );
    if (!rows[0]) throw new StorageError(`session ${sessionId} does not exist`);
    if (!rows[0].owned) throw this.refuse(sessionId, token);
    return token;
  }

  /**
   * Runs one fact statement (see `step-sql.ts`), again with a fresh snapshot when it lost a
   * sequence race to a writer it waited for; the statement is atomic, so a failed run wrote nothing.
   */
  async retrying(stmt: NamedStatement, params: readonly unknown[]): Promise<Row[]> {
    for (let attempt = 1; ; attempt += 1) {
      try {
        return (await this.db.query(stmt, params)).rows;
      } catch (error) {
        // Also again after a deadlock or serialization failure: the server rolled it back whole (faults-review).
        if (attempt >= SEQUENCE_RACE_ATTEMPTS || !(lostSequenceRace(error) || rolledBackWhole(error))) throw error;
      }
    }
  }

  /**
   * A turn-keyed fact statement: its fenced text, with the owner ids as the last parameter, when a
   * fence is attached (issue 15), so the lease check rides in the statement's `locked` CTE.
   * `params` must be a new array made for this call: the owner ids are pushed onto it.
   */
  fact(stmt: FactStatement, params: unknown[]): Promise<Row[]> {
    const owners = this.fenceOwners;
    if (owners === null) return this.retrying(stmt.plain, params);
    // The caller's array is its own, built for this one statement: the owners go on its end.
    params.push(owners);
    return this.retrying(stmt.fenced, params);
  }

  /**
   * Why a turn-keyed fact statement wrote nothing, on this failure path only (one more round trip):
   * the fence refused it (`ownership_lost`, checked first: a turn a takeover corrected is
   * `interrupted`, but what its stale owner hears is why), the turn does not exist, or its status.
   */
  async turnStatus(turnId: string): Promise<string> {
    const owners = this.fenceOwners;
    if (owners === null) {
      const { rows } = await this.db.query<{ status: string }>(TURN_STATUS, [turnId]);
      if (!rows[0]) throw new StorageError(`turn ${turnId} does not exist`);
      return rows[0].status;
    }
    const { rows } = await this.db.query<{ session_id: string; status: string; lease_token: unknown; owned: boolean }>(TURN_OWNERSHIP, [turnId, owners]);
    const row = rows[0];
    if (!row) throw new StorageError(`turn ${turnId} does not exist`);
    if (!row.owned) throw this.refuse(row.session_id, numOrNull(row.lease_token));
    return row.status;
  }

  /**
   * A fact statement wrote nothing because its turn was not running: says why, as the old
   * `lockTurn` did (one more round trip, on this failure path only).
   */
  async notRunning(turnId: string): Promise<never> {
    throw new StorageError(`turn ${turnId} is ${await this.turnStatus(turnId)}, not running`);
  }
}
