/**
 * @module storage/sql/sub-agents
 * A parent session's sub-agent sessions: listing them, and reconciling them after a restart (unused
 * children deleted, finished child turns whose result never reached the parent found).
 *
 * Each exported function is the `SessionStorage` method of the same name (its contract is in
 * `storage.ts`), taking the storage object's `SqlContext` first.
 */
import { strOrNull } from '../sql.js';
import type { ReconciliationReport, SessionRecord, TurnStatus } from '../storage.js';
import type { SqlContext } from './context.js';
import { SESSION_COLUMNS, sessionFromRow } from './rows.js';

export function listChildSessions(ctx: SqlContext, parentSessionId: string): Promise<SessionRecord[]> {
  return ctx.run('list child sessions', async () => {
    const { rows } = await ctx.db.query(`SELECT ${SESSION_COLUMNS} FROM sessions WHERE parent_session_id = $1 ORDER BY created_at, id`, [parentSessionId]);
    return rows.map(sessionFromRow);
  });
}

export function reconcileChildren(ctx: SqlContext, 
  parentSessionId: string,
  messageIdOf: (childSessionId: string, turnId: string, status: TurnStatus) => string,
  keep: readonly string[] = [],
): Promise<ReconciliationReport> {
  return ctx.run('reconcile sub-agents', () =>
    ctx.db.transaction(async (tx) => {
      await ctx.lockSession(tx, parentSessionId);
      const deleted = await tx.query<{ id: string }>(
        `DELETE FROM sessions s WHERE s.parent_session_id = $1 AND NOT (s.id = ANY($2::text[]))
             AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.session_id = s.id) RETURNING s.id`,
        [parentSessionId, [...keep]],
      );
      const { rows } = await tx.query(
        `SELECT t.id AS turn_id, t.session_id, s.task_name, t.status, t.error_code, t.error_message,
             (SELECT m.content FROM messages m WHERE m.turn_id = t.id AND m.role = 'assistant' ORDER BY m.sequence DESC LIMIT 1) AS last_content
           FROM turns t JOIN sessions s ON s.id = t.session_id
           WHERE s.parent_session_id = $1 AND t.status <> 'running' ORDER BY t.started_at, t.id`,
        [parentSessionId],
      );
      const candidates = rows.map((r) => ({
        childSessionId: String(r.session_id),
        taskName: String(r.task_name),
        turnId: String(r.turn_id),
        status: r.status as Exclude<TurnStatus, 'running'>,
        errorCode: strOrNull(r.error_code),
        errorMessage: strOrNull(r.error_message),
        finalText: Array.isArray(r.last_content) ? (r.last_content as Array<{ type: string; text?: string }>).filter((b) => b.type === 'text').map((b) => b.text ?? '').join('\n\n') : '',
      }));
      if (candidates.length === 0) return { deletedChildren: deleted.rows.map((r) => r.id), undelivered: [] };
      const ids = candidates.map((c) => messageIdOf(c.childSessionId, c.turnId, c.status));
      const present = await tx.query<{ id: string }>(`SELECT id FROM messages WHERE session_id = $1 AND id = ANY($2::text[])`, [parentSessionId, ids]);
      const have = new Set(present.rows.map((r) => r.id));
      return { deletedChildren: deleted.rows.map((r) => r.id), undelivered: candidates.filter((_, i) => !have.has(ids[i]!)) };
    }),
  );
}
