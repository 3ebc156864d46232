/**
 * @module storage/fence
 * The write fence of session ownership (issue 15): the one clause every write of a session's facts
 * carries, so that a core whose lease was taken over can never commit again.
 *
 * The clause checks, inside the writing statement itself, that the session's lease row still names
 * this core with the expected fencing token, and takes `FOR SHARE` on that row. The share lock lasts
 * until the writing transaction ends, and a takeover must UPDATE the row (a conflicting lock), so the
 * token cannot change between the check and the commit: either the write commits before the
 * takeover, or the takeover commits first and the write finds a token that is no longer its own.
 * No extra round trip: the check rides in a statement the write runs anyway.
 */
import { CommandError } from '../errors.js';

/** What a core tells its storage so that every write can be fenced. */
export interface WriteFence {
  /** This core's owner id (unique among the live processes on the database). */
  readonly ownerId: string;
  /**
   * The last fencing token this core was given for the session (still held, or since lost or
   * released: a write under it is then refused by the database), or undefined for a session this
   * core never leased.
   */
  tokenOf(sessionId: string): number | undefined;
  /** Told when the database refused a write made under `token` because the lease is not that any more. */
  refused(sessionId: string, token: number | null): void;
}

/**
 * The fence as a boolean SQL expression. `session` and `token` are SQL expressions (a parameter, or a
 * column such as `t.lease_token`), `owners` the parameter holding the writing cores' owner ids (a
 * text array); NULL owners (no fence: one process by construction) make the clause true without
 * touching a lease row, and so does a NULL token (a session or turn no fence leased: written by a
 * core without ownership).
 *
 * @example
 * `UPDATE turns t SET ... WHERE t.id = $1 AND ${fenceSql({ session: 't.session_id', token: 't.lease_token', owners: '$3' })}`
 */
export function fenceSql(at: { session: string; token: string; owners: string }): string {
  return `(${at.owners}::text[] IS NULL OR ${at.token} IS NULL OR EXISTS (SELECT 1 FROM session_leases fence_l
    WHERE fence_l.session_id = ${at.session} AND fence_l.owner_id = ANY(${at.owners}::text[]) AND fence_l.token = ${at.token} FOR SHARE))`;
}

/** `ownership_lost`: the session's lease is not this core's any more; nothing of the write landed. */
export function ownershipLost(sessionId: string): CommandError {
  return new CommandError('ownership_lost', `session ${sessionId} is owned by another runtime now; this write was refused and nothing of it was stored`, {
    details: { sessionId },
  });
}
