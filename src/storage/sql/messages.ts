/**
 * @module storage/sql/messages
 * Reading a session's `messages` rows in sequence order.
 *
 * Each exported function is the `SessionStorage` method of the same name (its contract is in
 * `storage.ts`), taking the storage object's `SqlContext` first.
 */
import type { StoredMessage } from '../../protocol/content.js';
import { MESSAGE_COLUMNS } from '../step-sql.js';
import type { SqlContext } from './context.js';
import { messageFromRow } from './rows.js';

export function listMessages(ctx: SqlContext, sessionId: string, options: { afterSequence?: number; limit?: number } = {}): Promise<StoredMessage[]> {
  return ctx.run('list messages', async () => {
    const { rows } = await ctx.db.query(
      `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE session_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3`,
      [sessionId, options.afterSequence ?? 0, options.limit ?? 1_000_000],
    );
    return rows.map(messageFromRow);
  });
}
