/**
 * @module core
 * The composition root: storage, model, tools and clock become the actors of every session.
 * `createCore` migrates and runs the startup correction before it accepts a single turn.
 */
import { Subject, type Observable } from 'rxjs';
import { createActor, type InspectionEvent, type Observer } from 'xstate';
import { CommandError, InputError } from './errors.js';
import { sessionMachine, type LastTerminal } from './machines/session.js';
import { toolCallMachine } from './machines/tool-call.js';
import { turnMachine } from './machines/turn.js';
import type { TurnLimits } from './machines/types.js';
import { permissionModeSchema, type PermissionMode } from './protocol/input.js';
import { textOf } from './protocol/content.js';
import type { SandboxStatus, SessionStatus } from './protocol/snapshot.js';
import type { SessionUpdateEnvelope } from './protocol/updates.js';
import { SessionHandle, outcomeOfRecord } from './session-handle.js';
import { randomIds, systemClock, type Clock, type IdGenerator } from './services/clock.js';
import { buildSystemContext } from './services/context/assemble.js';
import { ChatState } from './services/context/chat-state.js';
import type { ModelPort } from './services/model/port.js';
import { updatePlanControlTool } from './services/plan/update-plan.js';
import { toolAuthorizer, type Authorizer, type RuntimeServices, type SessionServices } from './services/runtime.js';
import { createToolCallActors } from './services/tool-call-actors.js';
import type { AnyTool } from './services/tools/define.js';
import { Toolset } from './services/tools/registry.js';
import { QueueTraceRecorder, guardRecorder, type TraceRecorder, type TraceStats } from './services/trace/recorder.js';
import { createTurnActors, type CompactionHook } from './services/turn-actors.js';
import type { CorrectionReport, LoadedSession, SessionRecord, SessionStorage } from './storage/storage.js';
import type { MigrationReport } from './storage/migrate.js';

export const DEFAULT_SYSTEM_PROMPT = [
  'You are a careful software agent working in the user\'s project directory.',
  'Use the tools you are given to inspect and change the project; explain briefly what you did.',
  'When a tool call is refused, do not try to work around the refusal; tell the user what you need.',
].join('\n');

export const DEFAULT_LIMITS: TurnLimits = { maxModelCalls: 20, doomLoopThreshold: 3 };

export interface CoreOptions {
  storage: SessionStorage;
  model: ModelPort;
  /** Registered tools of root sessions (the real file and shell tools are a separate module). */
  tools?: readonly AnyTool[];
  systemPrompt?: string;
  /** Decides per call whether a tool runs, is refused, or needs a card; defaults to each tool's own rule. */
  authorizer?: Authorizer;
  /** Any XState inspection observer; it receives the events of every actor of every session. */
  inspect?: Observer<InspectionEvent> | ((event: InspectionEvent) => void);
  clock?: Clock;
  ids?: IdGenerator;
  limits?: Partial<TurnLimits>;
  /** User text at or above this estimate answers `input_too_large` (default 32,000 tokens). */
  maxUserInputTokens?: number;
  appVersion?: string;
  /** A custom trace recorder, or options of the built-in bounded queue. */
  trace?: TraceRecorder | { capacity?: number; batchSize?: number };
  sandbox?: SandboxStatus;
  /** Automatic compaction inside a turn; without it, `compacting` is never entered. */
  compaction?: CompactionHook & { compactAtTokens: number };
  /** How long a cancelled tool may take to stop before its outcome is recorded as unknown. */
  toolCancelGraceMs?: number;
  /**
   * Where a tool result over 32,000 bytes is saved whole before it is cut (reference §11.2); pass
   * `prepareToolRuntime().spillRoot`. Without it the cut result only says how much was omitted.
   */
  toolResultSpillRoot?: string;
  /** Close the storage on `shutdown()` (default true); false when the host shares it. */
  closeStorageOnShutdown?: boolean;
  /** The model of a loaded session by its stored `default_model_id`; defaults to `model`. */
  resolveModel?: (modelId: string | null) => ModelPort | undefined;
  /** Called when an actor fails in a way the machines did not handle (a bug); defaults to console.error. */
  onActorError?: (sessionId: string, error: unknown) => void;
}

export interface CreateSessionOptions {
  workingDirectory: string;
  title?: string;
  permissionMode?: PermissionMode;
  id?: string;
  /** This session's model, when it differs from the core's default. */
  model?: ModelPort;
}

interface LoadedEntry {
  handle: SessionHandle;
  services: SessionServices;
}

export interface Core {
  readonly storage: SessionStorage;
  /** Updates of every loaded session. Read-only. */
  readonly updates$: Observable<SessionUpdateEnvelope>;
  readonly startup: { migrations: MigrationReport; correction: CorrectionReport };
  createSession(options: CreateSessionOptions): Promise<SessionHandle>;
  /** Loads a stored session (or returns the loaded one); `session_not_found` if it does not exist. */
  loadSession(sessionId: string): Promise<SessionHandle>;
  /** The loaded handle, if any, without touching storage. */
  session(sessionId: string): SessionHandle | undefined;
  listSessions(options?: { limit?: number }): Promise<SessionRecord[]>;
  deleteSession(sessionId: string): Promise<boolean>;
  status(sessionId: string): SessionStatus;
  traceStats(): TraceStats;
  flushTrace(timeoutMs?: number): ReturnType<TraceRecorder['flush']>;
  /** Stops every session (running turns end `actor_stopped`), flushes the trace, closes storage. */
  shutdown(): Promise<void>;
}

const APP_VERSION = '0.1.0';

function lastTerminalOf(loaded: LoadedSession): LastTerminal | null {
  const last = loaded.lastTurn;
  if (!last || last.status === 'running') return null;
  let finalText = '';
  if (last.status === 'completed') {
    for (let i = loaded.messages.length - 1; i >= 0; i -= 1) {
      const m = loaded.messages[i]!;
      if (m.turnId === last.id && m.role === 'assistant') {
        finalText = textOf(m.content);
        break;
      }
    }
  }
  const plan = loaded.plans.find((p) => p.turnId === last.id);
  return {
    turnId: last.id,
    clientRequestId: last.clientRequestId,
    outcome: outcomeOfRecord(last, finalText),
    plan: plan ? { explanation: plan.explanation, steps: plan.steps, updatedAt: plan.updatedAt } : null,
  };
}

/**
 * Creates a runtime: migrates, corrects what a previous process left running, then accepts turns.
 *
 * @example
 * const core = await createCore({ storage: pgliteStorage(), model: scriptedModel([{ text: 'hi' }]) });
 * const session = await core.createSession({ workingDirectory: process.cwd() });
 */
export async function createCore(options: CoreOptions): Promise<Core> {
  const storage = options.storage;
  const migrations = await storage.migrate();
  // Seed 000 §10: before any turn is accepted. Ownership would scope this when several processes share one database.
  const correction = await storage.markRunningInterrupted();

  const clock = options.clock ?? systemClock;
  const ids = options.ids ?? randomIds;
  const trace = guardRecorder(
    options.trace && 'record' in options.trace ? options.trace : new QueueTraceRecorder(storage, options.trace ?? {}),
  );
  const limits: TurnLimits = { ...DEFAULT_LIMITS, ...options.limits };
  const rootToolset = new Toolset(options.tools ?? [], [updatePlanControlTool]);
  const systemContext = buildSystemContext(options.systemPrompt ?? DEFAULT_SYSTEM_PROMPT, rootToolset.systemPromptRules);
  const sandbox: SandboxStatus = options.sandbox ?? { available: false, kind: 'none', detail: 'no sandboxed tools are registered' };
  const loaded = new Map<string, LoadedEntry>();
  const loading = new Map<string, Promise<SessionHandle>>();
  const global = new Subject<SessionUpdateEnvelope>();
  const onActorError =
    options.onActorError ??
    ((sessionId: string, error: unknown) => {
      console.error(`openwork-core: session ${sessionId} actor failed`, error);
    });

  const services: RuntimeServices = {
    storage,
    trace,
    clock,
    ids,
    appVersion: options.appVersion ?? APP_VERSION,
    toolCancelGraceMs: options.toolCancelGraceMs ?? 10_000,
    toolResultSpillRoot: options.toolResultSpillRoot ?? null,
    session(sessionId) {
      const entry = loaded.get(sessionId);
      if (!entry) throw new CommandError('actor_stopped', `session ${sessionId} is not loaded`);
      return entry.services;
    },
  };

  const toolCallLogic = toolCallMachine.provide({ actors: createToolCallActors(services) });
  const turnLogic = turnMachine.provide({
    actors: { ...createTurnActors(services, options.compaction), toolCall: toolCallLogic },
  });
  const sessionLogic = sessionMachine.provide({ actors: { turn: turnLogic } });

  let closed = false;

  function start(loadedSession: LoadedSession, model: ModelPort): SessionHandle {
    const record = loadedSession.session;
    const sessionServices: SessionServices = {
      sessionId: record.id,
      workingDirectory: record.workingDirectory,
      chat: new ChatState(loadedSession.messages),
      toolset: rootToolset,
      model,
      authorizer: options.authorizer ?? toolAuthorizer,
      nonInteractive: record.parentSessionId !== null,
    };
    const actor = createActor(sessionLogic, {
      id: `session:${record.id}`,
      systemId: 'session',
      input: {
        sessionId: record.id,
        permissionMode: record.sandboxMode,
        nonInteractive: sessionServices.nonInteractive,
        systemContext,
        limits,
        compactAtTokens: options.compaction?.compactAtTokens ?? 0,
        tokenTotals: loadedSession.tokenTotals,
        acceptedRequests: Object.fromEntries(loadedSession.acceptedRequests.map((r) => [r.clientRequestId, r.turnId])),
        lastTerminal: lastTerminalOf(loadedSession),
        reloadRequired: false,
      },
      ...(options.inspect ? { inspect: options.inspect } : {}),
    });
    const handle = new SessionHandle({
      record,
      actor,
      storage,
      clock,
      ids,
      global,
      sandbox,
      maxUserInputTokens: options.maxUserInputTokens ?? 32_000,
      onClosed: () => {
        if (loaded.get(record.id)?.handle === handle) loaded.delete(record.id);
      },
    });
    loaded.set(record.id, { handle, services: sessionServices });
    actor.subscribe({ error: (error) => onActorError(record.id, error) });
    actor.start();
    return handle;
  }

  async function loadSession(sessionId: string): Promise<SessionHandle> {
    if (closed) throw new CommandError('core_closed', 'the runtime has shut down');
    const existing = loaded.get(sessionId);
    if (existing) return existing.handle;
    const inFlight = loading.get(sessionId);
    if (inFlight) return inFlight;
    const promise = (async () => {
      const data = await storage.loadSession(sessionId);
      if (!data) throw new CommandError('session_not_found', `session ${sessionId} does not exist`);
      const model = options.resolveModel?.(data.session.defaultModelId) ?? options.model;
      return loaded.get(sessionId)?.handle ?? start(data, model);
    })();
    loading.set(sessionId, promise);
    try {
      return await promise;
    } finally {
      loading.delete(sessionId);
    }
  }

  return {
    storage,
    updates$: global.asObservable(),
    startup: { migrations, correction },

    async createSession(opts) {
      if (closed) throw new CommandError('core_closed', 'the runtime has shut down');
      if (typeof opts?.workingDirectory !== 'string' || opts.workingDirectory.trim() === '') {
        throw new InputError('invalid_request', 'workingDirectory is required');
      }
      if (opts.permissionMode !== undefined && !permissionModeSchema.safeParse(opts.permissionMode).success) {
        throw new InputError('invalid_request', `unknown permission mode ${JSON.stringify(opts.permissionMode)}`);
      }
      if (opts.title !== undefined && opts.title.trim() === '') throw new InputError('invalid_request', 'title must not be blank');
      const record = await storage.createSession({
        id: opts.id ?? ids.next('ses'),
        workingDirectory: opts.workingDirectory,
        title: opts.title ?? null,
        defaultModelId: (opts.model ?? options.model).id,
        sandboxMode: opts.permissionMode ?? 'auto',
      });
      return start({
        session: record,
        messages: [],
        acceptedRequests: [],
        plans: [],
        tokenTotals: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 },
        lastTurn: null,
      }, opts.model ?? options.model);
    },

    loadSession,

    session(sessionId) {
      return loaded.get(sessionId)?.handle;
    },

    listSessions(opts) {
      return storage.listSessions(opts);
    },

    async deleteSession(sessionId) {
      const entry = loaded.get(sessionId);
      if (entry) await entry.handle.shutdown();
      return storage.deleteSession(sessionId);
    },

    status(sessionId) {
      return loaded.get(sessionId)?.handle.status() ?? { type: 'not_loaded' };
    },

    traceStats: () => trace.stats(),
    flushTrace: (timeoutMs) => trace.flush(timeoutMs),

    async shutdown() {
      if (closed) return;
      closed = true;
      await Promise.all([...loaded.values()].map((e) => e.handle.shutdown()));
      await trace.close();
      global.complete();
      if (options.closeStorageOnShutdown !== false) await storage.close();
    },
  };
}
