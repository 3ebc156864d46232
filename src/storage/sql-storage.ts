/**
 * @module storage/sql-storage
 * The one implementation of `SessionStorage`, running the same SQL on `pg` and PGlite.
 *
 * This class owns the database handles, the write fences and the trace payload caches; each method
 * delegates to the module of its concept under `sql/` (sessions, turns, messages, plans,
 * checkpoints, sub-agents, skill status, trace store, startup correction), which share the row
 * mapping of `sql/rows.ts` and the fenced statement helpers of `sql/context.ts`.
 *
 * Message and turn sequences are allocated under a row lock on the session, so that several runtime
 * processes sharing one Postgres never collide on `(session_id, sequence)`.
 */
import { InputError } from '../errors.js';
import type { NewMessage, StoredMessage } from '../protocol/content.js';
import type { PermissionMode } from '../protocol/input.js';
import type { PlanStep, TurnPlanRecord } from '../protocol/plan.js';
import type { TraceSignal } from '../protocol/trace-signals.js';
import type { WriteFence } from './fence.js';
import { SqlSessionLeases } from './leases.js';
import { migrate, type MigrationReport } from './migrate.js';
import * as checkpoints from './sql/checkpoints.js';
import { SqlContext } from './sql/context.js';
import * as correction from './sql/correction.js';
import * as messages from './sql/messages.js';
import * as plans from './sql/plans.js';
import * as sessions from './sql/sessions.js';
import * as skillStatus from './sql/skill-status.js';
import * as subAgents from './sql/sub-agents.js';
import { SqlTraceStore } from './sql/trace-store.js';
import * as turns from './sql/turns.js';
import type { SqlDatabase } from './sql.js';
import type {
  BeginTurn,
  CheckpointRecord,
  NewCheckpoint,
  ReconciliationReport,
  TranscriptPage,
  TurnStatus,
  CorrectionReport,
  AnswerEnd,
  FinishTurn,
  LoadedSession,
  NewSession,
  NewSessionLease,
  SessionRecord,
  SessionStorage,
  TokenUsage,
  TracePurgeReport,
  TraceSpanPayloadRecord,
  TraceSpanRecord,
  TraceWriteReport,
  TurnRecord,
} from './storage.js';

export { canonicalJson } from './sql/trace-store.js';

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

export class SqlSessionStorage implements SessionStorage {
  private database: SqlDatabase | undefined;
  private readonly payloadMaxBytes: number;
  private readonly payloadRetentionDays: number;
  readonly protectedPaths: readonly string[];
  private readonly ctx: SqlContext;
  private readonly trace: SqlTraceStore;

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
    this.ctx = new SqlContext(() => this.db, this.fences);
    this.trace = new SqlTraceStore(this.ctx, this.payloadMaxBytes, this.payloadRetentionDays);
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
    this.ctx.fencesChanged();
  }

  detachFence(fence: WriteFence): void {
    this.fences.delete(fence);
    this.ctx.fencesChanged();
  }

  /** The database handle, opened on first use. */
  get db(): SqlDatabase {
    this.database ??= this.open();
    return this.database;
  }

  async migrate(): Promise<MigrationReport> {
    return migrate(this.db);
  }

  markRunningInterrupted(): Promise<CorrectionReport> {
    return correction.markRunningInterrupted(this.ctx);
  }

  purgeExpiredTracePayloads(): Promise<TracePurgeReport> {
    return this.trace.purgeExpiredTracePayloads();
  }

  createSession(input: NewSession): Promise<SessionRecord> {
    return sessions.createSession(this.ctx, input);
  }

  createLeasedSession(input: NewSession, lease: NewSessionLease): Promise<{ session: SessionRecord; lease: { token: number; expiresAt: string } }> {
    return sessions.createLeasedSession(this.ctx, input, lease);
  }

  getSession(sessionId: string): Promise<SessionRecord | null> {
    return sessions.getSession(this.ctx, sessionId);
  }

  listSessions(options: { limit?: number; includeChildren?: boolean; withTurns?: boolean } = {}): Promise<SessionRecord[]> {
    return sessions.listSessions(this.ctx, options);
  }

  deleteSession(sessionId: string): Promise<boolean> {
    return sessions.deleteSession(this.ctx, sessionId);
  }

  setPermissionMode(sessionId: string, mode: PermissionMode): Promise<void> {
    return sessions.setPermissionMode(this.ctx, sessionId, mode);
  }

  getClientSettings(sessionId: string): Promise<Record<string, unknown> | null> {
    return sessions.getClientSettings(this.ctx, sessionId);
  }

  setClientSettings(sessionId: string, settings: Record<string, unknown>): Promise<boolean> {
    return sessions.setClientSettings(this.ctx, sessionId, settings);
  }

  loadSession(sessionId: string): Promise<LoadedSession | null> {
    return sessions.loadSession(this.ctx, sessionId);
  }

  beginTurn(input: BeginTurn): Promise<StoredMessage[]> {
    return turns.beginTurn(this.ctx, input);
  }

  recordModelCallStart(turnId: string, modelCallIndex: number): Promise<void> {
    return turns.recordModelCallStart(this.ctx, turnId, modelCallIndex);
  }

  commitAssistantMessage(turnId: string, message: NewMessage, usage: TokenUsage, toolCallCount: number, end?: AnswerEnd): Promise<StoredMessage> {
    return turns.commitAssistantMessage(this.ctx, turnId, message, usage, toolCallCount, end);
  }

  commitToolResult(turnId: string, message: NewMessage, reserveModelCall?: number): Promise<StoredMessage> {
    return turns.commitToolResult(this.ctx, turnId, message, reserveModelCall);
  }

  commitPlanUpdate(
    turnId: string,
    plan: { explanation: string | null; steps: PlanStep[]; updatedAt: string },
    message: NewMessage,
  ): Promise<StoredMessage> {
    return turns.commitPlanUpdate(this.ctx, turnId, plan, message);
  }

  appendTurnMessages(turnId: string, messages: NewMessage[]): Promise<StoredMessage[]> {
    return turns.appendTurnMessages(this.ctx, turnId, messages);
  }

  finishTurn(turnId: string, outcome: FinishTurn): Promise<boolean> {
    return turns.finishTurn(this.ctx, turnId, outcome);
  }

  interruptTurn(turnId: string, reason: { errorCode: string; errorMessage: string }): Promise<boolean> {
    return turns.interruptTurn(this.ctx, turnId, reason);
  }

  writeTraceSignals(signals: readonly TraceSignal[]): Promise<TraceWriteReport> {
    return this.trace.writeTraceSignals(signals);
  }

  insertCheckpoint(input: NewCheckpoint): Promise<CheckpointRecord> {
    return checkpoints.insertCheckpoint(this.ctx, input);
  }

  getCheckpoint(compactionId: string): Promise<CheckpointRecord | null> {
    return checkpoints.getCheckpoint(this.ctx, compactionId);
  }

  listCheckpoints(sessionId: string): Promise<CheckpointRecord[]> {
    return checkpoints.listCheckpoints(this.ctx, sessionId);
  }

  advancePruneWatermark(sessionId: string, throughSequence: number): Promise<number> {
    return checkpoints.advancePruneWatermark(this.ctx, sessionId, throughSequence);
  }

  readTranscript(sessionId: string, query: { compactionId?: string; afterSequence?: number; limit?: number } = {}): Promise<TranscriptPage> {
    return checkpoints.readTranscript(this.ctx, sessionId, query);
  }

  listChildSessions(parentSessionId: string): Promise<SessionRecord[]> {
    return subAgents.listChildSessions(this.ctx, parentSessionId);
  }

  reconcileChildren(
    parentSessionId: string,
    messageIdOf: (childSessionId: string, turnId: string, status: TurnStatus) => string,
    keep: readonly string[] = [],
  ): Promise<ReconciliationReport> {
    return subAgents.reconcileChildren(this.ctx, parentSessionId, messageIdOf, keep);
  }

  listSkillStatus(): Promise<Array<{ name: string; disabled: boolean }>> {
    return skillStatus.listSkillStatus(this.ctx);
  }

  setSkillDisabled(name: string, disabled: boolean): Promise<void> {
    return skillStatus.setSkillDisabled(this.ctx, name, disabled);
  }

  getTurn(turnId: string): Promise<TurnRecord | null> {
    return turns.getTurn(this.ctx, turnId);
  }

  getTurnFinalText(turnId: string): Promise<string> {
    return turns.getTurnFinalText(this.ctx, turnId);
  }

  listTurns(sessionId: string): Promise<TurnRecord[]> {
    return turns.listTurns(this.ctx, sessionId);
  }

  listMessages(sessionId: string, options: { afterSequence?: number; limit?: number } = {}): Promise<StoredMessage[]> {
    return messages.listMessages(this.ctx, sessionId, options);
  }

  listTraceSpans(filter: { turnId?: string; sessionId?: string }): Promise<TraceSpanRecord[]> {
    return this.trace.listTraceSpans(filter);
  }

  listTraceSpanPayloads(spanIds: readonly string[]): Promise<TraceSpanPayloadRecord[]> {
    return this.trace.listTraceSpanPayloads(spanIds);
  }

  loadSessionTurnPlans(sessionId: string): Promise<TurnPlanRecord[]> {
    return plans.loadSessionTurnPlans(this.ctx, sessionId);
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
