/**
 * @module core
 * The composition root: storage, model, tools and clock become the actors of every session.
 * `createCore` migrates and runs the startup correction before it accepts a single turn.
 *
 * The loaded sessions live in `core/session-registry.ts`, the sub-agent host in
 * `core/agent-host.ts`, the skills API in `core/skills.ts` and the options in `core/options.ts`.
 */
import { Subject, type Observable } from 'rxjs';
import { agentControlTools } from './services/agents/control.js';
import { EXPLORER_SYSTEM_PROMPT, EXPLORER_TOOL_NAMES } from './services/agents/explorer.js';
import { MailboxSignal } from './services/agents/signal.js';
import { InputError } from './errors.js';
import { sessionMachine } from './machines/session/machine.js';
import { cancelGraceDelays, DEFAULT_TOOL_CANCEL_GRACE_MS } from './machines/tool-call/cancel-grace.js';
import { toolCallMachine } from './machines/tool-call/machine.js';
import { turnMachine } from './machines/turn/machine.js';
import { hostTurnEffects } from './machines/turn/effects.js';
import type { TurnLimits } from './machines/session/ports.js';
import { requireId } from './protocol/command-input.js';
import type { SandboxStatus, SessionStatus } from './protocol/snapshot.js';
import type { SessionUpdateEnvelope } from './protocol/updates.js';
import type { SessionHandle } from './session-handle.js';
import { randomIds, systemClock } from './services/clock.js';
import { buildSystemContext } from './services/context/assemble.js';
import { updatePlanControlTool } from './services/plan/update-plan.js';
import { requestUserInputControlTool } from './services/user-input/request-user-input.js';
import { CommandError } from './errors.js';
import type { RuntimeServices } from './services/runtime.js';
import { createToolCallActors } from './services/tool-call-actors.js';
import { OpenSpans } from './services/trace/open-spans.js';
import { withSpanSink } from './services/trace/sink.js';
import { OtelSpanSink } from './services/telemetry/otel.js';
import type { AnyTool } from './services/tools/define.js';
import { Toolset } from './services/tools/registry.js';
import { isToolSource } from './services/tools/source.js';
import { QueueTraceRecorder, guardRecorder, type TraceRecorder, type TraceStats } from './services/trace/recorder.js';
import { createTurnActors } from './services/turn-actors.js';
import { finishCrashedTurnActor } from './services/crashed-turn.js';
import { Compactor, DEFAULT_COMPACTION_OPTIONS } from './services/compaction/compaction.js';
import { conversationHistoryTool } from './services/context/conversation-history.js';
import { homedir } from 'node:os';
import type { SkillDetail, SkillSummary, SkillWarning } from './services/skills/discovery.js';
import { resolveSkillRoot } from './services/skills/root.js';
import { join } from 'node:path';
import type { CorrectionReport, SessionRecord, SessionStorage, TracePurgeReport } from './storage/storage.js';
import type { MigrationReport } from './storage/migrate.js';
import { LeaseKeeper, resolveOwnership, type LeaseStats } from './services/ownership/lease-keeper.js';
import { SubAgents } from './core/agent-host.js';
import type { CoreOptions, CreateSessionOptions } from './core/options.js';
import { SessionRegistry } from './core/session-registry.js';
import { SkillService } from './core/skills.js';

export type { CoreOptions, CreateSessionOptions } from './core/options.js';

export const DEFAULT_SYSTEM_PROMPT = [
  'You are a careful software agent working in the user\'s project directory.',
  'Use the tools you are given to inspect and change the project; explain briefly what you did.',
  'When a tool call is refused, do not try to work around the refusal; tell the user what you need.',
].join('\n');

export const DEFAULT_LIMITS: TurnLimits = { maxModelCalls: 20, doomLoopThreshold: 3 };

export interface Core {
  readonly storage: SessionStorage;
  /** Updates of every loaded session. Read-only. */
  readonly updates$: Observable<SessionUpdateEnvelope>;
  readonly startup: { migrations: MigrationReport; correction: CorrectionReport; tracePurge: TracePurgeReport };
  /** This core's session ownership (owner id, lease settings, lease statement counts), or null when off. */
  readonly ownership: { ownerId: string; leaseMs: number; scanIntervalMs: number; stats(): LeaseStats; heldSessions(): number } | null;
  createSession(options?: CreateSessionOptions): Promise<SessionHandle>;
  /** Loads a stored session (or returns the loaded one); `session_not_found` if it does not exist. */
  loadSession(sessionId: string): Promise<SessionHandle>;
  /** The loaded handle, if any, without touching storage. */
  session(sessionId: string): SessionHandle | undefined;
  /** Root sessions, newest first; `withTurns` leaves out those that never started a turn. */
  listSessions(options?: { limit?: number; withTurns?: boolean }): Promise<SessionRecord[]>;
  /** The sub-agent sessions of a root (hidden from `listSessions`). */
  listChildSessions(parentSessionId: string): Promise<SessionRecord[]>;
  /** Every discovered skill (enabled and disabled) and every load warning, scanned now. */
  listSkills(): Promise<{ skills: SkillSummary[]; warnings: SkillWarning[] }>;
  /** Shows or hides a skill from the model by name; stored first, then applied to later turns. */
  setSkillDisabled(name: string, disabled: boolean): Promise<{ skills: SkillSummary[]; warnings: SkillWarning[] }>;
  /** One skill's detail; only `<root>/<name>/SKILL.md` paths are accepted (`invalid_request`). */
  readSkill(path: string): Promise<SkillDetail>;
  /** The configured skill root (hard-protected from writes by the permission policy), or null. */
  readonly skillRoot: string | null;
  deleteSession(sessionId: string): Promise<boolean>;
  status(sessionId: string): SessionStatus;
  traceStats(): TraceStats;
  flushTrace(timeoutMs?: number): ReturnType<TraceRecorder['flush']>;
  /** Stops every session (running turns end `actor_stopped`), flushes the trace, closes storage. */
  shutdown(): Promise<void>;
}


const APP_VERSION = '0.1.0';

/**
 * Creates a runtime: migrates, corrects what a previous process left running, then accepts turns.
 *
 * @example
 * const core = await createCore({ storage: pgliteStorage(), model: scriptedModel([{ text: 'hi' }]) });
 * const session = await core.createSession({ workingDirectory: process.cwd() });
 */
export async function createCore(options: CoreOptions): Promise<Core> {
  const skillRoot = resolveSkillRoot({
    ...(options.skills?.root !== undefined ? { root: options.skills.root } : {}),
    ...(options.protectedSkillRoots ? { protectedRoots: options.protectedSkillRoots } : {}),
    home: process.env.HOME,
  });
  const storage = options.storage;
  // The tool surfaces first: a name collision (configuration_invalid) is thrown before anything is
  // migrated or started.
  // Issue 16.3: the model is offered the tools the host registered plus the control tools it turned
  // on, each by its own option; none is on by default.
  const rootTools = [...(options.tools ?? [])];
  if (options.conversationHistory === true) rootTools.push(conversationHistoryTool(storage));
  const agentOptions = typeof options.agents === 'object' ? options.agents : {};
  const agentsEnabled = options.agents === true || typeof options.agents === 'object';
  const maxActiveAgentTurns = agentOptions.maxActiveTurns || undefined;
  const rootToolset = new Toolset(rootTools, [
    ...(options.plan === true ? [updatePlanControlTool] : []),
    ...(options.userInput ? [requestUserInputControlTool] : []),
    ...(agentsEnabled ? agentControlTools(maxActiveAgentTurns) : []),
  ]);
  const agentPrompt = options.systemPrompt ?? DEFAULT_SYSTEM_PROMPT;
  const systemContext = buildSystemContext(agentPrompt, rootToolset.systemPromptRules);
  const explorerTools =
    agentOptions.explorerTools ??
    (options.tools ?? []).filter((t): t is AnyTool => !isToolSource(t) && (EXPLORER_TOOL_NAMES as readonly string[]).includes(t.name));
  const explorerToolset = new Toolset(explorerTools, []);
  const explorerSystemContext = buildSystemContext(EXPLORER_SYSTEM_PROMPT, '');
  // Before any session can run a tool: the store is never a path a tool may touch.
  options.protectRuntimePaths?.(storage.protectedPaths ?? []);
  const migrations = await storage.migrate();
  const keeper = ownershipKeeper(options, storage, (sessionId) => registry.get(sessionId)?.handle.loseOwnership());
  // From here every write of a session's facts lands only under this core's lease of the session.
  if (keeper) storage.attachFence!(keeper);
  // Seed 000 §10: before any turn is accepted. With ownership, only turns no live process owns
  // (lease expired, free or missing) are corrected: another process's running turn is its own.
  const correction = keeper ? await keeper.startupCorrection() : await storage.markRunningInterrupted();
  keeper?.start();
  // Reference §9.4: then expired trace payloads, before the recorder starts; a failure fails startup.
  const tracePurge = await storage.purgeExpiredTracePayloads();

  const clock = options.clock ?? systemClock;
  const ids = options.ids ?? randomIds;
  const stored = guardRecorder(
    options.trace && 'record' in options.trace ? options.trace : new QueueTraceRecorder(storage, options.trace ?? {}),
  );
  // OpenTelemetry reads the very signals the stored trace gets (one seam, so they cannot disagree).
  const telemetry = options.telemetry ? new OtelSpanSink(options.telemetry) : null;
  const trace = telemetry ? withSpanSink(stored, telemetry, telemetry.fail) : stored;
  const limits: TurnLimits = { ...DEFAULT_LIMITS, ...options.limits };
  const mailbox = new MailboxSignal(options.timers);
  const openworkHome = options.openworkHome ?? join(homedir(), '.openwork');
  const skills = await SkillService.load(storage, skillRoot, options.resolveSkills, ids);
  const sandbox: SandboxStatus = options.sandbox ?? { available: false, kind: 'none', detail: 'no sandboxed tools are registered' };
  const global = new Subject<SessionUpdateEnvelope>();
  // The turn's own span starts and ends with its `turn_started` and `turn_finished` updates.
  if (telemetry) global.subscribe((envelope) => telemetry.update(envelope));
  const onActorError =
    options.onActorError ??
    ((sessionId: string, error: unknown) => {
      console.error(`openwork-core: session ${sessionId} actor failed`, error);
    });
  const agents = new SubAgents({ storage, ids, clock, mailbox, keeper, enabled: agentsEnabled, maxActiveTurns: maxActiveAgentTurns, registry: () => registry });

  const services: RuntimeServices = {
    storage,
    trace,
    spans: new OpenSpans(trace, clock),
    clock,
    ids,
    appVersion: options.appVersion ?? APP_VERSION,
    spillDir: join(openworkHome, 'spill'),
    mailbox,
    agentControl: (sessionId) => agents.control(sessionId),
    toolResultSpillRoot: options.toolResultSpillRoot ?? join(openworkHome, 'spill'),
    ...(keeper ? { confirmOwnership: (sessionId: string) => keeper.confirm(sessionId) } : {}),
    session(sessionId) {
      const entry = registry.get(sessionId);
      if (!entry) throw new CommandError('actor_stopped', `session ${sessionId} is not loaded`);
      return entry.services;
    },
  };

  // The Turn validates, authorises, runs and records a call that needs nobody with one of these
  // (`runToolCall`, a slot of its effects actor); the tool-call machine gets the ones of a call that waits (issue 14 point 3).
  const { runToolCall, ...waitingCallActors } = createToolCallActors(services);
  // The cancel grace is an `after` delay of both charts that run a tool (machines/tool-call/cancel-grace.ts).
  const delays = cancelGraceDelays(options.toolCancelGraceMs ?? DEFAULT_TOOL_CANCEL_GRACE_MS);
  const toolCallLogic = toolCallMachine.provide({ actors: waitingCallActors, delays });
  const { beforeInstall, ...compactionOptions } = options.compaction || {};
  const compactor = new Compactor(services, { ...DEFAULT_COMPACTION_OPTIONS, ...compactionOptions }, beforeInstall ? { beforeInstall } : {});
  const { callModel, ...turnActors } = createTurnActors(services, compactor);
  const turnLogic = turnMachine.provide({
    actors: {
      ...turnActors,
      // The model call and a direct call's run: slots of one actor a turn (machines/turn/effects.ts).
      turnEffects: hostTurnEffects({ callModel, runToolCall }),
      recordToolResult: waitingCallActors.recordToolResult,
      toolCall: toolCallLogic,
    },
    delays,
  });
  // Children run the very same Session logic; theirs has no `childSession`, so depth stays at one.
  // A Turn actor that fails has its end written by the Session with the Turn's own `finishTurn`.
  const finishCrashedTurn = finishCrashedTurnActor(services.spans, turnActors.finishTurn);
  const childLogic = sessionMachine.provide({ actors: { turn: turnLogic, finishCrashedTurn } });
  const sessionLogic = sessionMachine.provide({ actors: { turn: turnLogic, childSession: childLogic as never, finishCrashedTurn } });

  const registry: SessionRegistry = new SessionRegistry({
    options,
    services,
    keeper,
    sessionLogic,
    compactor,
    global,
    clock,
    ids,
    sandbox,
    rootToolset,
    explorerToolset,
    agentPrompt,
    systemContext,
    explorerSystemContext,
    limits,
    openworkHome,
    skills,
    agents,
    onActorError,
  });

  return {
    storage,
    updates$: global.asObservable(),
    startup: { migrations, correction, tracePurge },
    ownership: keeper
      ? {
          ownerId: keeper.ownerId,
          leaseMs: keeper.settings.leaseMs,
          scanIntervalMs: keeper.settings.scanIntervalMs,
          stats: () => keeper.stats(),
          heldSessions: () => keeper.held,
        }
      : null,

    createSession: (opts) => registry.createSession(opts),

    loadSession: registry.loadSession,

    session(sessionId) {
      return registry.get(sessionId)?.handle;
    },

    listSessions(opts) {
      return storage.listSessions(opts);
    },

    skillRoot,

    listSkills: skills.list,

    setSkillDisabled: (name, disabled) => skills.setDisabled(name, disabled),

    readSkill: (path) => skills.read(path),

    async deleteSession(sessionId) {
      requireId('sessionId', sessionId);
      // Children first: their actors stop, then the root's; the database cascades the rows.
      for (const child of await storage.listChildSessions(sessionId)) await registry.get(child.id)?.handle.shutdown();
      await registry.get(sessionId)?.handle.shutdown();
      agents.controls.delete(sessionId);
      return storage.deleteSession(sessionId);
    },

    async listChildSessions(parentSessionId) {
      requireId('parentSessionId', parentSessionId);
      return storage.listChildSessions(parentSessionId);
    },

    status(sessionId) {
      return registry.get(sessionId)?.handle.status() ?? { type: 'not_loaded' };
    },

    traceStats: () => trace.stats(),
    flushTrace: (timeoutMs) => trace.flush(timeoutMs),

    async shutdown() {
      if (registry.closed) return;
      registry.closed = true;
      keeper?.beginShutdown();
      const entries = registry.entries();
      await Promise.all(entries.filter((e) => e.handle.info.parentSessionId !== null).map((e) => e.handle.shutdown()));
      await Promise.all(entries.filter((e) => e.handle.info.parentSessionId === null).map((e) => e.handle.shutdown()));
      telemetry?.close();
      if (keeper) {
        // Sessions have stopped writing: their leases go now, so another process need not wait for expiry.
        await keeper.stop();
        await keeper.releaseAll().catch(() => undefined);
        storage.detachFence?.(keeper);
      }
      await trace.close();
      global.complete();
      if (options.closeStorageOnShutdown !== false) await storage.close();
    },
  };
}

/**
 * The lease keeper of this core, or null when ownership is off: on by default where the storage has
 * leases and is a server Postgres; an explicit `ownership` object turns it on for any such storage.
 */
function ownershipKeeper(options: CoreOptions, storage: SessionStorage, onLost: (sessionId: string) => void): LeaseKeeper | null {
  const wanted = options.ownership === undefined ? storage.kind === 'postgres' && storage.leases !== undefined : options.ownership !== false;
  if (!wanted) return null;
  if (!storage.leases || !storage.attachFence) {
    throw new InputError('configuration_invalid', 'ownership needs a storage with session leases (postgresStorage or pgliteStorage)');
  }
  return new LeaseKeeper(storage.leases, resolveOwnership(options.ownership || {}), onLost);
}
