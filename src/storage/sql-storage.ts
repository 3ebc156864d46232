/**
 * @module storage/sql-storage
 * The one implementation of `SessionStorage`, running the same SQL on `pg` and PGlite.
 *
 * Message and turn sequences are allocated under a row lock on the session, so that several runtime
 * processes sharing one Postgres never collide on `(session_id, sequence)`.
 */
import { createHash } from 'node:crypto';
import { CommandError, InputError, OpenworkError, StorageError, errorMessage } from '../errors.js';
import { textOf, type ContentBlock, type NewMessage, type StoredMessage } from '../protocol/content.js';
import type { PermissionMode, PermissionModeOrigin } from '../protocol/input.js';
import type { PlanStep, TurnPlanRecord } from '../protocol/plan.js';
import type { SpanData, SpanPayload, TraceSignal } from '../services/trace/signals.js';
import { fenceSql, ownershipLost, type WriteFence } from './fence.js';
import { SqlSessionLeases } from './leases.js';
import { migrate, type MigrationReport } from './migrate.js';
import { iso, isoOrNull, num, numOrNull, strOrNull, type NamedStatement, type Row, type SqlDatabase, type SqlExecutor } from './sql.js';
import {
  APPEND_TURN_MESSAGES,
  BEGIN_TURN,
  COMMIT_ASSISTANT_MESSAGE,
  COMMIT_PLAN_UPDATE,
  COMMIT_TOOL_RESULT,
  MESSAGE_COLUMNS,
  RECORD_MODEL_CALL_START,
  SESSION_OWNERSHIP,
  TURN_OWNERSHIP,
  TURN_STATUS,
  UPSERT_SPANS_END,
  UPSERT_SPANS_START,
  WRITE_TRACE_BATCH,
  type FactStatement,
} from './step-sql.js';
import type {
  BeginTurn,
  CheckpointRecord,
  CompactionRuntimeState,
  NewCheckpoint,
  ReconciliationReport,
  TranscriptPage,
  TurnStatus,
  CorrectionReport,
  FinishTurn,
  LoadedSession,
  NewSession,
  SessionRecord,
  SessionStorage,
  TokenUsage,
  TracePurgeReport,
  TraceSpanPayloadRecord,
  TraceSpanRecord,
  TraceWriteReport,
  TurnRecord,
} from './storage.js';

export interface StorageOptions {
  /** Largest stored trace payload body in bytes before it is replaced by a truncated preview. */
  tracePayloadMaxBytes?: number;
  /**
   * Days a span's payloads are kept, counted from the span's start (reference §9.4, default 30);
   * annotated traces are kept. The purge runs once, when `createCore` starts.
   */
  tracePayloadRetentionDays?: number;
  /**
   * Local paths that belong to the store (for a Postgres server on this machine: its data
   * directory); no tool may read or write them. PGlite adds its data directory itself.
   */
  protectedPaths?: readonly string[];
}

const DEFAULT_PAYLOAD_MAX_BYTES = 1024 * 1024;
const DEFAULT_PAYLOAD_RETENTION_DAYS = 30;

const SESSION_COLUMNS = `id, title, working_directory, default_model_id, status, created_at, updated_at, last_turn_at,
  parent_session_id, task_name, agent_role, spawn_span_id, sandbox_mode, sandbox_mode_origin, reasoning_effort, tool_result_pruned_through_sequence`;

const TURN_COLUMNS = `id, session_id, client_request_id, sequence, model_id, resolved_provider_id, resolved_model_name,
  app_version, status, model_call_count, model_submission_count, tool_call_count, input_tokens, output_tokens,
  cached_input_tokens, reasoning_tokens, error_code, error_message, started_at, ended_at, plan_unfinished_step_count`;


function sessionFromRow(r: Row): SessionRecord {
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
    sandboxMode: r.sandbox_mode as PermissionMode,
    sandboxModeOrigin: r.sandbox_mode_origin as PermissionModeOrigin,
    reasoningEffort: strOrNull(r.reasoning_effort),
    toolResultPrunedThroughSequence: numOrNull(r.tool_result_pruned_through_sequence),
  };
}

function turnFromRow(r: Row): TurnRecord {
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

function messageFromRow(r: Row): StoredMessage {
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

const CHECKPOINT_COLUMNS = `id, session_id, sequence, kind, through_message_sequence, replaced_through_message_sequence,
  source_message_count, checkpoint_format_version, summary_format_version, last_user_message_id, last_user_message_sequence,
  resolved_model_name, summary, runtime_state, runtime_reminder_format_version, runtime_reminder, trigger_turn_id,
  parent_compaction_id, input_tokens, output_tokens, created_at`;

function checkpointFromRow(r: Row): CheckpointRecord {
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

function spanFromRow(r: Row): TraceSpanRecord {
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

/** One span as a row of the JSON recordset of the trace statements (`step-sql.ts`). */
function spanRow(s: SpanData): Record<string, unknown> {
  return {
    id: s.id,
    trace_id: s.traceId,
    session_id: s.sessionId,
    turn_id: s.turnId,
    parent_span_id: s.parentSpanId,
    kind: s.kind,
    name: s.name,
    status: s.status,
    model_id: s.modelId ?? null,
    resolved_model_name: s.resolvedModelName ?? null,
    provider_request_id: s.providerRequestId ?? null,
    provider_call_id: s.providerCallId ?? null,
    requested_tool_name: s.requestedToolName ?? null,
    resolved_tool_name: s.resolvedToolName ?? null,
    attempt_count: s.attemptCount ?? null,
    input_tokens: s.inputTokens ?? null,
    output_tokens: s.outputTokens ?? null,
    cached_input_tokens: s.cachedInputTokens ?? null,
    reasoning_tokens: s.reasoningTokens ?? null,
    response_message_id: s.responseMessageId ?? null,
    permission_wait_ms: s.permissionWaitMs ?? null,
    started_at: s.startedAt,
    ended_at: s.endedAt ?? null,
    error_code: s.errorCode?.slice(0, 256) ?? null,
    error_message: s.errorMessage?.slice(0, 512) ?? null,
    attributes: s.attributes,
  };
}

/** JSON with object keys sorted, so that equal content hashes equally (reference §11.1). */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      return Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    }
    return v;
  });
}

function sqlStateOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/** How often a fact statement runs again after losing a sequence race (see `step-sql.ts`). */
const SEQUENCE_RACE_ATTEMPTS = 8;

/**
 * True for the one failure a fact statement runs again on: its `MAX + 1` sequence, read from a
 * snapshot taken before it waited for the session lock, was taken by the writer it waited for.
 */
function lostSequenceRace(error: unknown): boolean {
  if (sqlStateOf(error) !== '23505') return false;
  const constraint = (error as { constraint?: unknown }).constraint;
  const text = typeof constraint === 'string' ? constraint : errorMessage(error);
  return text.includes('messages_session_sequence') || text.includes('turns_session_sequence');
}

/** One message as a row of the JSON recordset of `step-sql.ts` (`ord` from 1). */
function messageRecord(message: NewMessage, index: number): Record<string, unknown> {
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
function messageParams(message: NewMessage): unknown[] {
  return [
    message.id,
    message.role,
    JSON.stringify(message.content),
    message.kind,
    message.providerCallId ?? null,
    message.toolName ?? null,
  ];
}

export class SqlSessionStorage implements SessionStorage {
  private database: SqlDatabase | undefined;
  private readonly payloadMaxBytes: number;
  private readonly payloadRetentionDays: number;
  readonly protectedPaths: readonly string[];

  constructor(
    private readonly open: () => SqlDatabase,
    options: StorageOptions = {},
    private readonly openLeaseDb?: () => SqlDatabase,
  ) {
    this.payloadMaxBytes = Math.max(2, options.tracePayloadMaxBytes ?? DEFAULT_PAYLOAD_MAX_BYTES);
    const retention = options.tracePayloadRetentionDays ?? DEFAULT_PAYLOAD_RETENTION_DAYS;
    if (typeof retention !== 'number' || !Number.isFinite(retention) || retention <= 0) {
      throw new InputError('configuration_invalid', `tracePayloadRetentionDays must be a positive number of days, got ${String(retention)}`);
    }
    this.payloadRetentionDays = retention;
    this.protectedPaths = Object.freeze([...(options.protectedPaths ?? [])]);
  }

  get kind(): 'postgres' | 'pglite' {
    return this.db.kind;
  }

  /** Session leases on this database (issue 15): acquisition, renewal, release, takeover. */
  readonly leases = new SqlSessionLeases(() => this.leaseDb);

  private leaseDatabase: SqlDatabase | undefined;

  /**
   * Lease statements run on their own connection where the adapter offers one: a renewal queued
   * behind a busy pool could let a live core's leases expire.
   */
  private get leaseDb(): SqlDatabase {
    if (!this.openLeaseDb) return this.db;
    this.leaseDatabase ??= this.openLeaseDb();
    return this.leaseDatabase;
  }

  /** The fences of the cores writing through this storage object (usually one; none without ownership). */
  private readonly fences = new Set<WriteFence>();

  /**
   * Makes every write of a session's facts conditional on `fence`'s lease tokens (issue 15). Several
   * cores may share one storage object: a session's write is fenced by the core holding its token.
   */
  attachFence(fence: WriteFence): void {
    this.fences.add(fence);
  }

  detachFence(fence: WriteFence): void {
    this.fences.delete(fence);
  }

  /**
   * The fence parameters of a session-keyed write: [owners, token] of the fence with the newest token
   * for the session; both null when no fence ever leased it (a core without ownership writes it).
   */
  private fenceOf(sessionId: string): [string[] | null, number | null] {
    let best: [string[], number] | null = null;
    for (const fence of this.fences) {
      const token = fence.tokenOf(sessionId);
      if (token !== undefined && (!best || token > best[1])) best = [[fence.ownerId], token];
    }
    return best ?? [null, null];
  }

  /** The owners parameter of a turn-keyed write (the token is the turn's own `lease_token`). */
  private get fenceOwners(): string[] | null {
    return this.fences.size === 0 ? null : [...this.fences].map((f) => f.ownerId);
  }

  private refuse(sessionId: string, token: number | null): CommandError {
    for (const fence of this.fences) fence.refused(sessionId, token);
    return ownershipLost(sessionId);
  }

  /**
   * After a fenced single-statement write changed no row: whether the fence refused it (then
   * `ownership_lost` is thrown) or the row simply was not in the state the write expects.
   */
  private async explainTurnMiss(turnId: string): Promise<void> {
    if (this.fences.size === 0) return;
    const { rows } = await this.db.query<{ session_id: string; lease_token: unknown; owned: boolean }>(
      `SELECT t.session_id, t.lease_token, ${fenceSql({ session: 't.session_id', token: 't.lease_token', owners: '$2' })} AS owned FROM turns t WHERE t.id = $1`,
      [turnId, this.fenceOwners],
    );
    if (rows[0] && !rows[0].owned) throw this.refuse(rows[0].session_id, numOrNull(rows[0].lease_token));
  }

  /** The database handle, opened on first use. */
  get db(): SqlDatabase {
    this.database ??= this.open();
    return this.database;
  }

  private async run<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (error) {
      if (error instanceof OpenworkError) throw error;
      const sqlState = sqlStateOf(error);
      throw new StorageError(`${what} failed: ${errorMessage(error)}`, { cause: error, ...(sqlState ? { sqlState } : {}) });
    }
  }

  async migrate(): Promise<MigrationReport> {
    return migrate(this.db);
  }

  markRunningInterrupted(): Promise<CorrectionReport> {
    return this.run('startup correction', () =>
      this.db.transaction(async (tx) => {
        const turns = await tx.query(
          `UPDATE turns SET status = 'interrupted', ended_at = GREATEST(now(), started_at),
             error_code = COALESCE(error_code, 'process_restart'),
             error_message = COALESCE(error_message, 'the process ended while the turn was running'),
             updated_at = now()
           WHERE status = 'running'`,
        );
        const spans = await tx.query(
          `UPDATE trace_spans SET status = 'outcome_unknown', ended_at = GREATEST(now(), started_at),
             error_code = COALESCE(error_code, 'process_restart')
           WHERE status = 'running'`,
        );
        return { turns: turns.rowCount, spans: spans.rowCount };
      }),
    );
  }

  purgeExpiredTracePayloads(): Promise<TracePurgeReport> {
    return this.run('trace payload purge', () =>
      this.db.transaction(async (tx) => {
        // Expiry by the span's start; a trace with any annotation (on the trace or one of its spans) is kept.
        const { rows } = await tx.query<{ payload_hash: string }>(
          `DELETE FROM trace_span_payloads m USING trace_spans s
           WHERE s.id = m.span_id
             AND s.started_at < now() - $1::double precision * interval '1 day'
             AND NOT EXISTS (SELECT 1 FROM trace_annotations a WHERE a.trace_id = s.trace_id)
           RETURNING m.payload_hash`,
          [this.payloadRetentionDays],
        );
        const candidates = [...new Set(rows.map((r) => r.payload_hash))];
        if (candidates.length === 0) return { mappings: 0, bodies: 0 };
        // Candidates only (reference §9.5): a full NOT EXISTS scan could take a body whose mapping is being written.
        const swept = await tx.query(
          `DELETE FROM trace_payloads p WHERE p.hash = ANY($1::text[])
           AND NOT EXISTS (SELECT 1 FROM trace_span_payloads m WHERE m.payload_hash = p.hash)`,
          [candidates],
        );
        for (const hash of candidates) this.knownPayloads.delete(hash);
        return { mappings: rows.length, bodies: swept.rowCount };
      }),
    );
  }

  createSession(input: NewSession): Promise<SessionRecord> {
    return this.run('create session', async () => {
      const { rows } = await this.db.query(
        `INSERT INTO sessions (id, title, working_directory, default_model_id, sandbox_mode, reasoning_effort,
           parent_session_id, task_name, agent_role, spawn_span_id, sandbox_mode_origin)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         RETURNING ${SESSION_COLUMNS}`,
        [
          input.id,
          input.title ?? null,
          input.workingDirectory,
          input.defaultModelId ?? null,
          input.sandboxMode ?? 'auto',
          input.reasoningEffort ?? null,
          input.parentSessionId ?? null,
          input.taskName ?? null,
          input.agentRole ?? null,
          input.spawnSpanId ?? null,
          // A sub-agent's mode is a snapshot of its parent's (reference §4.14).
          input.parentSessionId ? 'inherited' : 'session_default',
        ],
      );
      return sessionFromRow(rows[0]!);
    });
  }

  getSession(sessionId: string): Promise<SessionRecord | null> {
    return this.run('get session', async () => {
      const { rows } = await this.db.query(`SELECT ${SESSION_COLUMNS} FROM sessions WHERE id = $1`, [sessionId]);
      return rows[0] ? sessionFromRow(rows[0]) : null;
    });
  }

  listSessions(options: { limit?: number; includeChildren?: boolean; withTurns?: boolean } = {}): Promise<SessionRecord[]> {
    return this.run('list sessions', async () => {
      const { rows } = await this.db.query(
        `SELECT ${SESSION_COLUMNS} FROM sessions
         WHERE ($1::boolean OR parent_session_id IS NULL) AND (NOT $3::boolean OR last_turn_at IS NOT NULL)
         ORDER BY updated_at DESC, id LIMIT $2`,
        [options.includeChildren ?? false, options.limit ?? 100, options.withTurns ?? false],
      );
      return rows.map(sessionFromRow);
    });
  }

  deleteSession(sessionId: string): Promise<boolean> {
    return this.run('delete session', () =>
      this.db.transaction(async (tx) => {
        const owners = this.fenceOwners;
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

  setSandboxMode(sessionId: string, mode: PermissionMode): Promise<void> {
    return this.run('set sandbox mode', async () => {
      const [owner, token] = this.fenceOf(sessionId);
      const result = await this.db.query(
        `UPDATE sessions SET sandbox_mode = $2, sandbox_mode_origin = 'user_toggle', updated_at = now()
         WHERE id = $1 AND ${fenceSql({ session: 'id', token: '$4::bigint', owners: '$3' })}`,
        [sessionId, mode, owner, token],
      );
      if (result.rowCount === 0 && owner !== null && (await this.getSession(sessionId))) throw this.refuse(sessionId, token);
    });
  }

  getClientSettings(sessionId: string): Promise<Record<string, unknown> | null> {
    return this.run('get client settings', async () => {
      const { rows } = await this.db.query(`SELECT client_settings FROM sessions WHERE id = $1`, [sessionId]);
      const value = rows[0]?.client_settings;
      return value && typeof value === 'object' ? (value as Record<string, unknown>) : null;
    });
  }

  setClientSettings(sessionId: string, settings: Record<string, unknown>): Promise<boolean> {
    return this.run('set client settings', async () => {
      const [owner, token] = this.fenceOf(sessionId);
      const result = await this.db.query(
        `UPDATE sessions SET client_settings = $2::jsonb WHERE id = $1 AND ${fenceSql({ session: 'id', token: '$4::bigint', owners: '$3' })}`,
        [sessionId, JSON.stringify(settings), owner, token],
      );
      if (result.rowCount === 0 && owner !== null && (await this.getSession(sessionId))) throw this.refuse(sessionId, token);
      return result.rowCount > 0;
    });
  }

  loadSession(sessionId: string): Promise<LoadedSession | null> {
    return this.run('load session', async () => {
      const session = await this.getSession(sessionId);
      if (!session) return null;
      const checkpointRows = await this.db.query(
        `SELECT ${CHECKPOINT_COLUMNS} FROM conversation_compactions WHERE session_id = $1 ORDER BY sequence DESC LIMIT 1`,
        [sessionId],
      );
      const checkpoint = checkpointRows.rows[0] ? checkpointFromRow(checkpointRows.rows[0]) : null;
      const [messages, accepted, plans, totals, last, replay] = await Promise.all([
        this.db.query(`SELECT ${MESSAGE_COLUMNS} FROM messages WHERE session_id = $1 AND sequence > $2 ORDER BY sequence`, [
          sessionId,
          checkpoint?.replacedThroughMessageSequence ?? 0,
        ]),
        this.db.query<{ client_request_id: string; id: string }>(
          'SELECT client_request_id, id FROM turns WHERE session_id = $1 ORDER BY sequence',
          [sessionId],
        ),
        this.loadSessionTurnPlans(sessionId),
        this.db.query(
          `SELECT COALESCE(SUM(input_tokens), 0) AS input, COALESCE(SUM(output_tokens), 0) AS output,
             COALESCE(SUM(cached_input_tokens), 0) AS cached, COALESCE(SUM(reasoning_tokens), 0) AS reasoning
           FROM turns WHERE session_id = $1`,
          [sessionId],
        ),
        this.db.query(`SELECT ${TURN_COLUMNS} FROM turns WHERE session_id = $1 ORDER BY sequence DESC LIMIT 1`, [sessionId]),
        checkpoint?.lastUserMessageId
          ? this.db.query(`SELECT ${MESSAGE_COLUMNS} FROM messages WHERE id = $1`, [checkpoint.lastUserMessageId])
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
   */
  private async lockSession(tx: SqlExecutor, sessionId: string): Promise<number | null> {
    const [owner, token] = this.fenceOf(sessionId);
    const { rows } = await tx.query<{ id: string; owned: boolean }>(
      `SELECT id, ${fenceSql({ session: 'id', token: '$3::bigint', owners: '$2' })} AS owned FROM sessions WHERE id = $1 FOR NO KEY UPDATE`,
      [sessionId, owner, token],
    );
    if (!rows[0]) throw new StorageError(`session ${sessionId} does not exist`);
    if (!rows[0].owned) throw this.refuse(sessionId, token);
    return token;
  }

  /**
   * Runs one fact statement (see `step-sql.ts`), again with a fresh snapshot when it lost a
   * sequence race to a writer it waited for; the statement is atomic, so a failed run wrote nothing.
   */
  private async retrying(stmt: NamedStatement, params: readonly unknown[]): Promise<Row[]> {
    for (let attempt = 1; ; attempt += 1) {
      try {
        return (await this.db.query(stmt, params)).rows;
      } catch (error) {
        if (attempt >= SEQUENCE_RACE_ATTEMPTS || !lostSequenceRace(error)) throw error;
      }
    }
  }

  /**
   * A turn-keyed fact statement: its fenced text, with the owner ids as the last parameter, when a
   * fence is attached (issue 15), so the lease check rides in the statement's `locked` CTE.
   */
  private fact(stmt: FactStatement, params: readonly unknown[]): Promise<Row[]> {
    const owners = this.fenceOwners;
    return owners === null ? this.retrying(stmt.plain, params) : this.retrying(stmt.fenced, [...params, owners]);
  }

  /**
   * Why a turn-keyed fact statement wrote nothing, on this failure path only (one more round trip):
   * the fence refused it (`ownership_lost`, checked first: a turn a takeover corrected is
   * `interrupted`, but what its stale owner hears is why), the turn does not exist, or its status.
   */
  private async turnStatus(turnId: string): Promise<string> {
    const owners = this.fenceOwners;
    if (owners === null) {
      const { rows } = await this.db.query<{ status: string }>(TURN_STATUS, [turnId]);
      if (!rows[0]) throw new StorageError(`turn ${turnId} does not exist`);
      return rows[0].status;
    }
    const { rows } = await this.db.query<{ session_id: string; status: string; lease_token: unknown; owned: boolean }>(TURN_OWNERSHIP, [turnId, owners]);
    const row = rows[0];
    if (!row) throw new StorageError(`turn ${turnId} does not exist`);
    if (!row.owned) throw this.refuse(row.session_id, numOrNull(row.lease_token));
    return row.status;
  }

  /**
   * A fact statement wrote nothing because its turn was not running: says why, as the old
   * `lockTurn` did (one more round trip, on this failure path only).
   */
  private async notRunning(turnId: string): Promise<never> {
    throw new StorageError(`turn ${turnId} is ${await this.turnStatus(turnId)}, not running`);
  }

  /** One message of a running turn, through one of the single-message fact statements. */
  private async commitOne(turnId: string, stmt: FactStatement, message: NewMessage, extra: readonly unknown[] = []): Promise<StoredMessage> {
    const rows = await this.fact(stmt, [turnId, ...messageParams(message), ...extra]);
    if (!rows[0]) return this.notRunning(turnId);
    return messageFromRow(rows[0]);
  }

  beginTurn(input: BeginTurn): Promise<StoredMessage[]> {
    return this.run('begin turn', async () => {
      const [owners, token] = this.fenceOf(input.sessionId);
      const params = [
        input.turnId,
        input.sessionId,
        input.clientRequestId,
        input.modelId,
        input.resolvedProviderId,
        input.resolvedModelName,
        input.appVersion,
        JSON.stringify(input.messages.map(messageRecord)),
      ];
      // Session-keyed: fenced by this core's token for the session, which becomes the turn's own.
      if (owners === null) {
        const rows = await this.retrying(BEGIN_TURN.plain, params);
        if (rows.length < input.messages.length || (rows.length === 0 && !(await this.getSession(input.sessionId)))) {
          throw new StorageError(`session ${input.sessionId} does not exist`);
        }
        return rows.map(messageFromRow);
      }
      const rows = await this.retrying(BEGIN_TURN.fenced, [...params, owners, token]);
      if (rows.length < input.messages.length || rows.length === 0) {
        const { rows: why } = await this.db.query<{ found: boolean; began: boolean; owned: boolean }>(SESSION_OWNERSHIP, [
          input.sessionId,
          owners,
          token,
          input.turnId,
        ]);
        const w = why[0]!;
        if (!w.found) throw new StorageError(`session ${input.sessionId} does not exist`);
        if (!w.owned) throw this.refuse(input.sessionId, token);
        if (!w.began || rows.length < input.messages.length) throw new StorageError(`turn ${input.turnId} was not stored`);
      }
      return rows.map(messageFromRow);
    });
  }

  recordModelCallStart(turnId: string, modelCallIndex: number): Promise<void> {
    return this.run('record model call', async () => {
      const rows = await this.fact(RECORD_MODEL_CALL_START, [turnId, modelCallIndex]);
      if (num(rows[0]?.counted ?? 0) === 0) {
        await this.turnStatus(turnId);
        throw new StorageError(`turn ${turnId} is not running`);
      }
    });
  }

  commitAssistantMessage(turnId: string, message: NewMessage, usage: TokenUsage, toolCallCount: number): Promise<StoredMessage> {
    return this.run('commit assistant message', () =>
      this.commitOne(turnId, COMMIT_ASSISTANT_MESSAGE, message, [
        usage.inputTokens,
        usage.outputTokens,
        usage.cachedInputTokens,
        usage.reasoningTokens,
        toolCallCount,
      ]),
    );
  }

  commitToolResult(turnId: string, message: NewMessage): Promise<StoredMessage> {
    return this.run('commit tool result', () => this.commitOne(turnId, COMMIT_TOOL_RESULT, message));
  }

  commitPlanUpdate(
    turnId: string,
    plan: { explanation: string | null; steps: PlanStep[]; updatedAt: string },
    message: NewMessage,
  ): Promise<StoredMessage> {
    const results = message.content.filter((b) => b.type === 'tool_result');
    if (results.length !== 1 || message.content.length !== 1) {
      return Promise.reject(new StorageError('a plan update must carry exactly one tool result block'));
    }
    return this.run('commit plan update', () =>
      this.commitOne(turnId, COMMIT_PLAN_UPDATE, message, [plan.explanation, JSON.stringify(plan.steps), plan.updatedAt]),
    );
  }

  appendTurnMessages(turnId: string, messages: NewMessage[]): Promise<StoredMessage[]> {
    if (messages.length === 0) return Promise.resolve([]);
    return this.run('append messages', async () => {
      const rows = await this.fact(APPEND_TURN_MESSAGES, [turnId, JSON.stringify(messages.map(messageRecord))]);
      // No row: every message was already stored, or the turn is not running; only the second is an error.
      // The fence refusing it is a third; `turnStatus` tells all three apart.
      if (rows.length === 0) {
        const status = await this.turnStatus(turnId);
        if (status !== 'running') throw new StorageError(`turn ${turnId} is ${status}, not running`);
      }
      return rows.map(messageFromRow);
    });
  }

  finishTurn(turnId: string, outcome: FinishTurn): Promise<boolean> {
    return this.run('finish turn', async () => {
      const result = await this.db.query(
        `UPDATE turns t SET status = $2, ended_at = GREATEST(now(), started_at), error_code = $3, error_message = $4,
           plan_unfinished_step_count = $5, updated_at = now()
         WHERE id = $1 AND status = 'running' AND ${fenceSql({ session: 't.session_id', token: 't.lease_token', owners: '$6' })}`,
        [turnId, outcome.status, outcome.errorCode ?? null, outcome.errorMessage ?? null, outcome.planUnfinishedStepCount, this.fenceOwners],
      );
      if (result.rowCount === 0) await this.explainTurnMiss(turnId);
      return result.rowCount > 0;
    });
  }

  interruptTurn(turnId: string, reason: { errorCode: string; errorMessage: string }): Promise<boolean> {
    return this.run('interrupt turn', () =>
      this.db.transaction(async (tx) => {
        const turns = await tx.query(
          `UPDATE turns t SET status = 'interrupted', ended_at = GREATEST(now(), started_at), error_code = $2,
             error_message = $3, updated_at = now()
           WHERE id = $1 AND status = 'running' AND ${fenceSql({ session: 't.session_id', token: 't.lease_token', owners: '$4' })}`,
          [turnId, reason.errorCode, reason.errorMessage, this.fenceOwners],
        );
        if (turns.rowCount === 0) {
          await this.explainTurnMiss(turnId);
          return false;
        }
        await tx.query(
          `UPDATE trace_spans SET status = 'outcome_unknown', ended_at = GREATEST(now(), started_at),
             error_code = COALESCE(error_code, $2)
           WHERE turn_id = $1 AND status = 'running'`,
          [turnId, reason.errorCode],
        );
        return true;
      }),
    );
  }

  async writeTraceSignals(signals: readonly TraceSignal[]): Promise<TraceWriteReport> {
    if (signals.length === 0) return { written: 0, failed: 0 };
    try {
      return await this.writeTraceBatch(signals);
    } catch {
      // One bad signal (a span whose turn is gone, say) must not lose the rest: retry one by one.
      return this.run('write trace', () =>
        this.db.transaction(async (tx) => {
          // The trace is lossy by design (reference §11.1): its commits never wait for a WAL flush.
          await tx.query(`SET LOCAL synchronous_commit = off`);
          return this.writeTraceOneByOne(tx, signals);
        }),
      );
    }
  }

  /**
   * The fast path: signals coalesced per span, then the whole batch as ONE statement (spans started,
   * spans ended, payload bodies, mappings: `WRITE_TRACE_BATCH`), one round trip and one implicit
   * transaction that does not wait for its WAL flush.
   */
  private async writeTraceBatch(signals: readonly TraceSignal[]): Promise<TraceWriteReport> {
    const ended = new Map<string, SpanData>();
    const started = new Map<string, SpanData>();
    const payloads = new Map<string, { spanId: string; payload: SpanPayload }>();
    for (const signal of signals) {
      if (signal.type === 'span_ended') {
        ended.set(signal.span.id, { ...signal.span, attributes: { ...(started.get(signal.span.id)?.attributes ?? ended.get(signal.span.id)?.attributes ?? {}), ...signal.span.attributes } });
        started.delete(signal.span.id);
      } else if (!ended.has(signal.span.id) && !started.has(signal.span.id)) {
        started.set(signal.span.id, signal.span);
      }
      for (const payload of signal.payloads ?? []) {
        const key = `${signal.span.id}\u0000${payload.slot}`;
        if (!payloads.has(key)) payloads.set(key, { spanId: signal.span.id, payload });
      }
    }
    const bodies = new Map<string, { body: string; size: number }>();
    const mappings: Array<Record<string, unknown>> = [];
    for (const { spanId, payload } of payloads.values()) {
      const prepared = this.preparePayload(payload.body);
      bodies.set(prepared.hash, { body: prepared.body, size: Buffer.byteLength(prepared.body) });
      mappings.push({
        span_id: spanId,
        slot: payload.slot,
        payload_hash: prepared.hash,
        truncated: prepared.truncated,
        original_byte_size: prepared.truncated ? prepared.originalSize : null,
      });
    }
    // Bodies this process already stored are not sent again (an LRU of hashes); a body swept in the
    // meantime only sends the batch to the one-by-one path, which writes it.
    const bodyRows = [...bodies.entries()].filter(([hash]) => !this.knownPayloads.has(hash)).map(([hash, b]) => ({ hash, body: b.body, byte_size: b.size }));
    await this.db.query(WRITE_TRACE_BATCH, [
      JSON.stringify([...started.values()].map(spanRow)),
      JSON.stringify([...ended.values()].map(spanRow)),
      JSON.stringify(bodyRows),
      JSON.stringify(mappings),
    ]);
    for (const hash of bodies.keys()) this.rememberPayload(hash);
    return { written: signals.length, failed: 0 };
  }

  private async writeTraceOneByOne(tx: SqlExecutor, signals: readonly TraceSignal[]): Promise<TraceWriteReport> {
    let written = 0;
    let failed = 0;
    for (const [i, signal] of signals.entries()) {
      // A savepoint per signal: one bad span never loses the rest of the batch.
      await tx.query(`SAVEPOINT s${i}`);
      try {
        await this.upsertSpans(tx, [signal.span], signal.type === 'span_ended');
        await tx.query(`RELEASE SAVEPOINT s${i}`);
        written += 1;
      } catch {
        await tx.query(`ROLLBACK TO SAVEPOINT s${i}`);
        failed += 1;
        continue;
      }
      for (const [j, payload] of (signal.payloads ?? []).entries()) {
        await tx.query(`SAVEPOINT p${i}_${j}`);
        try {
          await this.writePayload(tx, signal.span.id, payload);
          await tx.query(`RELEASE SAVEPOINT p${i}_${j}`);
        } catch {
          await tx.query(`ROLLBACK TO SAVEPOINT p${i}_${j}`);
          failed += 1;
        }
      }
    }
    return { written, failed };
  }

  /** One statement whatever the number of spans: the rows travel as one JSON parameter. */
  private async upsertSpans(tx: SqlExecutor, spans: readonly SpanData[], isEnd: boolean): Promise<void> {
    await tx.query(isEnd ? UPSERT_SPANS_END : UPSERT_SPANS_START, [JSON.stringify(spans.map(spanRow))]);
  }

  private readonly knownPayloads = new Set<string>();

  private rememberPayload(hash: string): void {
    this.knownPayloads.delete(hash);
    this.knownPayloads.add(hash);
    if (this.knownPayloads.size > 4096) this.knownPayloads.delete(this.knownPayloads.values().next().value!);
  }

  private readonly payloadCache = new WeakMap<object, { body: string; hash: string; truncated: boolean; originalSize: number }>();

  /** Canonical body, hash and truncation of one payload; remembered for shared objects (tool surfaces, system parts). */
  private preparePayload(value: unknown): { body: string; hash: string; truncated: boolean; originalSize: number } {
    const cacheable = value !== null && typeof value === 'object';
    const hit = cacheable ? this.payloadCache.get(value) : undefined;
    if (hit) return hit;
    const full = canonicalJson(value ?? null);
    const originalSize = Buffer.byteLength(full);
    let body = full;
    let truncated = false;
    if (originalSize > this.payloadMaxBytes) {
      truncated = true;
      let preview = full.slice(0, Math.max(0, this.payloadMaxBytes - 32));
      body = canonicalJson({ truncatedPreview: preview });
      while (Buffer.byteLength(body) > this.payloadMaxBytes && preview.length > 0) {
        preview = preview.slice(0, Math.floor(preview.length * 0.9));
        body = canonicalJson({ truncatedPreview: preview });
      }
    }
    const prepared = { body, hash: createHash('sha256').update(body).digest('hex'), truncated, originalSize };
    if (cacheable) this.payloadCache.set(value, prepared);
    return prepared;
  }

  private async writePayload(tx: SqlExecutor, spanId: string, payload: SpanPayload): Promise<void> {
    const prepared = this.preparePayload(payload.body);
    await tx.query(
      `INSERT INTO trace_payloads (hash, body, byte_size) VALUES ($1, $2::jsonb, $3) ON CONFLICT (hash) DO NOTHING`,
      [prepared.hash, prepared.body, Buffer.byteLength(prepared.body)],
    );
    await tx.query(
      `INSERT INTO trace_span_payloads (span_id, slot, payload_hash, truncated, original_byte_size)
       VALUES ($1, $2, $3, $4, $5) ON CONFLICT (span_id, slot) DO NOTHING`,
      [spanId, payload.slot, prepared.hash, prepared.truncated, prepared.truncated ? prepared.originalSize : null],
    );
  }

  insertCheckpoint(input: NewCheckpoint): Promise<CheckpointRecord> {
    return this.run('write checkpoint', () =>
      this.db.transaction(async (tx) => {
        await this.lockSession(tx, input.sessionId);
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

  getCheckpoint(compactionId: string): Promise<CheckpointRecord | null> {
    return this.run('get checkpoint', async () => {
      const { rows } = await this.db.query(`SELECT ${CHECKPOINT_COLUMNS} FROM conversation_compactions WHERE id = $1`, [compactionId]);
      return rows[0] ? checkpointFromRow(rows[0]) : null;
    });
  }

  listCheckpoints(sessionId: string): Promise<CheckpointRecord[]> {
    return this.run('list checkpoints', async () => {
      const { rows } = await this.db.query(`SELECT ${CHECKPOINT_COLUMNS} FROM conversation_compactions WHERE session_id = $1 ORDER BY sequence`, [sessionId]);
      return rows.map(checkpointFromRow);
    });
  }

  advancePruneWatermark(sessionId: string, throughSequence: number): Promise<number> {
    return this.run('advance prune watermark', async () => {
      const { rows } = await this.db.query(
        `UPDATE sessions SET tool_result_pruned_through_sequence = GREATEST(COALESCE(tool_result_pruned_through_sequence, 0), $2)
         WHERE id = $1 AND ${fenceSql({ session: 'id', token: '$4::bigint', owners: '$3' })} RETURNING tool_result_pruned_through_sequence`,
        [sessionId, throughSequence, ...this.fenceOf(sessionId)],
      );
      if (!rows[0] && this.fenceOf(sessionId)[1] !== null && (await this.getSession(sessionId))) throw this.refuse(sessionId, this.fenceOf(sessionId)[1]);
      if (!rows[0]) throw new StorageError(`session ${sessionId} does not exist`);
      return num(rows[0].tool_result_pruned_through_sequence);
    });
  }

  async readTranscript(sessionId: string, query: { compactionId?: string; afterSequence?: number; limit?: number } = {}): Promise<TranscriptPage> {
    const limit = query.limit ?? 20;
    const after = query.afterSequence ?? 0;
    if (!Number.isInteger(limit) || limit < 1 || limit > 50) throw new InputError('invalid_request', 'limit must be an integer from 1 to 50');
    if (!Number.isInteger(after) || after < 0) throw new InputError('invalid_request', 'afterSequence must be a non-negative integer');
    const checkpoint = await this.run('read transcript', async () => {
      const { rows } = query.compactionId
        ? await this.db.query(`SELECT ${CHECKPOINT_COLUMNS} FROM conversation_compactions WHERE id = $1 AND session_id = $2`, [query.compactionId, sessionId])
        : await this.db.query(`SELECT ${CHECKPOINT_COLUMNS} FROM conversation_compactions WHERE session_id = $1 ORDER BY sequence DESC LIMIT 1`, [sessionId]);
      return rows[0] ? checkpointFromRow(rows[0]) : null;
    });
    if (!checkpoint) {
      throw new CommandError(
        'checkpoint_not_found',
        query.compactionId ? `checkpoint ${query.compactionId} does not exist in this session` : 'this session has no compaction checkpoint',
      );
    }
    return this.run('read transcript', async () => {
      const { rows } = await this.db.query(
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

  listChildSessions(parentSessionId: string): Promise<SessionRecord[]> {
    return this.run('list child sessions', async () => {
      const { rows } = await this.db.query(`SELECT ${SESSION_COLUMNS} FROM sessions WHERE parent_session_id = $1 ORDER BY created_at, id`, [parentSessionId]);
      return rows.map(sessionFromRow);
    });
  }

  reconcileChildren(
    parentSessionId: string,
    messageIdOf: (childSessionId: string, turnId: string, status: TurnStatus) => string,
    keep: readonly string[] = [],
  ): Promise<ReconciliationReport> {
    return this.run('reconcile sub-agents', () =>
      this.db.transaction(async (tx) => {
        await this.lockSession(tx, parentSessionId);
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

  listSkillStatus(): Promise<Array<{ name: string; disabled: boolean }>> {
    return this.run('list skill status', async () => {
      const { rows } = await this.db.query<{ name: string; disabled: boolean }>('SELECT name, disabled FROM skill_status ORDER BY name');
      return rows.map((r) => ({ name: r.name, disabled: Boolean(r.disabled) }));
    });
  }

  setSkillDisabled(name: string, disabled: boolean): Promise<void> {
    return this.run('set skill status', async () => {
      await this.db.query(
        'INSERT INTO skill_status (name, disabled) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET disabled = EXCLUDED.disabled',
        [name, disabled],
      );
    });
  }

  getTurn(turnId: string): Promise<TurnRecord | null> {
    return this.run('get turn', async () => {
      const { rows } = await this.db.query(`SELECT ${TURN_COLUMNS} FROM turns WHERE id = $1`, [turnId]);
      return rows[0] ? turnFromRow(rows[0]) : null;
    });
  }

  getTurnFinalText(turnId: string): Promise<string> {
    return this.run('get final text', async () => {
      const { rows } = await this.db.query(
        `SELECT content FROM messages WHERE turn_id = $1 AND role = 'assistant' ORDER BY sequence DESC LIMIT 1`,
        [turnId],
      );
      const content = rows[0]?.content;
      return Array.isArray(content) ? textOf(content as ContentBlock[]) : '';
    });
  }

  listTurns(sessionId: string): Promise<TurnRecord[]> {
    return this.run('list turns', async () => {
      const { rows } = await this.db.query(`SELECT ${TURN_COLUMNS} FROM turns WHERE session_id = $1 ORDER BY sequence`, [sessionId]);
      return rows.map(turnFromRow);
    });
  }

  listMessages(sessionId: string, options: { afterSequence?: number; limit?: number } = {}): Promise<StoredMessage[]> {
    return this.run('list messages', async () => {
      const { rows } = await this.db.query(
        `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE session_id = $1 AND sequence > $2 ORDER BY sequence LIMIT $3`,
        [sessionId, options.afterSequence ?? 0, options.limit ?? 1_000_000],
      );
      return rows.map(messageFromRow);
    });
  }

  listTraceSpans(filter: { turnId?: string; sessionId?: string }): Promise<TraceSpanRecord[]> {
    return this.run('list trace spans', async () => {
      const { rows } = filter.turnId
        ? await this.db.query('SELECT * FROM trace_spans WHERE turn_id = $1 ORDER BY started_at, id', [filter.turnId])
        : await this.db.query('SELECT * FROM trace_spans WHERE session_id = $1 ORDER BY started_at, id', [filter.sessionId]);
      return rows.map(spanFromRow);
    });
  }

  listTraceSpanPayloads(spanIds: readonly string[]): Promise<TraceSpanPayloadRecord[]> {
    return this.run('list trace payloads', async () => {
      if (spanIds.length === 0) return [];
      const { rows } = await this.db.query(
        `SELECT m.span_id, m.slot, m.truncated, m.original_byte_size, p.body
         FROM trace_span_payloads m JOIN trace_payloads p ON p.hash = m.payload_hash
         WHERE m.span_id = ANY($1::text[]) ORDER BY m.span_id, m.slot`,
        [[...spanIds]],
      );
      return rows.map((r) => ({
        spanId: String(r.span_id),
        slot: r.slot as TraceSpanPayloadRecord['slot'],
        body: r.body as unknown,
        truncated: Boolean(r.truncated),
        originalByteSize: numOrNull(r.original_byte_size),
      }));
    });
  }

  loadSessionTurnPlans(sessionId: string): Promise<TurnPlanRecord[]> {
    return this.run('load plans', async () => {
      const { rows } = await this.db.query(
        `SELECT p.turn_id, p.explanation, p.steps, p.updated_at FROM turn_plans p JOIN turns t ON t.id = p.turn_id
         WHERE t.session_id = $1 ORDER BY t.sequence`,
        [sessionId],
      );
      return rows.map((r) => ({
        turnId: String(r.turn_id),
        explanation: strOrNull(r.explanation),
        steps: r.steps as PlanStep[],
        updatedAt: iso(r.updated_at),
      }));
    });
  }

  async close(): Promise<void> {
    const db = this.database;
    this.database = undefined;
    const leaseDb = this.leaseDatabase;
    this.leaseDatabase = undefined;
    if (leaseDb) await leaseDb.close();
    if (db) await db.close();
  }
}

/**
 * With ownership on, a session (or a sub-agent session under it, which the delete cascades to) that
 * another live core owns is not deleted under it: `session_owned_elsewhere`, as `loadSession`
 * answers. The session rows and their lease rows are locked first, so no core can take a lease
 * between this check and the delete (an acquisition waits, then finds the session gone).
 */
async function refuseDeleteOwnedElsewhere(tx: SqlExecutor, sessionId: string, owners: string[]): Promise<void> {
  const tree = await tx.query<{ id: string }>(
    `WITH RECURSIVE tree(id) AS (
       SELECT id FROM sessions WHERE id = $1
       UNION SELECT s.id FROM sessions s JOIN tree t ON s.parent_session_id = t.id
     )
     SELECT s.id FROM sessions s WHERE s.id IN (SELECT id FROM tree) FOR UPDATE`,
    [sessionId],
  );
  if (tree.rows.length === 0) return;
  const leases = await tx.query<{ session_id: string; owner_id: string | null; expires_at: unknown; live: boolean }>(
    `SELECT session_id, owner_id, expires_at, expires_at > now() AS live FROM session_leases
     WHERE session_id = ANY($1::text[]) ORDER BY session_id FOR UPDATE`,
    [tree.rows.map((r) => r.id)],
  );
  const held = leases.rows.find((l) => l.live && l.owner_id !== null && !owners.includes(l.owner_id));
  if (!held) return;
  const expiresAt = iso(held.expires_at);
  throw new CommandError(
    'session_owned_elsewhere',
    `session ${held.session_id} is owned by runtime ${String(held.owner_id)} until ${expiresAt}; it was not deleted`,
    { details: { sessionId: held.session_id, ownerId: String(held.owner_id), leaseExpiresAt: expiresAt } },
  );
}
