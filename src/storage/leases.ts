/**
 * @module storage/leases
 * Session leases in the database (issue 15): which core owns a session, until when, under which
 * fencing token. Every operation is one conditional statement (or one transaction), so that two
 * processes racing for a session can never both win: Postgres serialises the updates of the lease
 * row, and the loser re-evaluates the condition against the winner's row.
 *
 * Times are the database's (`now()`), never a process's clock: processes on different machines
 * agree on expiry as long as they share the database.
 */
import { StorageError, errorMessage } from '../errors.js';
import { iso, num, statement, type SqlDatabase, type SqlExecutor } from './sql.js';
import type { CorrectionReport } from './correction-report.js';
import { settleUnknownOutcome } from './sql/outcome-unknown.js';

/** The answer of an acquisition. */
export type LeaseAcquisition =
  | { type: 'acquired'; token: number; expiresAt: string; corrected: CorrectionReport }
  | { type: 'owned_elsewhere'; ownerId: string; expiresAt: string }
  | { type: 'not_found' };

/** The lease side of a storage (the `leases` member of `SessionStorage`). */
export interface SessionLeaseStore {
  /**
   * Takes the session's lease for `ownerId` when it is free, expired, or already this owner's, with
   * a token one higher than the last one given out; in the same transaction, any turn of the
   * session still `running` (a previous owner's) is closed as the startup correction closes it.
   */
  acquire(sessionId: string, ownerId: string, leaseMs: number): Promise<LeaseAcquisition>;
  /** One statement for all: pushes out the expiry of the listed leases still held by `ownerId`. */
  renew(ownerId: string, sessionIds: readonly string[], leaseMs: number): Promise<Array<{ sessionId: string; token: number }>>;
  /** Frees one lease if it is still `ownerId`'s under `token`. */
  release(sessionId: string, ownerId: string, token: number): Promise<void>;
  /** Frees every lease of `ownerId` (shutdown, or a restart under the same owner id). */
  releaseAll(ownerId: string): Promise<number>;
  /**
   * The takeover scan: every session with a `running` turn whose lease is expired, free or missing
   * gets a new token (fencing its dead owner) and is left free; its running turns become
   * `interrupted` with `process_restart` and their running spans `outcome_unknown`, in one transaction.
   * With `freeingOwnerId` (a restart under a stable owner id), every lease of that id's previous
   * incarnation is freed first in the same transaction, so no other core's scan can take and
   * correct its sessions between the freeing and this scan (trust-lease: the restart's report then
   * read 0 corrected turns while turns had been corrected).
   */
  takeOverExpired(exceptOwnerId?: string, freeingOwnerId?: string): Promise<CorrectionReport & { sessions: string[] }>;
  /** One round trip to the database, to learn that it answers again after an outage. */
  ping(): Promise<void>;
}

const LEASE_TTL = `now() + $3::double precision * interval '1 millisecond'`;

/** The `process_restart` close of a running turn, shared by both acquisition paths and the takeover. */
const CLOSE_TURN = `status = 'interrupted', ended_at = GREATEST(now(), started_at),
       error_code = COALESCE(error_code, 'process_restart'),
       error_message = COALESCE(error_message, 'the process ended while the turn was running'),
       updated_at = now()`;
/** The `process_restart` close of a running span. */
const CLOSE_SPAN = `status = 'outcome_unknown', ended_at = GREATEST(now(), started_at),
       error_code = COALESCE(error_code, 'process_restart')`;

/**
 * The lease of a session that has no lease row yet (never leased: above all a session just created,
 * which every session is once), taken in ONE statement with the startup correction of its running
 * turns and spans: one round trip and one implicit transaction instead of BEGIN, the upsert, two
 * correcting UPDATEs and COMMIT (five round trips, issue 14 point 2, "the wait").
 *
 * One statement reads one snapshot, taken before the insert; the transaction path reads a fresh one
 * for each correction, after the upsert. That difference matters only when a writer can commit a
 * running turn of the session between the two, and with no lease row none can that this lease
 * fences: a fenced turn is begun under a token of this row, and a fenced fact needs it. (An unfenced
 * writer could, on either path.) A row that exists, or appears under a racing core's insert, makes
 * `ON CONFLICT DO NOTHING` return no row, and the transaction path decides: re-acquisition, takeover
 * of an expired lease, `owned_elsewhere`, or `not_found`. (docs/decisions.md, "One statement for the
 * first lease of a session".)
 */
const ACQUIRE_UNLEASED = statement(
  'lease_acquire_unleased',
  `WITH taken AS (
     INSERT INTO session_leases (session_id, owner_id, token, expires_at)
     SELECT id, $2, 1, ${LEASE_TTL} FROM sessions WHERE id = $1
     ON CONFLICT (session_id) DO NOTHING
     RETURNING token, expires_at
   ), turns_closed AS (
     UPDATE turns SET ${CLOSE_TURN}
     WHERE session_id = $1 AND status = 'running' AND EXISTS (SELECT 1 FROM taken) RETURNING 1
   ), spans_closed AS (
     UPDATE trace_spans SET ${CLOSE_SPAN}
     WHERE session_id = $1 AND status = 'running' AND EXISTS (SELECT 1 FROM taken) RETURNING 1
   )
   SELECT taken.token, taken.expires_at, (SELECT count(*) FROM turns_closed)::int AS turns,
     (SELECT count(*) FROM spans_closed)::int AS spans
   FROM taken`,
);

export class SqlSessionLeases implements SessionLeaseStore {
  constructor(private readonly db: () => SqlDatabase) {}

  private async run<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (error) {
      if (error instanceof StorageError) throw error;
      throw new StorageError(`${what} failed: ${errorMessage(error)}`, { cause: error });
    }
  }

  acquire(sessionId: string, ownerId: string, leaseMs: number): Promise<LeaseAcquisition> {
    return this.run('acquire session lease', async () => {
      const first = await this.db().query<{ token: unknown; expires_at: unknown; turns: unknown; spans: unknown }>(ACQUIRE_UNLEASED, [
        sessionId,
        ownerId,
        leaseMs,
      ]);
      const taken = first.rows[0];
      if (taken) {
        return {
          type: 'acquired' as const,
          token: num(taken.token),
          expiresAt: iso(taken.expires_at),
          corrected: { turns: num(taken.turns), spans: num(taken.spans) },
        };
      }
      return this.db().transaction(async (tx) => {
        const { rows } = await tx.query<{ token: unknown; expires_at: unknown }>(
          `INSERT INTO session_leases AS l (session_id, owner_id, token, expires_at)
           SELECT id, $2, 1, ${LEASE_TTL} FROM sessions WHERE id = $1
           ON CONFLICT (session_id) DO UPDATE SET owner_id = EXCLUDED.owner_id, token = l.token + 1, expires_at = EXCLUDED.expires_at
           WHERE l.owner_id IS NULL OR l.owner_id = EXCLUDED.owner_id OR l.expires_at < now()
           RETURNING l.token, l.expires_at`,
          [sessionId, ownerId, leaseMs],
        );
        if (rows[0]) {
          const corrected = await correctRunning(tx, [sessionId]);
          return { type: 'acquired' as const, token: num(rows[0].token), expiresAt: iso(rows[0].expires_at), corrected };
        }
        const holder = await tx.query<{ owner_id: string | null; expires_at: unknown }>(
          'SELECT owner_id, expires_at FROM session_leases WHERE session_id = $1',
          [sessionId],
        );
        const h = holder.rows[0];
        if (!h) return { type: 'not_found' as const };
        return { type: 'owned_elsewhere' as const, ownerId: String(h.owner_id), expiresAt: iso(h.expires_at) };
      });
    });
  }

  renew(ownerId: string, sessionIds: readonly string[], leaseMs: number): Promise<Array<{ sessionId: string; token: number }>> {
    if (sessionIds.length === 0) return Promise.resolve([]);
    // Idempotent (the expiry is set, not moved by an amount): a renewal whose outcome is unknown (its
    // connection died unnoticed, or its answer never came) simply runs again at once on a fresh
    // connection instead of waiting for the next interval, which may come after the expiry.
    const renewal = async () => {
      const { rows } = await this.db().query<{ session_id: string; token: unknown }>(
        `UPDATE session_leases SET expires_at = ${LEASE_TTL}
         WHERE owner_id = $1 AND session_id = ANY($2::text[]) RETURNING session_id, token`,
        [ownerId, [...sessionIds], leaseMs],
      );
      return rows.map((r) => ({ sessionId: r.session_id, token: num(r.token) }));
    };
    return this.run('renew session leases', () => settleUnknownOutcome(renewal));
  }

  release(sessionId: string, ownerId: string, token: number): Promise<void> {
    return this.run('release session lease', async () => {
      await this.db().query(
        `UPDATE session_leases SET owner_id = NULL, expires_at = now() WHERE session_id = $1 AND owner_id = $2 AND token = $3`,
        [sessionId, ownerId, token],
      );
    });
  }

  releaseAll(ownerId: string): Promise<number> {
    return this.run('release session leases', async () => {
      const result = await this.db().query(`UPDATE session_leases SET owner_id = NULL, expires_at = now() WHERE owner_id = $1`, [ownerId]);
      return result.rowCount;
    });
  }

  ping(): Promise<void> {
    return this.run('reach the database', async () => {
      await this.db().query('SELECT 1');
    });
  }

  takeOverExpired(exceptOwnerId?: string, freeingOwnerId?: string): Promise<CorrectionReport & { sessions: string[] }> {
    return this.run('take over expired sessions', () =>
      this.db().transaction(async (tx) => {
        // The freed rows stay locked until this transaction ends: a racing core's takeover or
        // acquisition waits, then finds them taken (a newer token, their turns closed by this one).
        if (freeingOwnerId !== undefined) {
          await tx.query(`UPDATE session_leases SET owner_id = NULL, expires_at = now() WHERE owner_id = $1`, [freeingOwnerId]);
        }
        // The candidates come from the one-running-turn index; usually there are none.
        const { rows } = await tx.query<{ session_id: string }>(
          `WITH running AS (
             SELECT session_id FROM turns WHERE status = 'running'
             -- A compaction outside a turn leaves only spans behind (idx_trace_spans_running).
             UNION SELECT session_id FROM trace_spans WHERE status = 'running'
           ), candidates AS (
             SELECT r.session_id FROM running r LEFT JOIN session_leases l ON l.session_id = r.session_id
             WHERE (l.session_id IS NULL OR l.owner_id IS NULL OR l.expires_at < now())
               AND (l.owner_id IS NULL OR $1::text IS NULL OR l.owner_id <> $1::text)
           )
           INSERT INTO session_leases AS l (session_id, owner_id, token, expires_at)
           SELECT session_id, NULL, 1, now() FROM candidates
           ON CONFLICT (session_id) DO UPDATE SET owner_id = NULL, token = l.token + 1, expires_at = now()
           WHERE l.owner_id IS NULL OR (l.expires_at < now() AND ($1::text IS NULL OR l.owner_id <> $1::text))
           RETURNING l.session_id`,
          [exceptOwnerId ?? null],
        );
        const sessions = rows.map((r) => r.session_id);
        if (sessions.length === 0) return { turns: 0, spans: 0, sessions };
        return { ...(await correctRunning(tx, sessions)), sessions };
      }),
    );
  }
}

/**
 * The startup correction scoped to sessions whose lease this transaction just took: the same
 * `process_restart` rows as `markRunningInterrupted`, for these sessions only.
 */
async function correctRunning(tx: SqlExecutor, sessionIds: string[]): Promise<CorrectionReport> {
  const turns = await tx.query<{ id: string }>(
    `UPDATE turns SET ${CLOSE_TURN}
     WHERE session_id = ANY($1::text[]) AND status = 'running' RETURNING id`,
    [sessionIds],
  );
  // Every running span of these sessions, not only their turns': a compaction outside a turn has
  // spans of its own, and nothing of a session whose lease this transaction holds is running anywhere.
  const spans = await tx.query(
    `UPDATE trace_spans SET ${CLOSE_SPAN}
     WHERE session_id = ANY($1::text[]) AND status = 'running'`,
    [sessionIds],
  );
  return { turns: turns.rowCount, spans: spans.rowCount };
}
