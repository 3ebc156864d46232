/**
 * @module storage/sql/read-back
 * How the repeat of a fact whose first attempt's outcome was unknown (`outcome-unknown.ts`) finds
 * out that the first attempt committed after all, and what it then answers: what the first attempt
 * would have answered, built from the stored rows. Each read runs only on that path, after the
 * repeat's own write found the fact's key taken (23505) or its turn no longer running, so a step
 * pays nothing for it.
 *
 * What counts as "the first attempt committed": every fact statement is one atomic statement, so a
 * stored row with the fact's key (the message id, the turn id) means all of that statement's writes
 * committed together (the token counters, the reserved model call, the turn's end with its final
 * answer). A row with that key but other content is not this fact: the repeat's failure is thrown.
 */
import { StorageError } from '../../errors.js';
import type { NewMessage, StoredMessage } from '../../protocol/content.js';
import { numOrNull } from '../sql.js';
import { MESSAGE_READ_BACK, TURN_MESSAGES_READ_BACK, TURN_READ_BACK } from '../step-sql.js';
import type { FinishTurn } from '../storage.js';
import type { SqlContext } from './context.js';
import { messageFromRow, storedMessage } from './rows.js';
import { sqlStateOf } from './sql-state.js';

/** A unique key taken: the repeat's write met the row its first attempt committed (or another writer's). */
export function keyTaken(error: unknown): boolean {
  return sqlStateOf(error) === '23505';
}

/**
 * `message` as the first attempt stored it for `turnId`, or null when no message has its id. A
 * message with its id but another turn, role, kind, call id, tool name or content is a conflict,
 * not this fact: a `StorageError`.
 */
export async function storedAlready(ctx: SqlContext, turnId: string, message: NewMessage): Promise<StoredMessage | null> {
  const { rows } = await ctx.db.query(MESSAGE_READ_BACK, [message.id, JSON.stringify(message.content)]);
  const row = rows[0];
  if (!row) return null;
  const same =
    row.turn_id === turnId &&
    row.role === message.role &&
    row.message_kind === message.kind &&
    (row.provider_call_id ?? null) === (message.providerCallId ?? null) &&
    (row.tool_name ?? null) === (message.toolName ?? null) &&
    row.same_content === true;
  if (!same) throw new StorageError(`message ${message.id} is already stored with other content`);
  return storedMessage(message, turnId, row);
}

/** The messages among `ids` stored for `turnId`, in sequence order (none: an empty array). */
export async function turnMessagesStored(ctx: SqlContext, turnId: string, ids: readonly string[]): Promise<StoredMessage[]> {
  const { rows } = await ctx.db.query(TURN_MESSAGES_READ_BACK, [turnId, ids]);
  return rows.map(messageFromRow);
}

/**
 * Whether the turn `turnId` was stored by this begin: the row exists for the same session and client
 * request (then its messages are the begin's answer); null when no turn has the id.
 */
export async function begunAlready(
  ctx: SqlContext,
  input: { turnId: string; sessionId: string; clientRequestId: string; messages: readonly NewMessage[] },
): Promise<StoredMessage[] | null> {
  const { rows } = await ctx.db.query(TURN_READ_BACK, [input.turnId]);
  const row = rows[0];
  if (!row) return null;
  if (row.session_id !== input.sessionId || row.client_request_id !== input.clientRequestId) {
    throw new StorageError(`turn ${input.turnId} is already stored for another request`);
  }
  const stored = await turnMessagesStored(ctx, input.turnId, input.messages.map((m) => m.id));
  if (stored.length !== input.messages.length) throw new StorageError(`turn ${input.turnId} was not stored`);
  return stored;
}

/** Whether the turn ended as `outcome` says (status, error code and message, unfinished plan steps). */
export async function endedAlready(ctx: SqlContext, turnId: string, outcome: FinishTurn): Promise<boolean> {
  const { rows } = await ctx.db.query(TURN_READ_BACK, [turnId]);
  const row = rows[0];
  return (
    row !== undefined &&
    row.status === outcome.status &&
    (row.error_code ?? null) === (outcome.errorCode ?? null) &&
    (row.error_message ?? null) === (outcome.errorMessage ?? null) &&
    numOrNull(row.plan_unfinished_step_count) === outcome.planUnfinishedStepCount
  );
}
