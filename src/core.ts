/**
 * @module core
 * The composition root: storage, model, tools and clock become the actors of every session.
 * `createCore` migrates and runs the startup correction before it accepts a single turn.
 */
import { Subject, type Observable } from 'rxjs';
import { createActor, type ActorRefFrom, type InspectionEvent, type Observer } from 'xstate';
import { AgentControl, AGENT_TOOL_NAMES, agentControlTools, type AgentStatus, type SubAgentHost } from './services/agents/control.js';
import { EXPLORER_LIMITS, EXPLORER_ROLE, EXPLORER_SYSTEM_PROMPT, EXPLORER_TOOL_NAMES, subAgentMode } from './services/agents/explorer.js';
import { agentMessageId, agentMessageKindOfStatus, terminalAgentMessage } from './services/agents/mailbox.js';
import { MailboxSignal } from './services/agents/signal.js';
import { CommandError, InputError } from './errors.js';
import { sessionMachine, type LastTerminal } from './machines/session.js';
import { toolCallMachine } from './machines/tool-call.js';
import { turnMachine } from './machines/turn.js';
import type { TurnLimits } from './machines/types.js';
import { permissionModeSchema, type PermissionMode } from './protocol/input.js';
import { textOf } from './protocol/content.js';
import { requireId } from './protocol/command-input.js';
import { sessionWorkingDirectory } from './host/working-directory.js';
import { isStorableText } from './protocol/storable-text.js';
import type { SandboxStatus, SessionStatus } from './protocol/snapshot.js';
import type { SessionUpdateEnvelope } from './protocol/updates.js';
import { SessionHandle, outcomeOfRecord } from './session-handle.js';
import { randomIds, systemClock, type Clock, type IdGenerator } from './services/clock.js';
import { buildSystemContext } from './services/context/assemble.js';
import { ChatState } from './services/context/chat-state.js';
import type { ModelPort } from './services/model/port.js';
import { updatePlanControlTool } from './services/plan/update-plan.js';
import { requestUserInputControlTool } from './services/user-input/request-user-input.js';
import { toolAuthorizer, type Authorizer, type RuntimeServices, type SessionServices } from './services/runtime.js';
import { createToolCallActors } from './services/tool-call-actors.js';
import { OpenSpans } from './services/trace/open-spans.js';
import { withSpanSink } from './services/trace/sink.js';
import { OtelSpanSink, type TelemetryOptions } from './services/telemetry/otel.js';
import type { AnyTool } from './services/tools/define.js';
import { Toolset } from './services/tools/registry.js';
import { isToolSource, type ToolEntry } from './services/tools/source.js';
import { QueueTraceRecorder, guardRecorder, type TraceRecorder, type TraceStats } from './services/trace/recorder.js';
import { createTurnActors } from './services/turn-actors.js';
import { Compactor, DEFAULT_COMPACTION_OPTIONS, type CompactionHooks, type CompactionOptions } from './services/compaction/compaction.js';
import { contextLimits } from './services/context/limits.js';
import { conversationHistoryTool } from './services/context/conversation-history.js';
import type { WorldStateSources } from './services/context/world-state.js';
import { homedir } from 'node:os';
import { realpath } from 'node:fs/promises';
import { discoverSkills, type SkillDetail, type SkillSummary, type SkillWarning } from './services/skills/discovery.js';
import { renderCatalog, resolveSelectedSkills } from './services/skills/catalog.js';
import { resolveSkillRoot } from './services/skills/root.js';
import { join } from 'node:path';
import type { CorrectionReport, LoadedSession, SessionRecord, SessionStorage, TracePurgeReport } from './storage/storage.js';
import type { MigrationReport } from './storage/migrate.js';
import { LeaseKeeper, resolveOwnership, type LeaseStats, type OwnershipOptions } from './services/ownership/lease-keeper.js';

export const DEFAULT_SYSTEM_PROMPT = [
  'You are a careful software agent working in the user\'s project directory.',
  'Use the tools you are given to inspect and change the project; explain briefly what you did.',
  'When a tool call is refused, do not try to work around the refusal; tell the user what you need.',
].join('\n');

export const DEFAULT_LIMITS: TurnLimits = { maxModelCalls: 20, doomLoopThreshold: 3 };

export interface CoreOptions {
  storage: SessionStorage;
  model: ModelPort;
  /**
   * Registered tools of root sessions (the real file and shell tools are a separate module), and
   * sources of tools whose catalog may change, such as `mcpTools(...)`.
   */
  tools?: readonly ToolEntry[];
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
  /**
   * OpenTelemetry export: every span of the stored trace (model calls, tool calls, compactions),
   * under one `invoke_agent` span per turn, on the host's `Tracer`, with the GenAI semantic
   * conventions. Contents only with `captureContent: true`. A failing tracer never fails a turn.
   */
  telemetry?: TelemetryOptions;
  sandbox?: SandboxStatus;
  /**
   * Summary attempts, their time limit and the pause between them (reference §3.5: 3, 120 s, 3 s).
   * `false` turns automatic compaction off: no threshold compaction, and an explicit context
   * overflow fails the turn with `model_error` (manual compaction still works).
   */
  compaction?: false | (Partial<CompactionOptions> & CompactionHooks);
  /**
   * World State sections appended before model calls (reference §2.3): on by default; `false` turns
   * sampling off (the model then sees no project layout, AGENTS.md, skill catalog or sandbox policy).
   */
  worldState?: false | { skillsCatalog?: WorldStateSources['skillsCatalog']; renderSandboxPolicy?: WorldStateSources['renderSandboxPolicy'] };
  /**
   * Offer root sessions the `request_user_input` tool (default false): the model may ask the user
   * up to three questions, the turn waits in `waiting_user_input` (status flag
   * `waiting_on_user_input`) until the host calls `answerUserInput`, or the turn is cancelled.
   * Turn it on only in a host that shows the `user_input_requested` update to a person.
   */
  userInput?: boolean;
  /**
   * Offer root sessions the `conversation_history` tool (default false): the model may read the
   * session's raw history behind a compaction checkpoint.
   */
  conversationHistory?: boolean;
  /**
   * Offer root sessions the `update_plan` tool (default false): the model keeps a step list, shown
   * to the host as `plan_updated` and in the snapshot.
   */
  plan?: boolean;
  /**
   * Materialises explicit skill selections into `skill_instruction` messages written before the
   * user's text when a turn is accepted (reference §7.4). Without it, skill input is refused.
   */
  resolveSkills?: (inputs: Array<{ type: 'skill'; name: string; path: string }>, disabledSkillNames: string[]) => Promise<import('./protocol/content.js').NewMessage[]>;
  /** The runtime's own directory (default ~/.openwork): spill files live under `<home>/spill`. */
  openworkHome?: string;
  /**
   * Sub-agents (reference §5): with `true` or an object, root sessions get the five agent control
   * tools and may run explorer children (read-only tools, 15 model calls, accept_edits,
   * non-interactive). Off by default. Explorer tools default to the registered tools named read,
   * grep, glob, list and bash.
   */
  agents?: boolean | { maxActiveTurns?: number; explorerTools?: readonly AnyTool[] };
  /** Timers for wait_agent's timeout; injected for tests (defaults to the global timers). */
  timers?: import('./services/agents/signal.js').Timers;
  /**
   * The skill root (reference §7.2): default `$HOME/.agents/skills` (none when HOME is unset);
   * `null` turns skills off.
   */
  skills?: { root?: string | null };
  /**
   * The skill roots the authorizer hard-protects; `workspaceToolOptions` passes the tool runtime's.
   * When given, a skill root outside all of them is refused with `configuration_invalid`: the root
   * that is discovered is the root that is protected (reference §7.2, §7.5).
   */
  protectedSkillRoots?: readonly string[];
  /**
   * Receives the storage's local paths (`storage.protectedPaths`, a PGlite data directory) at
   * start-up so that the permission policy keeps every tool out of them; `workspaceToolOptions`
   * wires it to the tool runtime. A host that wires the built-in tools by hand passes
   * `(paths) => runtime.protectRuntimePaths(paths)`.
   */
  protectRuntimePaths?: (paths: readonly string[]) => void;
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
  /**
   * Session ownership for several processes on one Postgres (issue 15, README "Several processes"):
   * each loaded session is leased to this core, every write is fenced by the lease's token, expired
   * owners' running turns are taken over. On by default for `postgresStorage` (lease 5,000 ms); off
   * by default for PGlite, whose store lock already admits one process. `false` turns it off.
   */
  ownership?: false | OwnershipOptions;
}

export interface CreateSessionOptions {
  /**
   * The project the session works in (an existing absolute directory). Optional when no file tool
   * is registered: the session then runs in an empty directory of the runtime's own; with file tools
   * registered, leaving it out is `invalid_request` (see host/working-directory).
   */
  workingDirectory?: string;
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
  const skillRoot = resolveSkillRoot({
    ...(options.skills?.root !== undefined ? { root: options.skills.root } : {}),
    ...(options.protectedSkillRoots ? { protectedRoots: options.protectedSkillRoots } : {}),
    home: process.env.HOME,
  });
  const storage = options.storage;
  // Before any session can run a tool: the store is never a path a tool may touch.
  options.protectRuntimePaths?.(storage.protectedPaths ?? []);
  const migrations = await storage.migrate();
  const keeper = ownershipKeeper(options, storage, (sessionId) => loaded.get(sessionId)?.handle.loseOwnership());
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
  const agentPrompt = options.systemPrompt ?? DEFAULT_SYSTEM_PROMPT;
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
  const systemContext = buildSystemContext(agentPrompt, rootToolset.systemPromptRules);
  const explorerTools =
    agentOptions.explorerTools ??
    (options.tools ?? []).filter((t): t is AnyTool => !isToolSource(t) && (EXPLORER_TOOL_NAMES as readonly string[]).includes(t.name));
  const explorerToolset = new Toolset(explorerTools, []);
  const explorerSystemContext = buildSystemContext(EXPLORER_SYSTEM_PROMPT, '');
  const mailbox = new MailboxSignal(options.timers);
  const controls = new Map<string, AgentControl>();
  const openworkHome = options.openworkHome ?? join(homedir(), '.openwork');
  const disabledSkills = new Set((await storage.listSkillStatus()).filter((r) => r.disabled).map((r) => r.name));
  const customCatalog = options.worldState ? options.worldState.skillsCatalog : undefined;
  const listSkills = async () => {
    const scan = await discoverSkills(skillRoot, disabledSkills);
    return { skills: scan.skills.map(({ body: _body, ...summary }) => summary), warnings: [...scan.warnings, ...renderCatalog(scan.skills).warnings] };
  };
  const skillsCatalog = async (disabled: readonly string[]) => renderCatalog((await discoverSkills(skillRoot, new Set(disabled))).skills).body;
  const resolveSkills =
    options.resolveSkills ??
    ((inputs: Array<{ type: 'skill'; name: string; path: string }>, disabled: string[]) =>
      resolveSelectedSkills(skillRoot, inputs, new Set(disabled), () => (options.ids ?? randomIds).next('msg')));
  const sandbox: SandboxStatus = options.sandbox ?? { available: false, kind: 'none', detail: 'no sandboxed tools are registered' };
  const loaded = new Map<string, LoadedEntry>();
  /**
   * The loaded sub-agents of each root, so that a root's turn start looks at its own children
   * rather than scanning every loaded session (with 1,000 roots that scan ran 1,000 times per
   * 1,000 turn starts).
   */
  const loadedChildren = new Map<string, Set<string>>();
  const loading = new Map<string, Promise<SessionHandle>>();
  const global = new Subject<SessionUpdateEnvelope>();
  // The turn's own span starts and ends with its `turn_started` and `turn_finished` updates.
  if (telemetry) global.subscribe((envelope) => telemetry.update(envelope));
  const onActorError =
    options.onActorError ??
    ((sessionId: string, error: unknown) => {
      console.error(`openwork-core: session ${sessionId} actor failed`, error);
    });

  const services: RuntimeServices = {
    storage,
    trace,
    spans: new OpenSpans(trace, clock),
    clock,
    ids,
    appVersion: options.appVersion ?? APP_VERSION,
    toolCancelGraceMs: options.toolCancelGraceMs ?? 10_000,
    spillDir: join(openworkHome, 'spill'),
    mailbox,
    agentControl: (sessionId) => controls.get(sessionId) ?? null,
    toolResultSpillRoot: options.toolResultSpillRoot ?? join(openworkHome, 'spill'),
    session(sessionId) {
      const entry = loaded.get(sessionId);
      if (!entry) throw new CommandError('actor_stopped', `session ${sessionId} is not loaded`);
      return entry.services;
    },
  };

  // The Turn validates, authorises, runs and records a call that needs nobody with these same
  // actors; the tool-call machine gets the ones of a call that waits (issue 14 point 3).
  const { validateToolCall, authorizeToolCall, ...waitingCallActors } = createToolCallActors(services);
  const toolCallLogic = toolCallMachine.provide({ actors: waitingCallActors });
  const { beforeInstall, ...compactionOptions } = options.compaction || {};
  const compactor = new Compactor(services, { ...DEFAULT_COMPACTION_OPTIONS, ...compactionOptions }, beforeInstall ? { beforeInstall } : {});
  const turnLogic = turnMachine.provide({
    actors: {
      ...createTurnActors(services, compactor),
      validateToolCall,
      authorizeToolCall,
      executeTool: waitingCallActors.executeTool,
      recordToolResult: waitingCallActors.recordToolResult,
      toolCall: toolCallLogic,
    },
  });
  // Children run the very same Session logic; theirs has no `childSession`, so depth stays at one.
  const childLogic = sessionMachine.provide({ actors: { turn: turnLogic } });
  const sessionLogic = sessionMachine.provide({ actors: { turn: turnLogic, childSession: childLogic as never } });

  let closed = false;

  function start(loadedSession: LoadedSession, model: ModelPort): SessionHandle {
    const record = loadedSession.session;
    const isChild = record.parentSessionId !== null;
    const parent = isChild ? loaded.get(record.parentSessionId!) : undefined;
    if (isChild && !parent) throw new CommandError('actor_stopped', `the parent of sub-agent ${record.id} is not loaded`);
    const sessionServices: SessionServices = {
      sessionId: record.id,
      workingDirectory: record.workingDirectory,
      chat: ChatState.fromLoaded({ ...loadedSession, pruneWatermark: record.toolResultPrunedThroughSequence }),
      toolset: isChild ? explorerToolset : rootToolset,
      model,
      authorizer: options.authorizer ?? toolAuthorizer,
      nonInteractive: isChild,
      agentPrompt: isChild ? EXPLORER_SYSTEM_PROMPT : agentPrompt,
      sandbox,
      worldState:
        options.worldState === false
          ? null
          : {
              baseline: new Map(),
              skillsCatalog: customCatalog ? () => customCatalog() : skillsCatalog,
              ...(options.worldState?.renderSandboxPolicy ? { renderSandboxPolicy: options.worldState.renderSandboxPolicy } : {}),
            },
    };
    const input = {
      sessionId: record.id,
      permissionMode: record.sandboxMode,
      // Sub-agents run under a snapshot of their parent's mode; a root's mode is its stored one, a
      // toggle of the user's staying one across restarts.
      permissionModeOrigin: isChild ? ('inherited' as const) : record.sandboxModeOrigin,
      nonInteractive: sessionServices.nonInteractive,
      systemContext: isChild ? explorerSystemContext : systemContext,
      limits: isChild ? EXPLORER_LIMITS : limits,
      compactAtTokens: options.compaction === false ? 0 : (contextLimits(model)?.autoCompactTokenLimit ?? 0),
      compactionEnabled: options.compaction !== false,
      tokenTotals: loadedSession.tokenTotals,
      acceptedRequests: Object.fromEntries(loadedSession.acceptedRequests.map((r) => [r.clientRequestId, r.turnId])),
      lastTerminal: lastTerminalOf(loadedSession),
      reloadRequired: false,
    };
    // Services are registered before the actor starts: its first actions may already need them.
    const entry: LoadedEntry = { handle: undefined as unknown as SessionHandle, services: sessionServices };
    loaded.set(record.id, entry);
    if (isChild) {
      const siblings = loadedChildren.get(record.parentSessionId!) ?? new Set<string>();
      siblings.add(record.id);
      loadedChildren.set(record.parentSessionId!, siblings);
    }
    let actor: ActorRefFrom<typeof sessionMachine>;
    let stopActor: (() => void) | undefined;
    if (parent) {
      // A sub-agent is a Session actor spawned under its root's actor, with a per-agent system id.
      const parentActor = parent.handle.actorRef;
      parentActor.send({ type: 'session.spawn_child', childId: `agent:${record.id}`, systemId: `agent:${record.taskName}`, input });
      actor = parentActor.getSnapshot().children[`agent:${record.id}`] as unknown as ActorRefFrom<typeof sessionMachine>;
      stopActor = () => parentActor.send({ type: 'session.stop_child', childId: `agent:${record.id}` });
    } else {
      const root = createActor(sessionLogic, {
        id: `session:${record.id}`,
        systemId: 'session',
        input,
        ...(options.inspect ? { inspect: options.inspect } : {}),
      });
      root.subscribe({ error: (error) => onActorError(record.id, error) });
      actor = root;
    }
    const handle = new SessionHandle({
      record,
      actor,
      ...(stopActor ? { stopActor } : {}),
      compactor,
      services,
      storage,
      clock,
      ids,
      global,
      sandbox,
      maxUserInputTokens: options.maxUserInputTokens ?? 32_000,
      resolveSkills,
      disabledSkillNames: () => [...disabledSkills].sort(),
      ...(!isChild && agentsEnabled ? { beforeStartTurn: () => reconcile(record.id) } : {}),
      onClosed: () => {
        let released: Promise<void> | undefined;
        if (loaded.get(record.id)?.handle === handle) {
          loaded.delete(record.id);
          const siblings = isChild ? loadedChildren.get(record.parentSessionId!) : undefined;
          siblings?.delete(record.id);
          if (siblings?.size === 0) loadedChildren.delete(record.parentSessionId!);
          released = keeper?.release(record.id);
        }
        if (!isChild) controls.delete(record.id);
        return released;
      },
    });
    entry.handle = handle;
    if (!isChild) (actor as ReturnType<typeof createActor>).start();
    if (isChild && record.taskName) watchChild(handle, record.parentSessionId!, record.taskName);
    return handle;
  }

  /** A child delivers its own terminal outcome to its parent's mailbox and returns its slot. */
  function watchChild(handle: SessionHandle, parentId: string, taskName: string): void {
    handle.updates$.subscribe((envelope) => {
      if (envelope.update.type !== 'turn_finished' || envelope.turnId === null) return;
      controls.get(parentId)?.turnEnded(handle.sessionId);
      const parent = loaded.get(parentId)?.handle;
      if (!parent) return;
      const message = terminalAgentMessage(handle.sessionId, envelope.turnId, taskName, envelope.update.outcome);
      parent.deliverAgentMessage(message).catch((error: unknown) => {
        console.warn(`openwork-core: delivering ${message.id} to ${parentId} failed`, error);
      });
    });
  }

  /**
   * Reference §5.8, before each user turn of a root: zero-turn children go, missing outcomes are
   * re-delivered. Only when the root is idle: a start that meets a busy root is refused anyway, and
   * its turn may be spawning an explorer right now. An explorer of this process whose first turn is
   * accepted but not yet written is not a half-failed spawn, so it is kept.
   */
  async function reconcile(rootId: string): Promise<void> {
    const root = loaded.get(rootId)?.handle;
    if (!root) return;
    const snapshot = root.actorRef.getSnapshot();
    if (snapshot.status !== 'active' || snapshot.value !== 'idle') return;
    const starting = [...(loadedChildren.get(rootId) ?? [])]
      .map((id) => loaded.get(id)?.handle)
      .filter((h): h is SessionHandle => h !== undefined && h.actorRef.getSnapshot().status === 'active' && h.actorRef.getSnapshot().context.activeTurn !== null)
      .map((h) => h.sessionId);
    const report = await storage.reconcileChildren(
      rootId,
      (child, turn, status) => agentMessageId(child, turn, agentMessageKindOfStatus(status === 'running' ? 'failed' : status)),
      starting,
    );
    for (const childId of report.deletedChildren) {
      await loaded.get(childId)?.handle.shutdown();
      controls.get(rootId)?.forget(childId);
    }
    for (const turn of report.undelivered) {
      const outcome =
        turn.status === 'completed'
          ? { status: 'completed' as const, finalText: turn.finalText }
          : turn.status === 'failed'
            ? { status: 'failed' as const, code: turn.errorCode ?? 'unknown', message: turn.errorMessage ?? '' }
            : { status: turn.status };
      await root.deliverAgentMessage(terminalAgentMessage(turn.childSessionId, turn.turnId, turn.taskName, outcome));
    }
  }

  async function attachControl(handle: SessionHandle): Promise<void> {
    if (!agentsEnabled || handle.info.parentSessionId !== null || controls.has(handle.sessionId)) return;
    // The control's link to this runtime goes dead at shutdown (reference §5.2: agent_host_unavailable).
    const control = new AgentControl(handle.sessionId, () => (closed ? null : host), mailbox, maxActiveAgentTurns);
    control.restore((await storage.listChildSessions(handle.sessionId)).map((c) => ({ id: c.id, taskName: c.taskName })));
    controls.set(handle.sessionId, control);
  }

  async function childHandle(childId: string): Promise<SessionHandle> {
    const existing = loaded.get(childId)?.handle;
    if (existing) return existing;
    return loadSession(childId);
  }

  const host: SubAgentHost = {
    async spawnChild({ rootSessionId, taskName, message, spawnSpanId }, beforeStart) {
      const root = loaded.get(rootSessionId);
      if (!root) throw new CommandError('actor_stopped', `root session ${rootSessionId} is not loaded`);
      const record = await storage.createSession({
        id: ids.next('ses'),
        workingDirectory: root.services.workingDirectory,
        parentSessionId: rootSessionId,
        taskName,
        agentRole: EXPLORER_ROLE,
        spawnSpanId,
        sandboxMode: subAgentMode(root.handle.snapshot().permissionMode),
        defaultModelId: root.services.model.id,
      });
      if (keeper) await acquireLease(record.id);
      const child = start(
        { session: record, messages: [], checkpoint: null, replayMessage: null, acceptedRequests: [], plans: [], tokenTotals: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 }, lastTurn: null },
        root.services.model,
      );
      beforeStart(record.id);
      try {
        await child.startTurn({ clientRequestId: `spawn:${spawnSpanId}`, input: [{ type: 'text', text: message }] });
      } catch (error) {
        await child.shutdown();
        await storage.deleteSession(record.id).catch(() => undefined);
        throw error;
      }
      return record.id;
    },
    async startChildTurn(childId, message) {
      const child = await childHandle(childId);
      await child.startTurn({ clientRequestId: `followup:${ids.next('req')}`, input: [{ type: 'text', text: message }] });
    },
    async interruptChild(childId) {
      const child = loaded.get(childId)?.handle;
      const runtime = child?.snapshot().runtime;
      if (!child || runtime?.type !== 'running') return false;
      await child.cancelTurn(runtime.turnId);
      return true;
    },
    async childStatus(childId) {
      const child = loaded.get(childId)?.handle;
      const runtime = child?.snapshot().runtime;
      if (runtime?.type === 'running') {
        const turn = await storage.getTurn(runtime.turnId);
        return { status: 'running' as AgentStatus, startedAt: turn?.startedAt ?? new Date(clock.now()).toISOString() };
      }
      const turns = await storage.listTurns(childId);
      const last = turns.at(-1);
      if (!last) {
        const record = await storage.getSession(childId);
        return { status: 'idle' as AgentStatus, startedAt: record?.createdAt ?? new Date(clock.now()).toISOString() };
      }
      const status: AgentStatus = last.status === 'completed' ? 'completed' : last.status === 'cancelled' ? 'cancelled' : last.status === 'running' ? 'running' : 'failed';
      return { status, startedAt: last.startedAt };
    },
  };

  /** Takes the session's lease or answers why not: `session_owned_elsewhere` with the owner and expiry. */
  async function acquireLease(sessionId: string): Promise<void> {
    const result = await keeper!.acquire(sessionId);
    if (result.type === 'not_found') throw new CommandError('session_not_found', `session ${sessionId} does not exist`);
    if (result.type === 'owned_elsewhere') {
      throw new CommandError('session_owned_elsewhere', `session ${sessionId} is owned by runtime ${result.ownerId} until ${result.expiresAt}`, {
        details: { sessionId, ownerId: result.ownerId, leaseExpiresAt: result.expiresAt },
      });
    }
  }

  async function loadSession(sessionId: string): Promise<SessionHandle> {
    if (closed) throw new CommandError('core_closed', 'the runtime has shut down');
    requireId('sessionId', sessionId);
    const existing = loaded.get(sessionId);
    if (existing) {
      // Reference §3.9: a checkpoint committed but not installed; rebuild from the database once idle.
      const snap = existing.handle.snapshot();
      if (!snap.reloadRequired || snap.runtime.type === 'running') return existing.handle;
      await existing.handle.shutdown();
    }
    const inFlight = loading.get(sessionId);
    if (inFlight) return inFlight;
    const promise = (async () => {
      // The lease first (issue 15): what is read next is read as this session's owner.
      if (keeper && !keeper.holds(sessionId)) await acquireLease(sessionId);
      const data = await storage.loadSession(sessionId).catch(async (error: unknown) => {
        await keeper?.release(sessionId);
        throw error;
      });
      if (!data) throw new CommandError('session_not_found', `session ${sessionId} does not exist`);
      if (data.session.parentSessionId !== null && !loaded.has(data.session.parentSessionId)) await loadSession(data.session.parentSessionId);
      const model = options.resolveModel?.(data.session.defaultModelId) ?? options.model;
      const handle = loaded.get(sessionId)?.handle ?? start(data, model);
      await attachControl(handle);
      return handle;
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

    async createSession(opts = {}) {
      if (closed) throw new CommandError('core_closed', 'the runtime has shut down');
      if (typeof opts !== 'object' || opts === null) throw new InputError('invalid_request', 'createSession takes an options object');
      // Issue 13.4: what could only fail later (in the database, in every turn) is refused here.
      const workingDirectory = await sessionWorkingDirectory(opts?.workingDirectory, options.tools ?? [], openworkHome);
      if (opts.id !== undefined) requireId('id', opts.id);
      if (opts.title !== undefined && !isStorableText(opts.title)) throw new InputError('invalid_request', 'title must not contain NUL (U+0000) or an unpaired UTF-16 surrogate');
      if (opts.permissionMode !== undefined && !permissionModeSchema.safeParse(opts.permissionMode).success) {
        throw new InputError('invalid_request', `unknown permission mode ${JSON.stringify(opts.permissionMode)}`);
      }
      if (opts.title !== undefined && opts.title.trim() === '') throw new InputError('invalid_request', 'title must not be blank');
      const record = await storage.createSession({
        id: opts.id ?? ids.next('ses'),
        workingDirectory,
        title: opts.title ?? null,
        defaultModelId: (opts.model ?? options.model).id,
        sandboxMode: opts.permissionMode ?? 'auto',
      });
      if (keeper) await acquireLease(record.id);
      const handle = start({
        session: record,
        messages: [],
        checkpoint: null,
        replayMessage: null,
        acceptedRequests: [],
        plans: [],
        tokenTotals: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 },
        lastTurn: null,
      }, opts.model ?? options.model);
      await attachControl(handle);
      return handle;
    },

    loadSession,

    session(sessionId) {
      return loaded.get(sessionId)?.handle;
    },

    listSessions(opts) {
      return storage.listSessions(opts);
    },

    skillRoot,

    listSkills,

    async setSkillDisabled(name, disabled) {
      if (typeof name !== 'string' || name.trim() === '' || typeof disabled !== 'boolean') {
        throw new InputError('invalid_request', 'setSkillDisabled needs a skill name and a boolean');
      }
      const normalized = name.split(/\s+/).filter(Boolean).join(' ');
      await storage.setSkillDisabled(normalized, disabled); // Database first; memory only once it is stored.
      if (disabled) disabledSkills.add(normalized);
      else disabledSkills.delete(normalized);
      return listSkills();
    },

    async readSkill(path) {
      const scan = await discoverSkills(skillRoot, disabledSkills);
      let canonical: string | null = null;
      try {
        canonical = await realpath(path);
      } catch {
        canonical = null;
      }
      const skill = scan.skills.find((s) => s.path === canonical);
      if (!skill) throw new InputError('invalid_request', `${path} is not the SKILL.md of a skill under the configured skill root`);
      return skill;
    },

    async deleteSession(sessionId) {
      requireId('sessionId', sessionId);
      // Children first: their actors stop, then the root's; the database cascades the rows.
      for (const child of await storage.listChildSessions(sessionId)) await loaded.get(child.id)?.handle.shutdown();
      await loaded.get(sessionId)?.handle.shutdown();
      controls.delete(sessionId);
      return storage.deleteSession(sessionId);
    },

    async listChildSessions(parentSessionId) {
      requireId('parentSessionId', parentSessionId);
      return storage.listChildSessions(parentSessionId);
    },

    status(sessionId) {
      return loaded.get(sessionId)?.handle.status() ?? { type: 'not_loaded' };
    },

    traceStats: () => trace.stats(),
    flushTrace: (timeoutMs) => trace.flush(timeoutMs),

    async shutdown() {
      if (closed) return;
      closed = true;
      keeper?.beginShutdown();
      const entries = [...loaded.values()];
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
