/**
 * @module storage/sql/rows
 * The row shapes every per-concept SQL module shares: the column lists it selects, the mapping of a
 * row to its record, the JSON recordset rows the step statements take, and SQLSTATE reading.
 */
import { errorMessage } from '../../errors.js';
import type { NewMessage, StoredMessage } from '../../protocol/content.js';
import type { PermissionMode, PermissionModeOrigin } from '../../protocol/input.js';
import type { SpanData } from '../../protocol/trace-signals.js';
import { iso, isoOrNull, num, numOrNull, strOrNull, type Row } from '../sql.js';
import { sqlStateOf } from './sql-state.js';
import type { CheckpointRecord, CompactionRuntimeState, SessionRecord, TraceSpanRecord, TurnRecord } from '../storage.js';

/** The columns of a `SessionRecord`, in `sessionFromRow` order. */
export const SESSION_COLUMNS = `id, title, working_directory, default_model_id, status, created_at, updated_at, last_turn_at,
  parent_session_id, task_name, agent_role, spawn_span_id, sandbox_mode, sandbox_mode_origin, reasoning_effort, tool_result_pruned_through_sequence`;

/** The columns of a `TurnRecord`, in `turnFromRow` order. */
export const TURN_COLUMNS = `id, session_id, client_request_id, sequence, model_id, resolved_provider_id, resolved_model_name,
  app_version, status, model_call_count, model_submission_count, tool_call_count, input_tokens, output_tokens,
  cached_input_tokens, reasoning_tokens, error_code, error_message, started_at, ended_at, plan_unfinished_step_count`;

/** A `sessions` row as its record. */
export function sessionFromRow(r: Row): SessionRecord {
  return {
    id: String(r.id),
    title: strOrNull(r.title),
    workingDirectory: String(r.working_directory),
    defaultModelId: strOrNull(r.default_model_id),
    status: r.status as SessionRecord['status'],
    createdAt: iso(r.created_at),
    updatedAt: iso(r.updated_at),
    lastTurnAt: isoOrNull(r.last_turn_at),
    parentSessionId: strOrNull(r.parent_session_id),
    taskName: strOrNull(r.task_name),
    agentRole: strOrNull(r.agent_role),
    spawnSpanId: strOrNull(r.spawn_span_id),
    permissionMode: r.sandbox_mode as PermissionMode,
    permissionModeOrigin: r.sandbox_mode_origin as PermissionModeOrigin,
    reasoningEffort: strOrNull(r.reasoning_effort),
    toolResultPrunedThroughSequence: numOrNull(r.tool_result_pruned_through_sequence),
  };
}

/** A `turns` row as its record. */
export function turnFromRow(r: Row): TurnRecord {
  return {
    id: String(r.id),
    sessionId: String(r.session_id),
    clientRequestId: String(r.client_request_id),
    sequence: num(r.sequence),
    modelId: strOrNull(r.model_id),
    resolvedProviderId: String(r.resolved_provider_id),
    resolvedModelName: String(r.resolved_model_name),
    appVersion: String(r.app_version),
    status: r.status as TurnRecord['status'],
    modelCallCount: num(r.model_call_count),
    modelSubmissionCount: num(r.model_submission_count),
    toolCallCount: num(r.tool_call_count),
    inputTokens: numOrNull(r.input_tokens),
    outputTokens: numOrNull(r.output_tokens),
    cachedInputTokens: numOrNull(r.cached_input_tokens),
    reasoningTokens: numOrNull(r.reasoning_tokens),
    errorCode: strOrNull(r.error_code),
    errorMessage: strOrNull(r.error_message),
    startedAt: iso(r.started_at),
    endedAt: isoOrNull(r.ended_at),
    planUnfinishedStepCount: numOrNull(r.plan_unfinished_step_count),
  };
}

/** A `messages` row as its record; the tool fields only when set. */
export function messageFromRow(r: Row): StoredMessage {
  const message: StoredMessage = {
    id: String(r.id),
    sessionId: String(r.session_id),
    turnId: strOrNull(r.turn_id),
    sequence: num(r.sequence),
    role: r.role as StoredMessage['role'],
    kind: r.message_kind as StoredMessage['kind'],
    content: r.content as StoredMessage['content'],
    createdAt: iso(r.created_at),
  };
  if (r.provider_call_id !== null && r.provider_call_id !== undefined) message.providerCallId = String(r.provider_call_id);
  if (r.tool_name !== null && r.tool_name !== undefined) message.toolName = String(r.tool_name);
  return message;
}

/**
 * A message one of the single-message fact statements stored: what was sent, with what the
 * statement decided (its session, sequence and time; `RETURNING session_id, sequence, created_at`).
 */
export function storedMessage(message: NewMessage, turnId: string, r: Row): StoredMessage {
  const stored: StoredMessage = {
    id: message.id,
    sessionId: String(r.session_id),
    turnId,
    sequence: num(r.sequence),
    role: message.role,
    kind: message.kind,
    content: message.content,
    createdAt: iso(r.created_at),
  };
  if (message.providerCallId !== undefined) stored.providerCallId = message.providerCallId;
  if (message.toolName !== undefined) stored.toolName = message.toolName;
  return stored;
}

/** The columns of a `CheckpointRecord`. */
export const CHECKPOINT_COLUMNS = `id, session_id, sequence, kind, through_message_sequence, replaced_through_message_sequence,
  source_message_count, checkpoint_format_version, summary_format_version, last_user_message_id, last_user_message_sequence,
  resolved_model_name, summary, runtime_state, runtime_reminder_format_version, runtime_reminder, trigger_turn_id,
  parent_compaction_id, input_tokens, output_tokens, created_at`;

/** A `conversation_compactions` row as its record. */
export function checkpointFromRow(r: Row): CheckpointRecord {
  return {
    id: String(r.id),
    sessionId: String(r.session_id),
    sequence: num(r.sequence),
    kind: r.kind as CheckpointRecord['kind'],
    throughMessageSequence: num(r.through_message_sequence),
    replacedThroughMessageSequence: num(r.replaced_through_message_sequence),
    sourceMessageCount: num(r.source_message_count),
    checkpointFormatVersion: num(r.checkpoint_format_version),
    summaryFormatVersion: num(r.summary_format_version),
    lastUserMessageId: strOrNull(r.last_user_message_id),
    lastUserMessageSequence: numOrNull(r.last_user_message_sequence),
    resolvedModelName: String(r.resolved_model_name),
    summary: String(r.summary),
    runtimeState: r.runtime_state as CompactionRuntimeState,
    runtimeReminderFormatVersion: num(r.runtime_reminder_format_version),
    runtimeReminder: String(r.runtime_reminder),
    triggerTurnId: strOrNull(r.trigger_turn_id),
    parentCompactionId: strOrNull(r.parent_compaction_id),
    inputTokens: numOrNull(r.input_tokens),
    outputTokens: numOrNull(r.output_tokens),
    createdAt: iso(r.created_at),
  };
}

/** A `trace_spans` row as its record. */
export function spanFromRow(r: Row): TraceSpanRecord {
  return {
    id: String(r.id),
    traceId: String(r.trace_id),
    sessionId: String(r.session_id),
    turnId: strOrNull(r.turn_id),
    parentSpanId: strOrNull(r.parent_span_id),
    kind: r.kind as TraceSpanRecord['kind'],
    name: String(r.name),
    status: String(r.status),
    providerCallId: strOrNull(r.provider_call_id),
    requestedToolName: strOrNull(r.requested_tool_name),
    resolvedToolName: strOrNull(r.resolved_tool_name),
    attemptCount: numOrNull(r.attempt_count),
    inputTokens: numOrNull(r.input_tokens),
    outputTokens: numOrNull(r.output_tokens),
    responseMessageId: strOrNull(r.response_message_id),
    permissionWaitMs: numOrNull(r.permission_wait_ms),
    startedAt: iso(r.started_at),
    endedAt: isoOrNull(r.ended_at),
    errorCode: strOrNull(r.error_code),
    errorMessage: strOrNull(r.error_message),
    attributes: (r.attributes ?? {}) as Record<string, unknown>,
  };
}

/**
 * One span as a row of the JSON recordset of the trace statements (`step-sql.ts`). Absent values
 * are left out (undefined, which JSON.stringify skips) rather than sent as null: the recordset reads
 * a missing key as NULL all the same, and a span has a dozen empty columns, a fifth of the batch's
 * text to write, send and parse.
 */
export function spanRow(s: SpanData): Record<string, unknown> {
  return {
    id: s.id,
    trace_id: s.traceId,
    session_id: s.sessionId,
    turn_id: s.turnId ?? undefined,
    parent_span_id: s.parentSpanId ?? undefined,
    kind: s.kind,
    name: s.name,
    status: s.status,
    model_id: s.modelId ?? undefined,
    resolved_model_name: s.resolvedModelName ?? undefined,
    provider_request_id: s.providerRequestId ?? undefined,
    provider_call_id: s.providerCallId ?? undefined,
    requested_tool_name: s.requestedToolName ?? undefined,
    resolved_tool_name: s.resolvedToolName ?? undefined,
    attempt_count: s.attemptCount ?? undefined,
    input_tokens: s.inputTokens ?? undefined,
    output_tokens: s.outputTokens ?? undefined,
    cached_input_tokens: s.cachedInputTokens ?? undefined,
    reasoning_tokens: s.reasoningTokens ?? undefined,
    response_message_id: s.responseMessageId ?? undefined,
    permission_wait_ms: s.permissionWaitMs ?? undefined,
    started_at: s.startedAt,
    ended_at: s.endedAt ?? undefined,
    error_code: s.errorCode?.slice(0, 256) ?? undefined,
    error_message: s.errorMessage?.slice(0, 512) ?? undefined,
    attributes: s.attributes,
  };
}


/**
 * True for the one failure a fact statement runs again on: its `MAX + 1` sequence, read from a
 * snapshot taken before it waited for the session lock, was taken by the writer it waited for.
 */
export function lostSequenceRace(error: unknown): boolean {
  if (sqlStateOf(error) !== '23505') return false;
  const constraint = (error as { constraint?: unknown }).constraint;
  const text = typeof constraint === 'string' ? constraint : errorMessage(error);
  return text.includes('messages_session_sequence') || text.includes('turns_session_sequence');
}

/** One message as a row of the JSON recordset of `step-sql.ts` (`ord` from 1). */
export function messageRecord(message: NewMessage, index: number): Record<string, unknown> {
  return {
    ord: index + 1,
    id: message.id,
    role: message.role,
    content: message.content,
    message_kind: message.kind,
    provider_call_id: message.providerCallId ?? null,
    tool_name: message.toolName ?? null,
  };
}

/** The parameters $2..$7 of the single-message statements. */
export function messageParams(message: NewMessage): unknown[] {
  return pushMessageParams([], message);
}

/**
 * Pushes the parameters $2..$7 of the single-message statements onto `params` (which holds $1) and
 * returns it: a fact's parameters are built in one array, not spread from two (issue 14, perf-alloc).
 */
export function pushMessageParams(params: unknown[], message: NewMessage): unknown[] {
  params.push(message.id, message.role, JSON.stringify(message.content), message.kind, message.providerCallId ?? null, message.toolName ?? null);
  return params;
}
