/**
 * @module storage/storage
 * The `SessionStorage` port: every durable fact the runtime writes or reads goes through it, in the
 * write order of reference §9.3. The machines' invoked actors call it; nothing else does.
 */
import type { NewMessage, StoredMessage } from '../protocol/content.js';
import type { PermissionMode, PermissionModeOrigin } from '../protocol/input.js';
import type { PlanStep, TurnPlanRecord } from '../protocol/plan.js';
import type { TokenUsage } from '../protocol/usage.js';
import type { MigrationReport } from './migrate.js';
import type { TraceSignal } from '../protocol/trace-signals.js';
import type { WriteFence } from './fence.js';
import type { SessionLeaseStore } from './leases.js';
import type { CorrectionReport } from './correction-report.js';

// The usage type and its sum moved down to the protocol; this keeps the old import path working.
export { addUsage, type TokenUsage } from '../protocol/usage.js';

export interface SessionRecord {
  id: string;
  title: string | null;
  workingDirectory: string;
  defaultModelId: string | null;
  status: 'active' | 'archived';
  createdAt: string;
  updatedAt: string;
  lastTurnAt: string | null;
  parentSessionId: string | null;
  taskName: string | null;
  agentRole: string | null;
  spawnSpanId: string | null;
  permissionMode: PermissionMode;
  /** Where `permissionMode` came from: `user_toggle` once `setPermissionMode` wrote it, `inherited` for sub-agents. */
  permissionModeOrigin: PermissionModeOrigin;
  reasoningEffort: string | null;
  toolResultPrunedThroughSequence: number | null;
}

export interface NewSession {
  id: string;
  workingDirectory: string;
  title?: string | null;
  defaultModelId?: string | null;
  permissionMode?: PermissionMode;
  reasoningEffort?: string | null;
  parentSessionId?: string | null;
  taskName?: string | null;
  agentRole?: string | null;
  spawnSpanId?: string | null;
}

/** The lease a new session is created under (`createLeasedSession`). */
export interface NewSessionLease {
  ownerId: string;
  leaseMs: number;
}

export type TurnStatus = 'running' | 'completed' | 'failed' | 'cancelled' | 'interrupted';

export interface TurnRecord {
  id: string;
  sessionId: string;
  clientRequestId: string;
  sequence: number;
  modelId: string | null;
  resolvedProviderId: string;
  resolvedModelName: string;
  appVersion: string;
  status: TurnStatus;
  modelCallCount: number;
  modelSubmissionCount: number;
  toolCallCount: number;
  inputTokens: number | null;
  outputTokens: number | null;
  cachedInputTokens: number | null;
  reasoningTokens: number | null;
  errorCode: string | null;
  errorMessage: string | null;
  startedAt: string;
  endedAt: string | null;
  planUnfinishedStepCount: number | null;
}

export interface BeginTurn {
  turnId: string;
  sessionId: string;
  clientRequestId: string;
  modelId: string;
  resolvedProviderId: string;
  resolvedModelName: string;
  appVersion: string;
  /** Skill instruction snapshots first, then the user's visible message. */
  messages: NewMessage[];
  /**
   * Reserves the turn's first model call in the same statement: `model_call_count` and
   * `model_submission_count` start at 1, so the call needs no counter commit of its own
   * (`FinishTurn.unmadeModelCall` takes it back if the call is never made).
   */
  reserveModelCall?: boolean;
}

/** The end of a turn written with its final answer (`commitAssistantMessage`'s `end`): the turn is `completed`. */
export interface AnswerEnd {
  planUnfinishedStepCount: number | null;
}

export interface FinishTurn {
  status: Exclude<TurnStatus, 'running' | 'interrupted'>;
  errorCode?: string | null;
  errorMessage?: string | null;
  planUnfinishedStepCount: number | null;
  /**
   * The logical model call a fact reserved (`beginTurn`'s `reserveModelCall`, `commitToolResult`'s
   * `reserveModelCall`) that the turn ended without making (a cancel, a failure before the call):
   * the end takes its submission back and lowers `model_call_count` to the call before it, so the
   * counters say what happened. Null or absent: nothing to take back.
   */
  unmadeModelCall?: number | null;
}

export interface TraceSpanRecord {
  id: string;
  traceId: string;
  sessionId: string;
  turnId: string | null;
  parentSpanId: string | null;
  kind: 'model_call' | 'tool_call' | 'compaction';
  name: string;
  status: string;
  providerCallId: string | null;
  requestedToolName: string | null;
  resolvedToolName: string | null;
  attemptCount: number | null;
  inputTokens: number | null;
  outputTokens: number | null;
  responseMessageId: string | null;
  permissionWaitMs: number | null;
  startedAt: string;
  endedAt: string | null;
  errorCode: string | null;
  errorMessage: string | null;
  attributes: Record<string, unknown>;
}

/** One payload slot of a span as stored: the body, and whether it was cut to a preview (reference §11.1). */
export interface TraceSpanPayloadRecord {
  spanId: string;
  slot: 'request' | 'system_context' | 'tool_definitions' | 'response';
  body: unknown;
  truncated: boolean;
  originalByteSize: number | null;
}

export type CompactionKind = 'manual' | 'threshold' | 'overflow' | 'rewind';

/** The frozen runtime state of a checkpoint (reference §3.6); camelCase in the database. */
export interface CompactionRuntimeState {
  schemaVersion: number;
  editedPaths: string[];
  extensions: Record<string, { schemaVersion: number; value: unknown }>;
  warnings: Array<{ contributor: string; message: string }>;
}

export interface CheckpointRecord {
  id: string;
  sessionId: string;
  sequence: number;
  kind: CompactionKind;
  /** Fact boundary: the last message sequence the summary covers. */
  throughMessageSequence: number;
  /** Install boundary: raw messages after it follow the summary in the conversation. */
  replacedThroughMessageSequence: number;
  sourceMessageCount: number;
  checkpointFormatVersion: number;
  summaryFormatVersion: number;
  lastUserMessageId: string | null;
  lastUserMessageSequence: number | null;
  resolvedModelName: string;
  summary: string;
  runtimeState: CompactionRuntimeState;
  runtimeReminderFormatVersion: number;
  runtimeReminder: string;
  triggerTurnId: string | null;
  parentCompactionId: string | null;
  inputTokens: number | null;
  outputTokens: number | null;
  createdAt: string;
}

export interface NewCheckpoint {
  id: string;
  sessionId: string;
  kind: CompactionKind;
  sourceMessageCount: number;
  lastUserMessageId: string;
  resolvedModelName: string;
  summary: string;
  runtimeState: CompactionRuntimeState;
  runtimeReminder: string;
  triggerTurnId: string | null;
  /** Rewind only: the checkpoint rewound to; its fact boundary is reused. */
  parentCompactionId: string | null;
  inputTokens: number | null;
  outputTokens: number | null;
}

export interface TranscriptPage {
  compactionId: string;
  throughMessageSequence: number;
  messages: StoredMessage[];
  hasMore: boolean;
  nextAfterSequence: number | null;
}

export interface LoadedSession {
  session: SessionRecord;
  /**
   * The model-visible raw messages in sequence order: every message without a checkpoint, or the
   * messages after the latest checkpoint's install boundary.
   */
  messages: StoredMessage[];
  /** The latest checkpoint and the raw user message it replays, if the session was ever compacted. */
  checkpoint: CheckpointRecord | null;
  replayMessage: StoredMessage | null;
  /** client_request_id → turn id of every accepted turn (StartTurn idempotency). */
  acceptedRequests: Array<{ clientRequestId: string; turnId: string }>;
  plans: TurnPlanRecord[];
  tokenTotals: TokenUsage;
  lastTurn: TurnRecord | null;
}

export interface UndeliveredChildTurn {
  childSessionId: string;
  taskName: string;
  turnId: string;
  status: Exclude<TurnStatus, 'running'>;
  errorCode: string | null;
  errorMessage: string | null;
  /** Text of the turn's last assistant message ('' when none). */
  finalText: string;
}

export interface ReconciliationReport {
  deletedChildren: string[];
  undelivered: UndeliveredChildTurn[];
}

export type { CorrectionReport } from './correction-report.js';

/** The startup purge of expired trace payloads (reference §9.4). */
export interface TracePurgeReport {
  /** `trace_span_payloads` rows of expired, unannotated spans deleted. */
  mappings: number;
  /** `trace_payloads` bodies no mapping referenced any more, swept in the same transaction. */
  bodies: number;
}

export interface TraceWriteReport {
  written: number;
  failed: number;
}

/** The storage port. Implementations: `pgliteStorage` and `postgresStorage` (same SQL). */
export interface SessionStorage {
  readonly kind: 'postgres' | 'pglite';
  /**
   * Absolute paths of this store on the local file system (a PGlite data directory). `createCore`
   * hands them to the permission policy, which lets no tool read or write them.
   */
  readonly protectedPaths?: readonly string[];
  migrate(): Promise<MigrationReport>;
  /** Session leases (issue 15), when the store supports several processes; `createCore` uses them. */
  readonly leases?: SessionLeaseStore;
  /** Makes every write of a session's facts conditional on `fence`'s lease tokens (issue 15). */
  attachFence?(fence: WriteFence): void;
  detachFence?(fence: WriteFence): void;
  /** Startup correction (seed 000 §10): one transaction, `process_restart`. */
  markRunningInterrupted(): Promise<CorrectionReport>;
  /**
   * Startup purge (reference §9.4), after the correction and before the trace recorder starts: in
   * one transaction, deletes the payload mappings of spans started longer ago than the retention
   * period whose trace carries no annotation, then the bodies that only those mappings referenced.
   */
  purgeExpiredTracePayloads(): Promise<TracePurgeReport>;

  createSession(input: NewSession): Promise<SessionRecord>;
  /**
   * `createSession` with the new session's lease taken for `lease.ownerId` (token 1) in the same
   * statement: one round trip and one commit where creating and then acquiring took two (issue 14
   * point 2). A new session has no turn or span for the lease's startup correction to close.
   */
  createLeasedSession(input: NewSession, lease: NewSessionLease): Promise<{ session: SessionRecord; lease: { token: number; expiresAt: string } }>;
  getSession(sessionId: string): Promise<SessionRecord | null>;
  /** Newest first; `withTurns` leaves out sessions that never started a turn. */
  listSessions(options?: { limit?: number; includeChildren?: boolean; withTurns?: boolean }): Promise<SessionRecord[]>;
  deleteSession(sessionId: string): Promise<boolean>;
  setPermissionMode(sessionId: string, mode: PermissionMode): Promise<void>;
  /** The host's own settings stored with a session (a JSON object the runtime never reads); null when none or no session. */
  getClientSettings(sessionId: string): Promise<Record<string, unknown> | null>;
  /** Replaces the host's settings of a session; false when there is no such session. */
  setClientSettings(sessionId: string, settings: Record<string, unknown>): Promise<boolean>;
  loadSession(sessionId: string): Promise<LoadedSession | null>;

  /** Turn row + its user messages + sessions.last_turn_at, in one transaction (reference §9.3). */
  beginTurn(input: BeginTurn): Promise<StoredMessage[]>;
  /** Before the provider call: model_call_count = GREATEST(...), model_submission_count + 1. */
  recordModelCallStart(turnId: string, modelCallIndex: number): Promise<void>;
  /**
   * Assistant message + token totals + tool_call_count, in one transaction. With `end` (a final
   * answer the Turn knows ends the turn), the turn becomes `completed` in the same statement, as
   * `finishTurn` would write it, and no `finishTurn` follows.
   */
  commitAssistantMessage(turnId: string, message: NewMessage, usage: TokenUsage, toolCallCount: number, end?: AnswerEnd): Promise<StoredMessage>;
  /**
   * One tool result, in its own transaction. `reserveModelCall` (a logical call index) also writes
   * that call's counters as `recordModelCallStart` would, in the same statement.
   */
  commitToolResult(turnId: string, message: NewMessage, reserveModelCall?: number): Promise<StoredMessage>;
  /** The plan row and its success tool result, in one transaction (reference §6.6). */
  commitPlanUpdate(
    turnId: string,
    plan: { explanation: string | null; steps: PlanStep[]; updatedAt: string },
    message: NewMessage,
  ): Promise<StoredMessage>;
  /** Contextual messages (mailbox, steering, world state) with `ON CONFLICT (id) DO NOTHING`. */
  appendTurnMessages(turnId: string, messages: NewMessage[]): Promise<StoredMessage[]>;
  /** End of turn; returns false when the turn was no longer running. */
  finishTurn(turnId: string, outcome: FinishTurn): Promise<boolean>;
  /**
   * Closes one turn of this process whose end was never recorded, if it is still `running`: the
   * turn becomes `interrupted` and its running spans `outcome_unknown`, in one transaction. Returns
   * false when there was no such running row (its begin never committed, or its end is written).
   */
  interruptTurn(turnId: string, reason: { errorCode: string; errorMessage: string }): Promise<boolean>;

  writeTraceSignals(signals: readonly TraceSignal[]): Promise<TraceWriteReport>;

  /** Writes a checkpoint under the session lock after the checks of reference §3.8; returns the row. */
  insertCheckpoint(input: NewCheckpoint): Promise<CheckpointRecord>;
  getCheckpoint(compactionId: string): Promise<CheckpointRecord | null>;
  listCheckpoints(sessionId: string): Promise<CheckpointRecord[]>;
  /** Moves the prune watermark forward only (GREATEST); returns the stored value. */
  advancePruneWatermark(sessionId: string, throughSequence: number): Promise<number>;
  /** Raw messages covered by a checkpoint (reference §3.10), never past its fact boundary. */
  readTranscript(sessionId: string, query: { compactionId?: string; afterSequence?: number; limit?: number }): Promise<TranscriptPage>;

  /** Direct children of a session (sub-agents), oldest first. */
  listChildSessions(parentSessionId: string): Promise<SessionRecord[]>;
  /**
   * Reference §5.8, in one transaction locking the parent: deletes children without any turn (but
   * never those in `keep`: children whose first turn is accepted and still being written) and
   * returns the terminal child turns whose agent message id is not among the parent's messages.
   */
  reconcileChildren(
    parentSessionId: string,
    messageIdOf: (childSessionId: string, turnId: string, status: TurnStatus) => string,
    keep?: readonly string[],
  ): Promise<ReconciliationReport>;

  /** Skill enable state by name (reference §7.7): no row or `false` means enabled. */
  listSkillStatus(): Promise<Array<{ name: string; disabled: boolean }>>;
  setSkillDisabled(name: string, disabled: boolean): Promise<void>;

  getTurn(turnId: string): Promise<TurnRecord | null>;
  /** The text of the turn's last assistant message ('' when none): a completed turn's `finalText` (reference §9.3). */
  getTurnFinalText(turnId: string): Promise<string>;
  listTurns(sessionId: string): Promise<TurnRecord[]>;
  listMessages(sessionId: string, options?: { afterSequence?: number; limit?: number }): Promise<StoredMessage[]>;
  listTraceSpans(filter: { turnId?: string; sessionId?: string }): Promise<TraceSpanRecord[]>;
  /** The stored payloads (request, system context, tool definitions, response) of these spans. */
  listTraceSpanPayloads(spanIds: readonly string[]): Promise<TraceSpanPayloadRecord[]>;
  loadSessionTurnPlans(sessionId: string): Promise<TurnPlanRecord[]>;

  close(): Promise<void>;
}
