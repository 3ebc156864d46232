/**
 * @module storage/sql/checkpoints
 * The compaction checkpoints (`conversation_compactions`): writing one under the session lock with
 * its boundary checks, reading them, the tool-result prune watermark, and the transcript a
 * checkpoint replaced.
 *
 * Each exported function is the `SessionStorage` method of the same name (its contract is in
 * `storage.ts`), taking the storage object's `SqlContext` first.
 */
import { CommandError, InputError, StorageError } from '../../errors.js';
import { fenceSql } from '../fence.js';
import { num } from '../sql.js';
import { MESSAGE_COLUMNS } from '../step-sql.js';
import type { CheckpointRecord, NewCheckpoint, TranscriptPage } from '../storage.js';
import type { SqlContext } from './context.js';
import { CHECKPOINT_COLUMNS, checkpointFromRow, messageFromRow } from './rows.js';
import { getSession } from './sessions.js';

export function insertCheckpoint(ctx: SqlContext, input: NewCheckpoint): Promise<CheckpointRecord> {
  return ctx.run('write checkpoint', () =>
    ctx.db.transaction(async (tx) => {
      await ctx.lockSession(tx, input.sessionId);
      const facts = await tx.query<{ max_message: unknown; message_count: unknown; max_checkpoint: unknown; running: unknown }>(
        `SELECT (SELECT COALESCE(MAX(sequence), 0) FROM messages WHERE session_id = $1) AS max_message,
                  (SELECT COUNT(*) FROM messages WHERE session_id = $1) AS message_count,
                  (SELECT COALESCE(MAX(sequence), 0) FROM conversation_compactions WHERE session_id = $1) AS max_checkpoint,
                  (SELECT id FROM turns WHERE session_id = $1 AND status = 'running') AS running`,
        [input.sessionId],
      );
      const f = facts.rows[0]!;
      const maxMessage = num(f.max_message);
      if (num(f.message_count) === 0) throw new StorageError('a session without messages cannot be compacted');
      const running = f.running === null || f.running === undefined ? null : String(f.running);
      if (input.kind === 'threshold' || input.kind === 'overflow') {
        if (running !== input.triggerTurnId) throw new StorageError(`trigger turn ${input.triggerTurnId} is not the running turn of the session`);
      } else if (running !== null) {
        throw new StorageError(`turn ${running} is running; ${input.kind} needs an idle session`);
      }
      let through = maxMessage;
      if (input.kind === 'rewind') {
        const parent = await tx.query(`SELECT through_message_sequence FROM conversation_compactions WHERE id = $1 AND session_id = $2`, [
          input.parentCompactionId,
          input.sessionId,
        ]);
        if (!parent.rows[0]) throw new StorageError(`checkpoint ${input.parentCompactionId} is not in session ${input.sessionId}`);
        through = num(parent.rows[0].through_message_sequence);
      }
      const replay = await tx.query(`SELECT sequence, role, message_kind FROM messages WHERE id = $1 AND session_id = $2`, [
        input.lastUserMessageId,
        input.sessionId,
      ]);
      const r = replay.rows[0];
      if (!r || r.role !== 'user' || r.message_kind !== 'normal' || num(r.sequence) > through) {
        throw new StorageError(`message ${input.lastUserMessageId} is not a user request within the checkpoint's boundary`);
      }
      const { rows } = await tx.query(
        `INSERT INTO conversation_compactions (id, session_id, sequence, through_message_sequence, replaced_through_message_sequence,
             source_message_count, checkpoint_format_version, kind, summary_format_version, last_user_message_id,
             last_user_message_sequence, resolved_model_name, summary, runtime_state, runtime_reminder_format_version,
             runtime_reminder, trigger_turn_id, parent_compaction_id, input_tokens, output_tokens)
           VALUES ($1, $2, $3, $4, $5, $6, 1, $7, 1, $8, $9, $10, $11, $12::jsonb, 1, $13, $14, $15, $16, $17)
           RETURNING ${CHECKPOINT_COLUMNS}`,
        [
          input.id,
          input.sessionId,
          num(f.max_checkpoint) + 1,
          through,
          maxMessage,
          input.sourceMessageCount,
          input.kind,
          input.lastUserMessageId,
          num(r.sequence),
          input.resolvedModelName,
          input.summary,
          JSON.stringify(input.runtimeState),
          input.runtimeReminder,
          input.triggerTurnId,
          input.parentCompactionId,
          input.inputTokens,
          input.outputTokens,
        ],
      );
      return checkpointFromRow(rows[0]!);
    }),
  );
}

export function getCheckpoint(ctx: SqlContext, compactionId: string): Promise<CheckpointRecord | null> {
  return ctx.run('get checkpoint', async () => {
    const { rows } = await ctx.db.query(`SELECT ${CHECKPOINT_COLUMNS} FROM conversation_compactions WHERE id = $1`, [compactionId]);
    return rows[0] ? checkpointFromRow(rows[0]) : null;
  });
}

export function listCheckpoints(ctx: SqlContext, sessionId: string): Promise<CheckpointRecord[]> {
  return ctx.run('list checkpoints', async () => {
    const { rows } = await ctx.db.query(`SELECT ${CHECKPOINT_COLUMNS} FROM conversation_compactions WHERE session_id = $1 ORDER BY sequence`, [sessionId]);
    return rows.map(checkpointFromRow);
  });
}

export function advancePruneWatermark(ctx: SqlContext, sessionId: string, throughSequence: number): Promise<number> {
  return ctx.run('advance prune watermark', async () => {
    const { rows } = await ctx.db.query(
      `UPDATE sessions SET tool_result_pruned_through_sequence = GREATEST(COALESCE(tool_result_pruned_through_sequence, 0), $2)
         WHERE id = $1 AND ${fenceSql({ session: 'id', token: '$4::bigint', owners: '$3' })} RETURNING tool_result_pruned_through_sequence`,
      [sessionId, throughSequence, ...ctx.fenceOf(sessionId)],
    );
    if (!rows[0] && ctx.fenceOf(sessionId)[1] !== null && (await getSession(ctx, sessionId))) throw ctx.refuse(sessionId, ctx.fenceOf(sessionId)[1]);
    if (!rows[0]) throw new StorageError(`session ${sessionId} does not exist`);
    return num(rows[0].tool_result_pruned_through_sequence);
  });
}

export async function readTranscript(ctx: SqlContext, sessionId: string, query: { compactionId?: string; afterSequence?: number; limit?: number } = {}): Promise<TranscriptPage> {
  const limit = query.limit ?? 20;
  const after = query.afterSequence ?? 0;
  if (!Number.isInteger(limit) || limit < 1 || limit > 50) throw new InputError('invalid_request', 'limit must be an integer from 1 to 50');
  if (!Number.isInteger(after) || after < 0) throw new InputError('invalid_request', 'afterSequence must be a non-negative integer');
  const checkpoint = await ctx.run('read transcript', async () => {
    const { rows } = query.compactionId
      ? await ctx.db.query(`SELECT ${CHECKPOINT_COLUMNS} FROM conversation_compactions WHERE id = $1 AND session_id = $2`, [query.compactionId, sessionId])
      : await ctx.db.query(`SELECT ${CHECKPOINT_COLUMNS} FROM conversation_compactions WHERE session_id = $1 ORDER BY sequence DESC LIMIT 1`, [sessionId]);
    return rows[0] ? checkpointFromRow(rows[0]) : null;
  });
  if (!checkpoint) {
    throw new CommandError(
      'checkpoint_not_found',
      query.compactionId ? `checkpoint ${query.compactionId} does not exist in this session` : 'this session has no compaction checkpoint',
    );
  }
  return ctx.run('read transcript', async () => {
    const { rows } = await ctx.db.query(
      `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE session_id = $1 AND sequence > $2 AND sequence <= $3 ORDER BY sequence LIMIT $4`,
      [sessionId, after, checkpoint.throughMessageSequence, limit + 1],
    );
    const messages = rows.slice(0, limit).map(messageFromRow);
    const hasMore = rows.length > limit;
    return {
      compactionId: checkpoint.id,
      throughMessageSequence: checkpoint.throughMessageSequence,
      messages,
      hasMore,
      nextAfterSequence: hasMore ? messages[messages.length - 1]!.sequence : null,
    };
  });
}
