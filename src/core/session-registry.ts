/**
 * @module core/session-registry
 * The loaded sessions of one core: starting a session's actor with its services, creating and
 * loading sessions (under this core's lease when ownership is on), and forgetting a session when
 * its handle closes.
 */
import type { Subject } from 'rxjs';
import { createActor, type ActorRefFrom } from 'xstate';
import { CommandError, InputError } from '../errors.js';
import { sessionWorkingDirectory } from '../host/working-directory.js';
import type { sessionMachine } from '../machines/session/machine.js';
import type { LastTerminal, TurnLimits } from '../machines/session/ports.js';
import { requireId } from '../protocol/command-input.js';
import { textOf } from '../protocol/content.js';
import { permissionModeSchema } from '../protocol/input.js';
import type { SandboxStatus } from '../protocol/snapshot.js';
import { isStorableText } from '../protocol/storable-text.js';
import type { SessionUpdateEnvelope } from '../protocol/updates.js';
import { EXPLORER_LIMITS, EXPLORER_SYSTEM_PROMPT } from '../services/agents/explorer.js';
import type { Clock, IdGenerator } from '../services/clock.js';
import type { Compactor } from '../services/compaction/compaction.js';
import type { buildSystemContext } from '../services/context/assemble.js';
import { ChatState } from '../services/context/chat-state.js';
import { contextLimits } from '../services/context/limits.js';
import type { WorldStateSources } from '../services/context/world-state.js';
import type { ModelPort } from '../services/model/port.js';
import type { LeaseKeeper } from '../services/ownership/lease-keeper.js';
import { toolAuthorizer, type RuntimeServices, type SessionServices } from '../services/runtime.js';
import type { Toolset } from '../services/tools/registry.js';
import { SessionHandle, outcomeOfRecord } from '../session-handle.js';
import type { LoadedSession } from '../storage/storage.js';
import type { SubAgents } from './agent-host.js';
import type { CoreOptions, CreateSessionOptions } from './options.js';
import type { SkillService } from './skills.js';

/** A loaded session: its handle and the services its actors use. */
export interface LoadedEntry {
  handle: SessionHandle;
  services: SessionServices;
}

type SystemContext = ReturnType<typeof buildSystemContext>;

export interface SessionRegistryDeps {
  options: CoreOptions;
  services: RuntimeServices;
  keeper: LeaseKeeper | null;
  sessionLogic: typeof sessionMachine;
  compactor: Compactor;
  global: Subject<SessionUpdateEnvelope>;
  clock: Clock;
  ids: IdGenerator;
  sandbox: SandboxStatus;
  rootToolset: Toolset;
  explorerToolset: Toolset;
  agentPrompt: string;
  systemContext: SystemContext;
  explorerSystemContext: SystemContext;
  limits: TurnLimits;
  openworkHome: string;
  skills: SkillService;
  agents: SubAgents;
  onActorError: (sessionId: string, error: unknown) => void;
}

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

/** The sessions one core has loaded, and how they are created, loaded and started. */
export class SessionRegistry {
  private readonly loaded = new Map<string, LoadedEntry>();
  /**
   * The loaded sub-agents of each root, so that a root's turn start looks at its own children
   * rather than scanning every loaded session (with 1,000 roots that scan ran 1,000 times per
   * 1,000 turn starts).
   */
  private readonly loadedChildren = new Map<string, Set<string>>();
  private readonly loading = new Map<string, Promise<SessionHandle>>();
  /** Set by the core's shutdown: no session is created or loaded afterwards. */
  closed = false;

  private readonly customCatalog: WorldStateSources['skillsCatalog'];
  private readonly agentsEnabled: boolean;

  constructor(private readonly deps: SessionRegistryDeps) {
    const { options } = deps;
    this.customCatalog = options.worldState ? options.worldState.skillsCatalog : undefined;
    this.agentsEnabled = options.agents === true || typeof options.agents === 'object';
  }

  /** The loaded entry of a session, without touching storage. */
  get(sessionId: string): LoadedEntry | undefined {
    return this.loaded.get(sessionId);
  }

  /** The ids of a root's loaded sub-agents. */
  childrenOf(rootId: string): ReadonlySet<string> | undefined {
    return this.loadedChildren.get(rootId);
  }

  /** Every loaded session. */
  entries(): LoadedEntry[] {
    return [...this.loaded.values()];
  }

  /** Starts the actor of a session read from storage (a sub-agent's under its loaded root's actor). */
  start(loadedSession: LoadedSession, model: ModelPort): SessionHandle {
    const { options, services, keeper, compactor, global, clock, ids, sandbox, skills, agents } = this.deps;
    const { loaded, loadedChildren } = this;
    const { customCatalog, agentsEnabled } = this;
    const record = loadedSession.session;
    const isChild = record.parentSessionId !== null;
    const parent = isChild ? loaded.get(record.parentSessionId!) : undefined;
    if (isChild && !parent) throw new CommandError('actor_stopped', `the parent of sub-agent ${record.id} is not loaded`);
    const sessionServices: SessionServices = {
      sessionId: record.id,
      workingDirectory: record.workingDirectory,
      chat: ChatState.fromLoaded({ ...loadedSession, pruneWatermark: record.toolResultPrunedThroughSequence }),
      toolset: isChild ? this.deps.explorerToolset : this.deps.rootToolset,
      model,
      authorizer: options.authorizer ?? toolAuthorizer,
      nonInteractive: isChild,
      agentPrompt: isChild ? EXPLORER_SYSTEM_PROMPT : this.deps.agentPrompt,
      sandbox,
      worldState:
        options.worldState === false
          ? null
          : {
              baseline: new Map(),
              skillsCatalog: customCatalog ? () => customCatalog() : skills.catalog,
              ...(options.worldState?.renderSandboxPolicy ? { renderSandboxPolicy: options.worldState.renderSandboxPolicy } : {}),
            },
    };
    const input = {
      sessionId: record.id,
      permissionMode: record.permissionMode,
      // Sub-agents run under a snapshot of their parent's mode; a root's mode is its stored one, a
      // toggle of the user's staying one across restarts.
      permissionModeOrigin: isChild ? ('inherited' as const) : record.permissionModeOrigin,
      nonInteractive: sessionServices.nonInteractive,
      systemContext: isChild ? this.deps.explorerSystemContext : this.deps.systemContext,
      limits: isChild ? EXPLORER_LIMITS : this.deps.limits,
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
      const root = createActor(this.deps.sessionLogic, {
        id: `session:${record.id}`,
        systemId: 'session',
        input,
        ...(options.inspect ? { inspect: options.inspect } : {}),
      });
      root.subscribe({ error: (error) => this.deps.onActorError(record.id, error) });
      actor = root;
    }
    const handle = new SessionHandle({
      record,
      actor,
      ...(stopActor ? { stopActor } : {}),
      compactor,
      services,
      storage: services.storage,
      clock,
      ids,
      global,
      sandbox,
      maxUserInputTokens: options.maxUserInputTokens ?? 32_000,
      resolveSkills: skills.resolveSkills,
      disabledSkillNames: () => skills.disabledNames(),
      ...(!isChild && agentsEnabled ? { beforeStartTurn: () => agents.reconcile(record.id) } : {}),
      onClosed: () => {
        let released: Promise<void> | undefined;
        if (loaded.get(record.id)?.handle === handle) {
          loaded.delete(record.id);
          const siblings = isChild ? loadedChildren.get(record.parentSessionId!) : undefined;
          siblings?.delete(record.id);
          if (siblings?.size === 0) loadedChildren.delete(record.parentSessionId!);
          released = keeper?.release(record.id);
        }
        if (!isChild) agents.controls.delete(record.id);
        return released;
      },
    });
    entry.handle = handle;
    if (!isChild) (actor as ReturnType<typeof createActor>).start();
    if (isChild && record.taskName) agents.watchChild(handle, record.parentSessionId!, record.taskName);
    return handle;
  }

  /** Takes the session's lease or answers why not: `session_owned_elsewhere` with the owner and expiry. */
  async acquireLease(sessionId: string): Promise<void> {
    const result = await this.deps.keeper!.acquire(sessionId);
    if (result.type === 'not_found') throw new CommandError('session_not_found', `session ${sessionId} does not exist`);
    if (result.type === 'owned_elsewhere') {
      throw new CommandError('session_owned_elsewhere', `session ${sessionId} is owned by runtime ${result.ownerId} until ${result.expiresAt}`, {
        details: { sessionId, ownerId: result.ownerId, leaseExpiresAt: result.expiresAt },
      });
    }
  }

  /** Loads a stored session (or returns the loaded one); `session_not_found` if it does not exist. */
  readonly loadSession = async (sessionId: string): Promise<SessionHandle> => {
    const { options, keeper } = this.deps;
    const storage = this.deps.services.storage;
    if (this.closed) throw new CommandError('core_closed', 'the runtime has shut down');
    requireId('sessionId', sessionId);
    const existing = this.loaded.get(sessionId);
    if (existing) {
      // Reference §3.9: a checkpoint committed but not installed; rebuild from the database once idle.
      const snap = existing.handle.snapshot();
      if (!snap.reloadRequired || snap.runtime.type === 'running') return existing.handle;
      await existing.handle.shutdown();
    }
    const inFlight = this.loading.get(sessionId);
    if (inFlight) return inFlight;
    const promise = (async () => {
      // The lease first (issue 15): what is read next is read as this session's owner.
      if (keeper && !keeper.holds(sessionId)) await this.acquireLease(sessionId);
      const data = await storage.loadSession(sessionId).catch(async (error: unknown) => {
        await keeper?.release(sessionId);
        throw error;
      });
      if (!data) throw new CommandError('session_not_found', `session ${sessionId} does not exist`);
      if (data.session.parentSessionId !== null && !this.loaded.has(data.session.parentSessionId)) await this.loadSession(data.session.parentSessionId);
      const model = options.resolveModel?.(data.session.defaultModelId) ?? options.model;
      const handle = this.loaded.get(sessionId)?.handle ?? this.start(data, model);
      await this.deps.agents.attachControl(handle);
      return handle;
    })();
    this.loading.set(sessionId, promise);
    try {
      return await promise;
    } finally {
      this.loading.delete(sessionId);
    }
  };

  /** Creates a root session after checking its options, and starts it. */
  async createSession(opts: CreateSessionOptions = {}): Promise<SessionHandle> {
    const { options, keeper, ids } = this.deps;
    const storage = this.deps.services.storage;
    if (this.closed) throw new CommandError('core_closed', 'the runtime has shut down');
    if (typeof opts !== 'object' || opts === null) throw new InputError('invalid_request', 'createSession takes an options object');
    // Issue 13.4: what could only fail later (in the database, in every turn) is refused here.
    const workingDirectory = await sessionWorkingDirectory(opts?.workingDirectory, options.tools ?? [], this.deps.openworkHome);
    if (opts.id !== undefined) requireId('id', opts.id);
    if (opts.title !== undefined && !isStorableText(opts.title)) throw new InputError('invalid_request', 'title must not contain NUL (U+0000) or an unpaired UTF-16 surrogate');
    if (opts.permissionMode !== undefined && !permissionModeSchema.safeParse(opts.permissionMode).success) {
      throw new InputError('invalid_request', `unknown permission mode ${JSON.stringify(opts.permissionMode)}`);
    }
    if (opts.title !== undefined && opts.title.trim() === '') throw new InputError('invalid_request', 'title must not be blank');
    const input = {
      id: opts.id ?? ids.next('ses'),
      workingDirectory,
      title: opts.title ?? null,
      defaultModelId: (opts.model ?? options.model).id,
      permissionMode: opts.permissionMode ?? 'auto' as const,
    };
    // With ownership, the session and its lease are one statement (issue 14 point 2: a round trip less).
    let record;
    if (keeper) {
      const created = await storage.createLeasedSession(input, { ownerId: keeper.ownerId, leaseMs: keeper.settings.leaseMs });
      keeper.adopt(created.session.id, created.lease.token);
      record = created.session;
    } else record = await storage.createSession(input);
    const handle = this.start({
      session: record,
      messages: [],
      checkpoint: null,
      replayMessage: null,
      acceptedRequests: [],
      plans: [],
      tokenTotals: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 },
      lastTurn: null,
    }, opts.model ?? options.model);
    await this.deps.agents.attachControl(handle);
    return handle;
  }
}
