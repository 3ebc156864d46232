/**
 * @module storage/sql/sessions
 * The `sessions` rows: create, read, list, delete (with the ownership check on the tree it
 * cascades to), the per-session settings, and the one-query load of everything a session resumes from.
 *
 * Each exported function is the `SessionStorage` method of the same name (its contract is in
 * `storage.ts`), taking the storage object's `SqlContext` first.
 */
import { CommandError } from '../../errors.js';
import type { PermissionMode } from '../../protocol/input.js';
import { fenceSql } from '../fence.js';
import { iso, num, statement, type Row, type SqlExecutor } from '../sql.js';
import { MESSAGE_COLUMNS } from '../step-sql.js';
import type { LoadedSession, NewSession, NewSessionLease, SessionRecord } from '../storage.js';
import type { SqlContext } from './context.js';
import { loadSessionTurnPlans } from './plans.js';
import { CHECKPOINT_COLUMNS, SESSION_COLUMNS, TURN_COLUMNS, checkpointFromRow, messageFromRow, sessionFromRow, turnFromRow } from './rows.js';

/** The INSERT of a new session and its parameters $1..$11, shared by `createSession` and `createLeasedSession`. */
const INSERT_SESSION = `INSERT INTO sessions (id, title, working_directory, default_model_id, sandbox_mode, reasoning_effort,
           parent_session_id, task_name, agent_role, spawn_span_id, sandbox_mode_origin)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         RETURNING ${SESSION_COLUMNS}`;

/**
 * Both session INSERTs are named (prepared once per connection on `pg`, and by PGlite's prepared path):
 * a fresh session per turn made them the one text a step still parsed and planned on every call
 * (docs/benchmarks.md, "Perf-pg").
 */
const CREATE_SESSION = statement('create_session', INSERT_SESSION);

/** `createLeasedSession`'s statement: the session and its lease ($12 owner, $13 lease ms). */
const CREATE_LEASED_SESSION = statement(
  'create_leased_session',
  `WITH created AS (${INSERT_SESSION}),
  leased AS (
    INSERT INTO session_leases (session_id, owner_id, token, expires_at)
    SELECT id, $12, 1, now() + $13::double precision * interval '1 millisecond' FROM created
    RETURNING token, expires_at
  )
  SELECT created.*, leased.token AS lease_token, leased.expires_at AS lease_expires_at FROM created, leased`,
);

function sessionParams(input: NewSession): unknown[] {
  return [
    input.id,
    input.title ?? null,
    input.workingDirectory,
    input.defaultModelId ?? null,
    input.permissionMode ?? 'auto',
    input.reasoningEffort ?? null,
    input.parentSessionId ?? null,
    input.taskName ?? null,
    input.agentRole ?? null,
    input.spawnSpanId ?? null,
    // A sub-agent's mode is a snapshot of its parent's (reference §4.14).
    input.parentSessionId ? 'inherited' : 'session_default',
  ];
}

export function createSession(ctx: SqlContext, input: NewSession): Promise<SessionRecord> {
  return ctx.run('create session', async () => {
    const { rows } = await ctx.db.query(CREATE_SESSION, sessionParams(input));
    return sessionFromRow(rows[0]!);
  });
}

/**
 * The session row and its lease row (token 1, expiring `leaseMs` after the database's now) in one
 * statement, so one implicit transaction: both are stored or neither. The lease's foreign key is
 * checked at the end of the statement, when the session row is there.
 */
export function createLeasedSession(
  ctx: SqlContext,
  input: NewSession,
  lease: NewSessionLease,
): Promise<{ session: SessionRecord; lease: { token: number; expiresAt: string } }> {
  return ctx.run('create session', async () => {
    const { rows } = await ctx.db.query(CREATE_LEASED_SESSION, [...sessionParams(input), lease.ownerId, lease.leaseMs]);
    const row = rows[0]!;
    return { session: sessionFromRow(row), lease: { token: num(row.lease_token), expiresAt: iso(row.lease_expires_at) } };
  });
}

export function getSession(ctx: SqlContext, sessionId: string): Promise<SessionRecord | null> {
  return ctx.run('get session', async () => {
    const { rows } = await ctx.db.query(`SELECT ${SESSION_COLUMNS} FROM sessions WHERE id = $1`, [sessionId]);
    return rows[0] ? sessionFromRow(rows[0]) : null;
  });
}

export function listSessions(ctx: SqlContext, options: { limit?: number; includeChildren?: boolean; withTurns?: boolean } = {}): Promise<SessionRecord[]> {
  return ctx.run('list sessions', async () => {
    const { rows } = await ctx.db.query(
      `SELECT ${SESSION_COLUMNS} FROM sessions
         WHERE ($1::boolean OR parent_session_id IS NULL) AND (NOT $3::boolean OR last_turn_at IS NOT NULL)
         ORDER BY updated_at DESC, id LIMIT $2`,
      [options.includeChildren ?? false, options.limit ?? 100, options.withTurns ?? false],
    );
    return rows.map(sessionFromRow);
  });
}

export function deleteSession(ctx: SqlContext, sessionId: string): Promise<boolean> {
  return ctx.run('delete session', () =>
    ctx.db.transaction(async (tx) => {
      const owners = ctx.fenceOwners;
      if (owners) await refuseDeleteOwnedElsewhere(tx, sessionId, owners);
      // Payload bodies have no session_id; collect the candidates before the cascade removes the mappings.
      const { rows } = await tx.query<{ payload_hash: string }>(
        `SELECT DISTINCT m.payload_hash FROM trace_span_payloads m JOIN trace_spans s ON s.id = m.span_id
           WHERE s.session_id = $1 OR s.session_id IN (SELECT id FROM sessions WHERE parent_session_id = $1)`,
        [sessionId],
      );
      const deleted = await tx.query('DELETE FROM sessions WHERE id = $1', [sessionId]);
      if (rows.length > 0) {
        await tx.query(
          `DELETE FROM trace_payloads p WHERE p.hash = ANY($1::text[])
             AND NOT EXISTS (SELECT 1 FROM trace_span_payloads m WHERE m.payload_hash = p.hash)`,
          [rows.map((r) => r.payload_hash)],
        );
      }
      return deleted.rowCount > 0;
    }),
  );
}

export function setPermissionMode(ctx: SqlContext, sessionId: string, mode: PermissionMode): Promise<void> {
  return ctx.run('set sandbox mode', async () => {
    const [owner, token] = ctx.fenceOf(sessionId);
    const result = await ctx.db.query(
      `UPDATE sessions SET sandbox_mode = $2, sandbox_mode_origin = 'user_toggle', updated_at = now()
         WHERE id = $1 AND ${fenceSql({ session: 'id', token: '$4::bigint', owners: '$3' })}`,
      [sessionId, mode, owner, token],
    );
    if (result.rowCount === 0 && owner !== null && (await getSession(ctx, sessionId))) throw ctx.refuse(sessionId, token);
  });
}

export function getClientSettings(ctx: SqlContext, sessionId: string): Promise<Record<string, unknown> | null> {
  return ctx.run('get client settings', async () => {
    const { rows } = await ctx.db.query(`SELECT client_settings FROM sessions WHERE id = $1`, [sessionId]);
    const value = rows[0]?.client_settings;
    return value && typeof value === 'object' ? (value as Record<string, unknown>) : null;
  });
}

export function setClientSettings(ctx: SqlContext, sessionId: string, settings: Record<string, unknown>): Promise<boolean> {
  return ctx.run('set client settings', async () => {
    const [owner, token] = ctx.fenceOf(sessionId);
    const result = await ctx.db.query(
      `UPDATE sessions SET client_settings = $2::jsonb WHERE id = $1 AND ${fenceSql({ session: 'id', token: '$4::bigint', owners: '$3' })}`,
      [sessionId, JSON.stringify(settings), owner, token],
    );
    if (result.rowCount === 0 && owner !== null && (await getSession(ctx, sessionId))) throw ctx.refuse(sessionId, token);
    return result.rowCount > 0;
  });
}

export function loadSession(ctx: SqlContext, sessionId: string): Promise<LoadedSession | null> {
  return ctx.run('load session', async () => {
    const session = await getSession(ctx, sessionId);
    if (!session) return null;
    const checkpointRows = await ctx.db.query(
      `SELECT ${CHECKPOINT_COLUMNS} FROM conversation_compactions WHERE session_id = $1 ORDER BY sequence DESC LIMIT 1`,
      [sessionId],
    );
    const checkpoint = checkpointRows.rows[0] ? checkpointFromRow(checkpointRows.rows[0]) : null;
    const [messages, accepted, plans, totals, last, replay] = await Promise.all([
      ctx.db.query(`SELECT ${MESSAGE_COLUMNS} FROM messages WHERE session_id = $1 AND sequence > $2 ORDER BY sequence`, [
        sessionId,
        checkpoint?.replacedThroughMessageSequence ?? 0,
      ]),
      ctx.db.query<{ client_request_id: string; id: string }>(
        'SELECT client_request_id, id FROM turns WHERE session_id = $1 ORDER BY sequence',
        [sessionId],
      ),
      loadSessionTurnPlans(ctx, sessionId),
      ctx.db.query(
        `SELECT COALESCE(SUM(input_tokens), 0) AS input, COALESCE(SUM(output_tokens), 0) AS output,
             COALESCE(SUM(cached_input_tokens), 0) AS cached, COALESCE(SUM(reasoning_tokens), 0) AS reasoning
           FROM turns WHERE session_id = $1`,
        [sessionId],
      ),
      ctx.db.query(`SELECT ${TURN_COLUMNS} FROM turns WHERE session_id = $1 ORDER BY sequence DESC LIMIT 1`, [sessionId]),
      checkpoint?.lastUserMessageId
        ? ctx.db.query(`SELECT ${MESSAGE_COLUMNS} FROM messages WHERE id = $1`, [checkpoint.lastUserMessageId])
        : Promise.resolve({ rows: [] as Row[], rowCount: 0 }),
    ]);
    const t = totals.rows[0]!;
    return {
      session,
      messages: messages.rows.map(messageFromRow),
      checkpoint,
      replayMessage: replay.rows[0] ? messageFromRow(replay.rows[0]) : null,
      acceptedRequests: accepted.rows.map((r) => ({ clientRequestId: r.client_request_id, turnId: r.id })),
      plans,
      tokenTotals: {
        inputTokens: num(t.input),
        outputTokens: num(t.output),
        cachedInputTokens: num(t.cached),
        reasoningTokens: num(t.reasoning),
      },
      lastTurn: last.rows[0] ? turnFromRow(last.rows[0]) : null,
    };
  });
}

/**
 * Locks the session row: message sequences of a session are allocated only under this lock. The
 * next free sequence is read by the INSERT itself, a later statement with a fresh snapshot, so a
 * writer that waited for the lock sees the rows its predecessor committed.

/**
 * With ownership on, a session (or a sub-agent session under it, which the delete cascades to) that
 * another live core owns is not deleted under it: `session_owned_elsewhere`, as `loadSession`
 * answers. The lease rows of the tree are locked first and the session rows after them, so no core
 * can take a lease between this check and the delete (an acquisition waits, then finds the session
 * gone). Leases before sessions is the order every other writer takes them in: a fenced fact locks
 * its lease row `FOR SHARE` in its fence, then its turn and session; a takeover writes the lease,
 * then corrects the session's rows. Sessions first here deadlocked with a turn beginning on the
 * owning core (CI, stop 14: `begin turn failed: deadlock detected`).
 */
async function refuseDeleteOwnedElsewhere(tx: SqlExecutor, sessionId: string, owners: readonly string[]): Promise<void> {
  const treeSql = `WITH RECURSIVE tree(id) AS (
       SELECT id FROM sessions WHERE id = $1
       UNION SELECT s.id FROM sessions s JOIN tree t ON s.parent_session_id = t.id
     )
     SELECT s.id FROM sessions s WHERE s.id IN (SELECT id FROM tree)`;
  const seen = new Set<string>();
  const leaseRows: Array<{ session_id: string; owner_id: string | null; expires_at: unknown; live: boolean }> = [];
  // Read the tree, lock the leases of the sessions not seen yet, then the session rows. Locking a
  // parent FOR UPDATE stops new children (their insert needs a key-share lock on it), so a second
  // round only runs for a child created between the first read and that lock, and the third finds
  // nothing new.
  for (;;) {
    const read = await tx.query<{ id: string }>(treeSql, [sessionId]);
    const fresh = read.rows.map((r) => r.id).filter((id) => !seen.has(id));
    if (fresh.length === 0) break;
    const leases = await tx.query<{ session_id: string; owner_id: string | null; expires_at: unknown; live: boolean }>(
      `SELECT session_id, owner_id, expires_at, expires_at > now() AS live FROM session_leases
       WHERE session_id = ANY($1::text[]) ORDER BY session_id FOR UPDATE`,
      [fresh],
    );
    leaseRows.push(...leases.rows);
    await tx.query(`SELECT id FROM sessions WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE`, [fresh]);
    for (const id of fresh) seen.add(id);
  }
  if (seen.size === 0) return;
  const held = leaseRows.find((l) => l.live && l.owner_id !== null && !owners.includes(l.owner_id));
  if (!held) return;
  const expiresAt = iso(held.expires_at);
  throw new CommandError(
    'session_owned_elsewhere',
    `session ${held.session_id} is owned by runtime ${String(held.owner_id)} until ${expiresAt}; it was not deleted`,
    { details: { sessionId: held.session_id, ownerId: String(held.owner_id), leaseExpiresAt: expiresAt } },
  );
}
