/**
 * @module session-handle/snapshot
 * What a `SessionHandle` reports of its session without touching storage: the snapshot composed
 * from the Session, Turn and tool-call actors' snapshots, the host-facing status, and a stored
 * turn's outcome.
 */
import type { ActorRefFrom } from 'xstate';
import { OpenworkError } from '../errors.js';
import type { sessionMachine } from '../machines/session/machine.js';
import { liveToolCallOf, type ToolCallContext } from '../machines/tool-call/machine.js';
import { directCallStatusOf, type TurnContext } from '../machines/turn/context.js';
import type { LiveToolCall } from '../machines/types.js';
import type { SandboxStatus, SessionRuntimeSnapshot, SessionSnapshot, SessionStatus } from '../protocol/snapshot.js';
import { SESSION_UPDATE_VERSION, type TurnOutcome } from '../protocol/updates.js';
import type { TurnRecord } from '../storage/storage.js';

/**
 * The in-memory snapshot (seed 000 §8), composed from the Session and Turn actors' snapshots.
 * `lastUpdateSequence` is the last update the host's stream has published: the Session sequences a
 * Turn macrostep's updates in one step (machines/publish.ts) and emits them one by one after it, so
 * a host that reads the snapshot while it is handed one of them must be told that one, not the
 * last of its batch, or `replayUpdates(lastUpdateSequence)` would refuse a sequence not yet out.
 */
export function sessionSnapshot(actor: ActorRefFrom<typeof sessionMachine>, sessionId: string, sandbox: SandboxStatus, lastUpdateSequence: number): SessionSnapshot {
  const snap = actor.getSnapshot();
  const ctx = snap.context;
  let runtime: SessionRuntimeSnapshot = { type: 'idle' };
  const turnRef = snap.children.turn;
  if (ctx.activeTurn) {
    const turnSnap = turnRef?.getSnapshot() as { context?: TurnContext; children?: Record<string, { getSnapshot(): unknown } | undefined> } | undefined;
    const turn = turnSnap?.context;
    const callSnap = turnSnap?.children?.toolCall?.getSnapshot() as { value: unknown; context: ToolCallContext; status: string } | undefined;
    runtime = {
      type: 'running',
      turnId: ctx.activeTurn.turnId,
      clientRequestId: ctx.activeTurn.clientRequestId,
      // A turn whose actor failed shows the phase it was in until its end is written and announced.
      phase: turn?.phase ?? ctx.crashedTurn?.phase ?? 'starting',
      draft: { text: turn?.draft.text ?? '', reasoning: turn?.draft.reasoning ?? '' },
      toolCalls: liveCalls(turn?.liveToolCalls ?? [], callSnap, turnSnap && turn ? directCallStatusOf({ value: (turnSnap as { value?: unknown }).value, context: turn }) : null),
      pendingApprovals: turn?.pendingApprovals ?? [],
      pendingUserInput: turn?.pendingUserInput ?? [],
      plan: turn?.plan ?? ctx.crashedTurn?.plan ?? null,
    };
  } else if (ctx.lastTerminal) {
    runtime = { type: 'terminal', ...ctx.lastTerminal };
  }
  return {
    version: SESSION_UPDATE_VERSION,
    sessionId,
    lastUpdateSequence,
    permissionMode: ctx.permissionMode,
    sandbox,
    reloadRequired: ctx.reloadRequired,
    runtime,
    rateLimits: ctx.rateLimits,
    usage: ctx.tokenTotals,
  };
}

/** The host-facing status (seed 004): idle, active with flags, or system_error. */
export function sessionStatus(actor: ActorRefFrom<typeof sessionMachine>): SessionStatus {
  const snap = actor.getSnapshot();
  if (snap.status !== 'active') return { type: 'not_loaded' };
  const ctx = snap.context;
  if (ctx.systemError && !ctx.activeTurn) return { type: 'system_error', message: ctx.systemError };
  if (!ctx.activeTurn && !snap.matches('maintenance')) return { type: 'idle' };
  const flags: Array<'waiting_on_approval' | 'waiting_on_user_input'> = [];
  if (ctx.pendingApproval) flags.push('waiting_on_approval');
  if (ctx.pendingUserInput) flags.push('waiting_on_user_input');
  return { type: 'active', activeFlags: flags };
}

/**
 * The Turn's list of the batch's calls, with the running call's status read from its own actor, or
 * from the Turn's state for a call the Turn runs itself.
 */
function liveCalls(
  list: LiveToolCall[],
  call: { value: unknown; context: ToolCallContext; status: string } | undefined,
  direct: { toolCallId: string; status: LiveToolCall['status'] } | null,
): LiveToolCall[] {
  if (direct) return list.map((c) => (c.toolCallId === direct.toolCallId && c.status !== 'finished' ? { ...c, status: direct.status } : c));
  if (!call) return list;
  const id = call.context.toolCallId;
  return list.map((c) => (c.toolCallId === id && c.status !== 'finished' ? { ...c, ...liveToolCallOf(call) } : c));
}

/** The outcome a stored, finished turn had (a completed turn's with its final text). */
export function outcomeOfRecord(turn: TurnRecord, finalText = ''): TurnOutcome {
  switch (turn.status) {
    case 'completed':
      return { status: 'completed', finalText };
    case 'cancelled':
      return { status: 'cancelled' };
    case 'failed':
    case 'interrupted':
      return { status: 'failed', code: turn.errorCode ?? (turn.status === 'interrupted' ? 'process_restart' : 'unknown'), message: turn.errorMessage ?? '' };
    case 'running':
      throw new OpenworkError('actor_stopped', `turn ${turn.id} is still running`);
    default: {
      const never: never = turn.status;
      throw new Error(`unknown turn status ${String(never)}`);
    }
  }
}
