/**
 * @module core/agent-host
 * The sub-agent host of one core (reference §5): each root's `AgentControl`, the `SubAgentHost`
 * the control tools drive (spawn, follow-up turn, interrupt, status), a child's outcome delivered
 * to its parent's mailbox, and the reconciliation before each user turn of a root.
 */
import { CommandError } from '../errors.js';
import { AgentControl, type AgentStatus, type SubAgentHost } from '../services/agents/control.js';
import { EXPLORER_ROLE, subAgentMode } from '../services/agents/explorer.js';
import { agentMessageId, agentMessageKindOfStatus, terminalAgentMessage } from '../services/agents/mailbox.js';
import type { MailboxSignal } from '../services/agents/signal.js';
import type { Clock, IdGenerator } from '../services/clock.js';
import type { LeaseKeeper } from '../services/ownership/lease-keeper.js';
import type { ModelPort } from '../services/model/port.js';
import type { SessionServices } from '../services/runtime.js';
import type { SessionHandle } from '../session-handle.js';
import type { LoadedSession, SessionStorage } from '../storage/storage.js';

/** What the sub-agent host needs of the core's loaded sessions (`SessionRegistry` is the one). */
export interface LoadedSessions {
  /** True once the core has shut down. */
  readonly closed: boolean;
  get(sessionId: string): { handle: SessionHandle; services: SessionServices } | undefined;
  childrenOf(rootId: string): ReadonlySet<string> | undefined;
  start(loadedSession: LoadedSession, model: ModelPort): SessionHandle;
  acquireLease(sessionId: string): Promise<void>;
  loadSession(sessionId: string): Promise<SessionHandle>;
}

export interface SubAgentsDeps {
  storage: SessionStorage;
  ids: IdGenerator;
  clock: Clock;
  mailbox: MailboxSignal;
  keeper: LeaseKeeper | null;
  /** Whether root sessions get the agent control tools at all. */
  enabled: boolean;
  maxActiveTurns: number | undefined;
  /** The registry of loaded sessions; a getter, as the registry is built with this object. */
  registry: () => LoadedSessions;
}

/** The sub-agents of every root session of one core. */
export class SubAgents {
  /** Each loaded root's agent control, by root session id. */
  readonly controls = new Map<string, AgentControl>();

  constructor(private readonly deps: SubAgentsDeps) {}

  /** The agent control of a root session, or null (not a loaded root, or agents are off). */
  control(sessionId: string): AgentControl | null {
    return this.controls.get(sessionId) ?? null;
  }

  /** Gives a loaded root its agent control, restored with the children it already has. */
  async attachControl(handle: SessionHandle): Promise<void> {
    if (!this.deps.enabled || handle.info.parentSessionId !== null || this.controls.has(handle.sessionId)) return;
    // The control's link to this runtime goes dead at shutdown (reference §5.2: agent_host_unavailable).
    const control = new AgentControl(handle.sessionId, () => (this.deps.registry().closed ? null : this.host), this.deps.mailbox, this.deps.maxActiveTurns);
    control.restore((await this.deps.storage.listChildSessions(handle.sessionId)).map((c) => ({ id: c.id, taskName: c.taskName })));
    this.controls.set(handle.sessionId, control);
  }

  /** A child delivers its own terminal outcome to its parent's mailbox and returns its slot. */
  watchChild(handle: SessionHandle, parentId: string, taskName: string): void {
    handle.updates$.subscribe((envelope) => {
      if (envelope.update.type !== 'turn_finished' || envelope.turnId === null) return;
      this.controls.get(parentId)?.turnEnded(handle.sessionId);
      const parent = this.deps.registry().get(parentId)?.handle;
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
  async reconcile(rootId: string): Promise<void> {
    const registry = this.deps.registry();
    const root = registry.get(rootId)?.handle;
    if (!root) return;
    const snapshot = root.actorRef.getSnapshot();
    if (snapshot.status !== 'active' || snapshot.value !== 'idle') return;
    const starting = [...(registry.childrenOf(rootId) ?? [])]
      .map((id) => registry.get(id)?.handle)
      .filter((h): h is SessionHandle => h !== undefined && h.actorRef.getSnapshot().status === 'active' && h.actorRef.getSnapshot().context.activeTurn !== null)
      .map((h) => h.sessionId);
    const report = await this.deps.storage.reconcileChildren(
      rootId,
      (child, turn, status) => agentMessageId(child, turn, agentMessageKindOfStatus(status === 'running' ? 'failed' : status)),
      starting,
    );
    for (const childId of report.deletedChildren) {
      await registry.get(childId)?.handle.shutdown();
      this.controls.get(rootId)?.forget(childId);
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

  private async childHandle(childId: string): Promise<SessionHandle> {
    const registry = this.deps.registry();
    const existing = registry.get(childId)?.handle;
    if (existing) return existing;
    return registry.loadSession(childId);
  }

  /** What the agent control tools of every root drive. */
  readonly host: SubAgentHost = {
    spawnChild: async ({ rootSessionId, taskName, message, spawnSpanId }, beforeStart) => {
      const { storage, ids, keeper } = this.deps;
      const registry = this.deps.registry();
      const root = registry.get(rootSessionId);
      if (!root) throw new CommandError('actor_stopped', `root session ${rootSessionId} is not loaded`);
      const record = await storage.createSession({
        id: ids.next('ses'),
        workingDirectory: root.services.workingDirectory,
        parentSessionId: rootSessionId,
        taskName,
        agentRole: EXPLORER_ROLE,
        spawnSpanId,
        permissionMode: subAgentMode(root.handle.snapshot().permissionMode),
        defaultModelId: root.services.model.id,
      });
      if (keeper) await registry.acquireLease(record.id);
      const child = registry.start(
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
    startChildTurn: async (childId, message) => {
      const child = await this.childHandle(childId);
      await child.startTurn({ clientRequestId: `followup:${this.deps.ids.next('req')}`, input: [{ type: 'text', text: message }] });
    },
    interruptChild: async (childId) => {
      const child = this.deps.registry().get(childId)?.handle;
      const runtime = child?.snapshot().runtime;
      if (!child || runtime?.type !== 'running') return false;
      await child.cancelTurn(runtime.turnId);
      return true;
    },
    childStatus: async (childId) => {
      const { storage, clock } = this.deps;
      const child = this.deps.registry().get(childId)?.handle;
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
}
