/**
 * @module storage/sql/turns
 * The `turns` rows and the facts a running turn commits: begin (turn row plus its first messages),
 * model-call starts, assistant messages, tool results, plan updates, finish and interrupt; each a
 * single fenced statement (`step-sql.ts`) that says why when it wrote nothing.
 *
 * Each exported function is the `SessionStorage` method of the same name (its contract is in
 * `storage.ts`), taking the storage object's `SqlContext` first.
 */
import { StorageError } from '../../errors.js';
import { textOf, type ContentBlock, type NewMessage, type StoredMessage } from '../../protocol/content.js';
import type { PlanStep } from '../../protocol/plan.js';
import { fenceSql } from '../fence.js';
import { num } from '../sql.js';
import {
  APPEND_TURN_MESSAGES,
  BEGIN_TURN,
  COMMIT_ASSISTANT_MESSAGE,
  COMMIT_PLAN_UPDATE,
  COMMIT_TOOL_RESULT,
  RECORD_MODEL_CALL_START,
  RECORD_MODEL_CALL_START_REPEAT,
  SESSION_OWNERSHIP,
  TURN_READ_BACK,
  type FactStatement,
} from '../step-sql.js';
import type { AnswerEnd, BeginTurn, FinishTurn, TokenUsage, TurnRecord } from '../storage.js';
import type { SqlContext } from './context.js';
import { settleUnknownOutcome } from './outcome-unknown.js';
import { begunAlready, endedAlready, keyTaken, storedAlready, turnMessagesStored } from './read-back.js';
import { TURN_COLUMNS, messageFromRow, messageRecord, pushMessageParams, storedMessage, turnFromRow } from './rows.js';
import { getSession } from './sessions.js';

/**
 * One message of a running turn, through one of the single-message fact statements. When the first
 * attempt's outcome is unknown (`outcome-unknown.ts`), the repeat that finds the message's id taken
 * (23505, the atomic statement wrote nothing) or its turn no longer running (the first attempt was a
 * final answer that ended it) reads the message back and answers it as stored.
 */
function commitOne(ctx: SqlContext, turnId: string, stmt: FactStatement, message: NewMessage, ...extra: unknown[]): Promise<StoredMessage> {
  const attempt = async (settling: boolean): Promise<StoredMessage> => {
    // A new array for each attempt: `fact` pushes the fence's owners onto it.
    const params = pushMessageParams([turnId], message);
    for (const value of extra) params.push(value);
    let rows;
    try {
      rows = await ctx.fact(stmt, params);
    } catch (error) {
      if (settling && keyTaken(error)) {
        const stored = await storedAlready(ctx, turnId, message);
        if (stored) return stored;
      }
      throw error;
    }
    if (rows[0]) return storedMessage(message, turnId, rows[0]);
    if (settling) {
      const stored = await storedAlready(ctx, turnId, message);
      if (stored) return stored;
    }
    return ctx.notRunning(turnId);
  };
  return settleUnknownOutcome(attempt);
}

export function beginTurn(ctx: SqlContext, input: BeginTurn): Promise<StoredMessage[]> {
  const attempt = async (settling: boolean): Promise<StoredMessage[]> => {
    const [owners, token] = ctx.fenceOf(input.sessionId);
    const params = [
      input.turnId,
      input.sessionId,
      input.clientRequestId,
      input.modelId,
      input.resolvedProviderId,
      input.resolvedModelName,
      input.appVersion,
      JSON.stringify(input.messages.map(messageRecord)),
      input.reserveModelCall ? 1 : 0,
    ];
    // Session-keyed: fenced by this core's token for the session, which becomes the turn's own.
    let rows;
    try {
      rows = await ctx.retrying(owners === null ? BEGIN_TURN.plain : BEGIN_TURN.fenced, owners === null ? params : [...params, owners, token]);
    } catch (error) {
      // The repeat of a begin whose first attempt committed meets its turn row (id, or the one running turn).
      if (settling && keyTaken(error)) {
        const stored = await begunAlready(ctx, input);
        if (stored) return stored;
      }
      throw error;
    }
    if (owners === null) {
      if (rows.length < input.messages.length || (rows.length === 0 && !(await getSession(ctx, input.sessionId)))) {
        throw new StorageError(`session ${input.sessionId} does not exist`);
      }
      return rows.map(messageFromRow);
    }
    if (rows.length < input.messages.length || rows.length === 0) {
      const { rows: why } = await ctx.db.query<{ found: boolean; began: boolean; owned: boolean }>(SESSION_OWNERSHIP, [
        input.sessionId,
        owners,
        token,
        input.turnId,
      ]);
      const w = why[0]!;
      if (!w.found) throw new StorageError(`session ${input.sessionId} does not exist`);
      if (!w.owned) throw ctx.refuse(input.sessionId, token);
      if (!w.began || rows.length < input.messages.length) throw new StorageError(`turn ${input.turnId} was not stored`);
    }
    return rows.map(messageFromRow);
  };
  return ctx.run('begin turn', async () => {
    const stored = await settleUnknownOutcome(attempt);
    // The turn's submission count starts here: 1 with the first call reserved, else 0.
    ctx.submitted(input.turnId, input.reserveModelCall ? 1 : 0);
    return stored;
  });
}

export function recordModelCallStart(ctx: SqlContext, turnId: string, modelCallIndex: number): Promise<void> {
  // The count before this call, as this storage object's own facts left it: the repeat's key.
  const before = ctx.submissionsOf(turnId);
  const attempt = async (settling: boolean) => {
    // A repeat after an unknown outcome counts only if the first attempt did not: with the count
    // known, `RECORD_MODEL_CALL_START_REPEAT` tells the two apart (docs/decisions.md, "A write whose
    // outcome is unknown"); without it (a turn begun elsewhere) the repeat runs as the first did.
    if (settling && before !== undefined) {
      const rows = await ctx.fact(RECORD_MODEL_CALL_START_REPEAT, [turnId, modelCallIndex, before]);
      if (num(rows[0]?.counted ?? 0) > 0 || num(rows[0]?.recorded ?? 0) > 0) return;
    } else {
      const rows = await ctx.fact(RECORD_MODEL_CALL_START, [turnId, modelCallIndex]);
      if (num(rows[0]?.counted ?? 0) > 0) return;
    }
    await ctx.turnStatus(turnId);
    throw new StorageError(`turn ${turnId} is not running`);
  };
  return ctx.run('record model call', async () => {
    await settleUnknownOutcome(attempt);
    ctx.submitted(turnId, before === undefined ? undefined : before + 1);
  });
}

export function commitAssistantMessage(ctx: SqlContext, turnId: string, message: NewMessage, usage: TokenUsage, toolCallCount: number, end?: AnswerEnd): Promise<StoredMessage> {
  // A final answer that ends the turn: its submission count is not needed any more.
  if (end !== undefined) ctx.ended(turnId);
  return ctx.run('commit assistant message', () =>
    commitOne(
      ctx,
      turnId,
      COMMIT_ASSISTANT_MESSAGE,
      message,
      usage.inputTokens,
      usage.outputTokens,
      usage.cachedInputTokens,
      usage.reasoningTokens,
      toolCallCount,
      end !== undefined,
      end?.planUnfinishedStepCount ?? null,
    ),
  );
}

export function commitToolResult(ctx: SqlContext, turnId: string, message: NewMessage, reserveModelCall = 0): Promise<StoredMessage> {
  return ctx.run('commit tool result', async () => {
    const stored = await commitOne(ctx, turnId, COMMIT_TOOL_RESULT, message, reserveModelCall);
    // The reserved call counted one more submission, in the same statement.
    if (reserveModelCall > 0) ctx.submitted(turnId, undefined);
    return stored;
  });
}

export function commitPlanUpdate(ctx: SqlContext, 
  turnId: string,
  plan: { explanation: string | null; steps: PlanStep[]; updatedAt: string },
  message: NewMessage,
): Promise<StoredMessage> {
  const results = message.content.filter((b) => b.type === 'tool_result');
  if (results.length !== 1 || message.content.length !== 1) {
    return Promise.reject(new StorageError('a plan update must carry exactly one tool result block'));
  }
  return ctx.run('commit plan update', () =>
    commitOne(ctx, turnId, COMMIT_PLAN_UPDATE, message, plan.explanation, JSON.stringify(plan.steps), plan.updatedAt),
  );
}

export function appendTurnMessages(ctx: SqlContext, turnId: string, messages: NewMessage[]): Promise<StoredMessage[]> {
  if (messages.length === 0) return Promise.resolve([]);
  const attempt = async (settling: boolean): Promise<StoredMessage[]> => {
    const rows = await ctx.fact(APPEND_TURN_MESSAGES, [turnId, JSON.stringify(messages.map(messageRecord))]);
    // No row: every message was already stored, or the turn is not running; only the second is an error.
    // The fence refusing it is a third; `turnStatus` tells all three apart.
    if (rows.length === 0) {
      // The repeat of an append whose first attempt committed stores nothing (the ids are taken):
      // the first attempt's answer is the messages it stored.
      if (settling) {
        const stored = await turnMessagesStored(ctx, turnId, messages.map((m) => m.id));
        if (stored.length > 0) return stored;
      }
      const status = await ctx.turnStatus(turnId);
      if (status !== 'running') throw new StorageError(`turn ${turnId} is ${status}, not running`);
    }
    return rows.map(messageFromRow);
  };
  return ctx.run('append messages', () => settleUnknownOutcome(attempt));
}

export function finishTurn(ctx: SqlContext, turnId: string, outcome: FinishTurn): Promise<boolean> {
  const attempt = async (settling: boolean): Promise<boolean> => {
    // A model call reserved by an earlier fact and never made ($7 > 0) is taken back here, where the
    // runtime knows how the turn ended (docs/decisions.md, "The durable step's writes").
    const result = await ctx.db.query(
      `UPDATE turns t SET status = $2, ended_at = GREATEST(now(), started_at), error_code = $3, error_message = $4,
           plan_unfinished_step_count = $5, updated_at = now(),
           model_call_count = CASE WHEN $7::int > 0 THEN LEAST(model_call_count, $7::int - 1) ELSE model_call_count END,
           model_submission_count = model_submission_count - CASE WHEN $7::int > 0 THEN 1 ELSE 0 END
         WHERE id = $1 AND status = 'running' AND ${fenceSql({ session: 't.session_id', token: 't.lease_token', owners: '$6' })}`,
      [turnId, outcome.status, outcome.errorCode ?? null, outcome.errorMessage ?? null, outcome.planUnfinishedStepCount, ctx.fenceOwners, outcome.unmadeModelCall ?? 0],
    );
    // The repeat of an end whose first attempt committed finds the turn ended just so: recorded.
    if (result.rowCount === 0 && settling && (await endedAlready(ctx, turnId, outcome))) return true;
    if (result.rowCount === 0) await ctx.explainTurnMiss(turnId);
    return result.rowCount > 0;
  };
  ctx.ended(turnId);
  return ctx.run('finish turn', () => settleUnknownOutcome(attempt));
}

export function interruptTurn(ctx: SqlContext, turnId: string, reason: { errorCode: string; errorMessage: string }): Promise<boolean> {
  const attempt = (settling: boolean) =>
    ctx.db.transaction(async (tx) => {
      const turns = await tx.query(
        `UPDATE turns t SET status = 'interrupted', ended_at = GREATEST(now(), started_at), error_code = $2,
             error_message = $3, updated_at = now()
           WHERE id = $1 AND status = 'running' AND ${fenceSql({ session: 't.session_id', token: 't.lease_token', owners: '$4' })}`,
        [turnId, reason.errorCode, reason.errorMessage, ctx.fenceOwners],
      );
      if (turns.rowCount === 0) {
        // The repeat of an interrupt whose COMMIT's answer was lost finds the turn interrupted just so.
        if (settling) {
          const { rows } = await tx.query(TURN_READ_BACK, [turnId]);
          if (rows[0]?.status === 'interrupted' && rows[0].error_code === reason.errorCode && rows[0].error_message === reason.errorMessage) return true;
        }
        await ctx.explainTurnMiss(turnId, tx);
        return false;
      }
      await tx.query(
        `UPDATE trace_spans SET status = 'outcome_unknown', ended_at = GREATEST(now(), started_at),
             error_code = COALESCE(error_code, $2)
           WHERE turn_id = $1 AND status = 'running'`,
        [turnId, reason.errorCode],
      );
      return true;
    });
  ctx.ended(turnId);
  return ctx.run('interrupt turn', () => settleUnknownOutcome(attempt));
}

export function getTurn(ctx: SqlContext, turnId: string): Promise<TurnRecord | null> {
  return ctx.run('get turn', async () => {
    const { rows } = await ctx.db.query(`SELECT ${TURN_COLUMNS} FROM turns WHERE id = $1`, [turnId]);
    return rows[0] ? turnFromRow(rows[0]) : null;
  });
}

export function getTurnFinalText(ctx: SqlContext, turnId: string): Promise<string> {
  return ctx.run('get final text', async () => {
    const { rows } = await ctx.db.query(
      `SELECT content FROM messages WHERE turn_id = $1 AND role = 'assistant' ORDER BY sequence DESC LIMIT 1`,
      [turnId],
    );
    const content = rows[0]?.content;
    return Array.isArray(content) ? textOf(content as ContentBlock[]) : '';
  });
}

export function listTurns(ctx: SqlContext, sessionId: string): Promise<TurnRecord[]> {
  return ctx.run('list turns', async () => {
    const { rows } = await ctx.db.query(`SELECT ${TURN_COLUMNS} FROM turns WHERE session_id = $1 ORDER BY sequence`, [sessionId]);
    return rows.map(turnFromRow);
  });
}
