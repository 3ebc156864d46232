/**
 * @module machines/turn/context
 * The Turn's context and the pure functions over it: the empty draft, the next model call a fact
 * reserves, a call's input, the live tool-call list and how a tool call's output lands in the turn.
 */
import type { TurnPlanSnapshot } from '../../protocol/plan.js';
import type { Phase, TurnOutcome } from '../../protocol/updates.js';
import type { TokenUsage } from '../../protocol/usage.js';
import { doomLoopText } from '../../protocol/model-texts.js';
import type { DoomState, Grants, LiveToolCall, PendingApproval, PendingUserInput, ToolCallInput, ToolCallOutput } from '../types.js';
import type { DirectCall, ModelDraft, ToolBatch, TurnInput } from './ports.js';
import { failedOutcome } from './outcomes.js';

export const ZERO_USAGE: TokenUsage = { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 };

/**
 * What the turn was started with and never changes: kept by reference, so that every `assign`
 * copies one key for all of it (issue 14 point 3: XState copies the whole top level of the
 * context on each `assign`, about 13 times a step).
 */
export type TurnFixed = Omit<TurnInput, HostKey | 'turnId'>;

type HostKey = 'permissionMode' | 'permissionModeOrigin' | 'sessionGrants' | 'mailbox' | 'pendingInput';

/** What the host's commands change while the turn runs: its mode, its grants and its inbox. */
export interface TurnHost extends Pick<TurnInput, HostKey> {
  turnGrants: Grants;
}

/** The compaction state of one logical model call, set back as the next call begins. */
export interface LogicalCallState {
  compactionTrigger: 'threshold' | 'overflow' | null;
  /** The last assembled request's estimate, for a compaction's trace. */
  estimatedInputTokens: number | null;
  /** One overflow resubmission per logical model call (seed 000 §4). */
  overflowResubmitted: boolean;
  /** A threshold compaction (pruning, maybe a summary) was already tried in this logical call. */
  thresholdTried: boolean;
  /** A summary checkpoint was written in this logical call: no second compaction (reference §3.1). */
  summarizedThisCall: boolean;
  /** World State sampling number within the logical call (2 after an in-turn compaction). */
  samplingSequence: number;
}

/** A logical model call's compaction state as it begins (shared: the context is never changed in place). */
export const FRESH_LOGICAL_CALL: LogicalCallState = Object.freeze({
  compactionTrigger: null,
  estimatedInputTokens: null,
  overflowResubmitted: false,
  thresholdTried: false,
  summarizedThisCall: false,
  samplingSequence: 1,
});

/**
 * The turn's counters, grouped so that the context's top level stays under 20 keys (branch
 * perf-context): xstate's `assign` copies the context with `Object.assign({}, context, patch)`,
 * and V8 sends an object built that way to dictionary mode when it adds a 20th key along a map
 * transition that does not exist yet (docs/decisions.md "The Turn's context shape").
 */
export interface TurnCounts {
  modelCallIndex: number;
  submissionCount: number;
  toolCallCount: number;
  /** The batch's call that runs next. */
  batchIndex: number;
  /** Consecutive wait_agent timeouts; reaching the doom-loop threshold ends the turn (reference §5.5). */
  waitTimeouts: number;
  /**
   * The logical model call whose counters a fact already wrote (begin turn, the batch's last tool
   * result), 0 for none: that call writes no counter statement of its own, and the turn's end takes
   * it back if it is never made. `reserving` is the call a fact in flight asks for; it becomes
   * `reservedCall` when that fact has committed.
   */
  reservedCall: number;
  reserving: number;
}

/** The counters with `patch` applied: every `TurnCounts` is built here, so all share one shape. */
export function withCounts(counts: TurnCounts, patch: Partial<TurnCounts>): TurnCounts {
  return {
    modelCallIndex: patch.modelCallIndex ?? counts.modelCallIndex,
    submissionCount: patch.submissionCount ?? counts.submissionCount,
    toolCallCount: patch.toolCallCount ?? counts.toolCallCount,
    batchIndex: patch.batchIndex ?? counts.batchIndex,
    waitTimeouts: patch.waitTimeouts ?? counts.waitTimeouts,
    reservedCall: patch.reservedCall ?? counts.reservedCall,
    reserving: patch.reserving ?? counts.reserving,
  };
}

/** A turn's counters as it starts. */
export function zeroCounts(): TurnCounts {
  return withCounts({ modelCallIndex: 0, submissionCount: 0, toolCallCount: 0, batchIndex: 0, waitTimeouts: 0, reservedCall: 0, reserving: 0 }, {});
}

/** How the turn ends, written a few times a turn (grouped for the same reason as `TurnCounts`). */
export interface TurnEnd {
  /**
   * The answer being stored ends the turn, decided as `persisting` is entered (no tool calls, no
   * steering input waiting, no stop asked, no judged output): its statement writes the turn's end
   * too (`PersistAssistantInput.end`), and a stop or steering input that arrives during that write
   * comes after the end, as it would after a separate end write.
   */
  endingWithAnswer: boolean;
  endRecorded: boolean;
  /** A checkpoint was committed but not installed: the session must refuse turns until reloaded. */
  reloadRequired: boolean;
}

/** `end` with `patch` applied: every `TurnEnd` is built here. */
export function withEnd(end: TurnEnd, patch: Partial<TurnEnd>): TurnEnd {
  return {
    endingWithAnswer: patch.endingWithAnswer ?? end.endingWithAnswer,
    endRecorded: patch.endRecorded ?? end.endRecorded,
    reloadRequired: patch.reloadRequired ?? end.reloadRequired,
  };
}

/** A turn's end fields as it starts. */
export function notEnded(): TurnEnd {
  return withEnd({ endingWithAnswer: false, endRecorded: false, reloadRequired: false }, {});
}

/**
 * The Turn's context, in groups by how often they change (issue 14 point 3): `fixed` never,
 * `host` on a host command, `modelCall` a few times a logical call; what a step changes stays at
 * the top level, with what the session's snapshot reads (phase, draft, live calls, pending
 * approvals and questions, plan).
 */
export interface TurnContext {
  /** The Turn's identity, at the top level where the inspector shows an actor's small fields. */
  turnId: string;
  fixed: TurnFixed;
  host: TurnHost;
  modelCall: LogicalCallState;
  phase: Phase | null;
  pendingApprovals: PendingApproval[];
  /** request_user_input questions waiting for the host's answers (seed 004 `pending_user_input`). */
  pendingUserInput: PendingUserInput[];
  /** The turn's counters, one object with one shape (`withCounts`). */
  counts: TurnCounts;
  usage: TokenUsage;
  draft: ModelDraft;
  batch: ToolBatch | null;
  liveToolCalls: LiveToolCall[];
  /** The call the Turn runs with its own actors (`tools.run`), until it ends or has to wait. */
  direct: DirectCall | null;
  doom: DoomState;
  plan: TurnPlanSnapshot | null;
  outcome: TurnOutcome | null;
  stopRequest: 'cancel' | 'stop' | null;
  /** How the turn ends (`withEnd`). */
  end: TurnEnd;
}

/** The plan's steps not completed when the turn ends (null: the turn has no plan), recorded with its end. */
export function planUnfinishedSteps(context: TurnContext): number | null {
  return context.plan ? context.plan.steps.filter((s) => s.status !== 'completed').length : null;
}

/** A draft with nothing received yet. */
export function emptyDraft(): ModelDraft {
  return { text: '', textBlocks: [], reasoning: '', toolCalls: [], opaque: [], completion: null, semantic: false };
}

/** Deterministic, session-unique id of the n-th tool call of a turn, used by commands and updates. */
export function toolCallIdFor(turnId: string, n: number): string {
  return `${turnId}.tc${n}`;
}

/**
 * The logical model call that comes next if nothing ends the turn first (no stop asked, under
 * `max_model_calls`), or 0: what a fact before it reserves. A cancel, a failure or a compaction that
 * fails may still end the turn before the call; the end then takes the reservation back.
 */
export function nextModelCall(context: TurnContext): number {
  if (context.stopRequest !== null || context.counts.modelCallIndex >= context.fixed.limits.maxModelCalls) return 0;
  return context.counts.modelCallIndex + 1;
}

/**
 * The context patch of a transition into `tools.run.recording`: the direct call as it is to be
 * recorded and what its record reserves. The batch's last result reserves the next model call when
 * nothing can end the turn first. Decided in the transition's own `assign` rather than a second
 * one on `recording`'s entry (issue 14 point 3: one context copy fewer a step); `stopRequest` is
 * the one a stop before the run sets in the same `assign`.
 */
export function intoRecording(context: TurnContext, patch: { direct: DirectCall; stopRequest?: 'cancel' | 'stop' }): Partial<TurnContext> {
  const last = context.counts.batchIndex + 1 >= context.batch!.calls.length && patch.direct.terminal === null;
  const stopRequest = patch.stopRequest ?? context.stopRequest;
  const reserving = last ? nextModelCall(stopRequest === context.stopRequest ? context : { ...context, stopRequest }) : 0;
  return { ...patch, counts: withCounts(context.counts, { reserving }) };
}

/** The batch's call at `batchIndex` as the Turn starts to run it (`tools.next` into `run`). */
export function nextDirectCall(context: Pick<TurnContext, 'batch' | 'counts' | 'host' | 'doom'>): DirectCall {
  return {
    toolCallId: context.batch!.toolCallIds[context.counts.batchIndex]!,
    call: context.batch!.calls[context.counts.batchIndex]!,
    permissionMode: context.host.permissionMode,
    permissionModeOrigin: context.host.permissionModeOrigin,
    args: undefined,
    resolvedName: null,
    doom: context.doom,
    approval: { decision: 'none', source: 'sandbox', card: null, requestedAt: null, decidedAt: null },
    result: null,
    terminal: null,
    executed: false,
    start: null,
  };
}

/** What validation and authorisation (and a tool-call machine) need to know of the current call. */
export function toolCallInputOf(context: TurnContext): ToolCallInput {
  const d = context.direct!;
  return {
    sessionId: context.fixed.sessionId,
    turnId: context.turnId,
    toolCallId: d.toolCallId,
    call: d.call,
    permissionMode: d.permissionMode,
    permissionModeOrigin: d.permissionModeOrigin,
    nonInteractive: context.fixed.nonInteractive,
    turnGrants: context.host.turnGrants,
    sessionGrants: context.host.sessionGrants,
    doom: context.doom,
    doomLoopThreshold: context.fixed.limits.doomLoopThreshold,
    parentSpanId: `${context.turnId}.model${context.counts.submissionCount}`,
  };
}

/**
 * The status of the call the Turn runs itself, read from the Turn's state (`tools.run.<status>`),
 * for the snapshot; null when no such call runs (none, or one that waits in a tool-call machine).
 */
export function directCallStatusOf(snapshot: { value: unknown; context: TurnContext }): { toolCallId: string; status: LiveToolCall['status'] } | null {
  const direct = snapshot.context.direct;
  const tools = (snapshot.value as { tools?: unknown } | null)?.tools;
  const run = (tools as { run?: unknown } | null | undefined)?.run;
  if (!direct || run === undefined || run === null) return null;
  // A tool asked to stop (`executing.stopping`) is still executing until it reports how it ended.
  if (typeof run === 'object' && 'executing' in run) return { toolCallId: direct.toolCallId, status: 'executing' };
  if (typeof run !== 'string') return null;
  return { toolCallId: direct.toolCallId, status: run as LiveToolCall['status'] };
}

export function patchLive(list: LiveToolCall[], patch: Partial<LiveToolCall> & { toolCallId: string }): LiveToolCall[] {
  return list.map((c) => (c.toolCallId === patch.toolCallId ? { ...c, ...patch } : c));
}

export function applyToolOutput(context: TurnContext, output: ToolCallOutput, terminal: boolean): Partial<TurnContext> {
  const patch: Partial<TurnContext> = {
    counts: withCounts(context.counts, {
      batchIndex: context.counts.batchIndex + 1,
      waitTimeouts: output.waitTimedOut === true ? context.counts.waitTimeouts + 1 : output.waitTimedOut === false ? 0 : context.counts.waitTimeouts,
    }),
    // The call's live entry as its last state left it: finished once its result is stored.
    liveToolCalls: patchLive(context.liveToolCalls, {
      toolCallId: output.toolCallId,
      ...(output.recorded ? { status: 'finished' as const, result: { status: output.result.status, text: output.result.text } } : { status: 'recording' as const }),
    }),
    doom: output.doom,
    pendingApprovals: [],
    pendingUserInput: [],
  };
  if (output.plan) patch.plan = output.plan;
  if (terminal && !output.terminal) {
    patch.outcome = failedOutcome('doom_loop', doomLoopText(output.toolName));
    return patch;
  }
  if (terminal && output.terminal) {
    const t = output.terminal;
    patch.outcome =
      t.code === 'cancelled'
        ? { status: 'cancelled' }
        : failedOutcome(t.code, t.code === 'doom_loop' ? output.result.text : t.message);
  }
  return patch;
}

