/**
 * @module machines/turn/setup
 * The Turn's `setup`: its types, the actors it invokes (each a stub until the runtime provides the
 * real one), its guards and its named actions. The state nodes in `states/` are typed by it.
 */
import { fromCallback, fromPromise, sendParent, setup } from 'xstate';
import { assign } from '../assign.js';
import { enqueueActions } from '../enqueue.js';
import type { Phase, SessionUpdate } from '../../protocol/updates.js';
import { NO_RESULT_TEXT } from '../../protocol/model-texts.js';
import { failedResult, toolCallFinishedUpdate, type ToolResult } from '../../protocol/tool-result.js';
import { DEFAULT_TOOL_CANCEL_GRACE_MS, TOOL_CANCEL_GRACE } from '../tool-call/cancel-grace.js';
import { isDoomLoopCall, waitTimeoutsReachThreshold } from '../tool-call/doom-loop.js';
import { announceToParent } from '../publish.js';
import { stopOrphans } from '../orphans.js';
import { hasGrant, toolCallMachine } from '../tool-call/machine.js';
import { stopBeforeRun } from '../tool-call/outcomes.js';
import type { RecordInput } from '../tool-call/ports.js';
import type { AuthorizationOutput, ToolCallOutput, ValidatedCall } from '../types.js';
import { SLOT_LAST_EVENTS, type EffectSlot, type TurnEffectsCommand } from './effects.js';
import { applyToolOutput, emptyDraft, FRESH_LOGICAL_CALL, intoRecording, withCounts, type TurnContext } from './context.js';
import { failedOutcome, isContextOverflow, modelCallStage, stopOutcome } from './outcomes.js';
import type {
  BeginTurnInput,
  CancelledCallsInput,
  CompactInput,
  CompactOutput,
  DrainInput,
  DrainOutput,
  FinishInput,
  ModelCallStage,
  TurnEvent,
  TurnInput,
  TurnOutput,
} from './ports.js';

function notProvided(name: string): never {
  throw new Error(`turn actor "${name}" was not provided`);
}


export const turnSetup = setup({
  types: {
    context: {} as TurnContext,
    input: {} as TurnInput,
    output: {} as TurnOutput,
    events: {} as TurnEvent,
  },
  actors: {
    /** Stops what a failed tool-call machine left running (machines/orphans.ts); a pure effect, not provided. */
    stopOrphans,
    beginTurn: fromPromise<void, BeginTurnInput>(async () => notProvided('beginTurn')),
    drainInbox: fromPromise<DrainOutput, DrainInput>(async () => notProvided('drainInbox')),
    /**
     * The Turn's direct work, one actor for the whole turn (machines/turn/effects.ts): the model
     * call and the call the Turn runs itself, started and stopped by the states that show them.
     */
    turnEffects: fromCallback<TurnEffectsCommand>(() => notProvided('turnEffects')),
    compactConversation: fromPromise<CompactOutput, CompactInput>(async () => notProvided('compactConversation')),
    // Only `tools.abandoned` writes a result on its own: that of a call whose tool-call machine failed.
    recordToolResult: fromPromise<ToolResult, RecordInput>(async () => notProvided('recordToolResult')),
    toolCall: toolCallMachine,
    recordCancelledCalls: fromPromise<void, CancelledCallsInput>(async () => notProvided('recordCancelledCalls')),
    finishTurn: fromPromise<boolean, FinishInput>(async () => notProvided('finishTurn')),
  },
  guards: {
    stopRequested: ({ context }) => context.stopRequest !== null,
    maxModelCallsReached: ({ context }) => context.counts.modelCallIndex >= context.fixed.limits.maxModelCalls,
    batchDone: ({ context }) => context.batch === null || context.counts.batchIndex >= context.batch.calls.length,
    /** The current call is the batch's last: once it is finished, `batchDone` holds. */
    lastOfBatch: ({ context }) => context.batch !== null && context.counts.batchIndex + 1 >= context.batch.calls.length,
    outcomeCompleted: ({ context }) => context.outcome?.status === 'completed',
    outcomeCancelled: ({ context }) => context.outcome?.status === 'cancelled',
    isInvalid: (_, output: ValidatedCall) => output.kind === 'invalid',
    /** The doom-loop rule (seed 000 §4) over a validated call: the same call, consecutively, up to the threshold. */
    isDoomLoop: ({ context }, output: ValidatedCall) =>
      output.kind !== 'invalid' && isDoomLoopCall(context.direct!.doom, context.direct!.call.name, output.args, context.fixed.limits.doomLoopThreshold),
    isControl: (_, output: ValidatedCall) => output.kind === 'control',
    isExecute: (_, output: AuthorizationOutput) => output.kind === 'execute',
    isRuleDeny: (_, output: AuthorizationOutput) => output.kind === 'deny',
    isGranted: ({ context }, output: AuthorizationOutput) =>
      output.kind === 'card' && (hasGrant(context.host.turnGrants, output.card) || hasGrant(context.host.sessionGrants, output.card)),
    isNonInteractive: ({ context }) => context.fixed.nonInteractive,
    directTerminal: ({ context }) => context.direct?.terminal != null,
    /** The model actor failed at `stage`, before the model was asked (`ModelCallSetupFailure`). */
    failedBeforeCall: (_, params: { error: unknown; stage: ModelCallStage }) => modelCallStage(params.error) === params.stage,
    /**
     * The provider refused the context before any output (`isContextOverflow`), and one compaction
     * may make room: automatic compaction is on (without it there is nothing to resubmit after, and
     * the turn fails), nothing of the call was kept, and neither a resubmission nor a summary was
     * tried for this call yet.
     */
    overflowToCompact: ({ context }, params: { error: unknown }) =>
      isContextOverflow(params.error) && context.fixed.compactionEnabled && !context.draft.semantic && !context.modelCall.overflowResubmitted && !context.modelCall.summarizedThisCall,
    /** A call that waited ends the turn: its terminal, or one `wait_agent` timeout too many in a row (reference §5.5). */
    callEndsTurn: ({ context }, output: ToolCallOutput) =>
      output.terminal !== null || (output.waitTimedOut === true && waitTimeoutsReachThreshold(context.counts.waitTimeouts, context.fixed.limits.doomLoopThreshold)),
  },
  delays: { [TOOL_CANCEL_GRACE]: DEFAULT_TOOL_CANCEL_GRACE_MS },
  actions: {
    /** Emits `phase_changed` only when the phase really changes: the chart is the source of phases. */
    enterPhase: enqueueActions(({ context, self, event, enqueue }, phase: Phase) => {
      if (context.phase === phase) return;
      enqueue(assign({ phase }));
      announceToParent(enqueue, self, event, { type: 'phase_changed', phase });
    }),
    /**
     * Leaving the state that shows an effect stops it (machines/turn/effects.ts), as leaving an
     * invoking state stops its actor: a request or a tool in flight is aborted. A state left on the
     * effect's own last event has nothing left to stop, and sends nothing.
     */
    stopEffect: enqueueActions(({ event, enqueue }, slot: EffectSlot) => {
      if (SLOT_LAST_EVENTS[slot].has(event.type)) return;
      enqueue.sendTo('effects', slot === 'model' ? { type: 'effects.model.stop' as const } : { type: 'effects.tool.stop' as const });
    }),
    /** Every update the Turn announces goes through here (or `announceToParent`): one `session.publish` a macrostep. */
    emit: enqueueActions(({ self, event, enqueue }, update: SessionUpdate) => announceToParent(enqueue, self, event, update)),
    requestStop: assign({
      stopRequest: ({ context, event }) => (event.type === 'turn.stop' ? 'stop' : (context.stopRequest ?? 'cancel')),
    }),
    outcomeFromStop: assign({ outcome: ({ context, event }) => stopOutcome(event.type === 'turn.stop' ? 'stop' : context.stopRequest) }),
    announceFinished: enqueueActions(({ context, self, event, enqueue }) =>
      announceToParent(enqueue, self, event, {
        type: 'turn_finished',
        outcome: context.outcome ?? failedOutcome('actor_stopped', 'the turn ended without an outcome'),
        usage: context.usage,
      }),
    ),
    /** The fact that asked for a reservation has committed: the call's counters are written. */
    reservationCommitted: assign(({ context }) =>
      context.counts.reserving === 0 ? {} : { counts: withCounts(context.counts, { reservedCall: context.counts.reserving, reserving: 0 }) },
    ),
    beginLogicalCall: assign({
      counts: ({ context }) => withCounts(context.counts, { modelCallIndex: context.counts.modelCallIndex + 1 }),
      modelCall: FRESH_LOGICAL_CALL,
    }),
    /** The call stopped before its tool ran (a cancel or stop while it was validated or authorised). */
    directStopBeforeRun: assign(({ context, event }) => {
      const stopped = stopBeforeRun(event.type === 'turn.stop' || context.stopRequest === 'stop');
      return intoRecording(context, { stopRequest: stopped.stopRequest, direct: { ...context.direct!, result: stopped.result, terminal: stopped.terminal } });
    }),
    /**
     * The direct call's end: its live entry, doom count and outcome, as a tool-call machine's output
     * would set them, and the reservation its recorded result committed. `stored`: the result as
     * recorded (what the stored message says), when it was recorded.
     */
    finishDirect: assign(({ context }, params: { recorded: boolean; stored?: ToolResult }) => {
      const { recorded } = params;
      const d = params.stored ? { ...context.direct!, result: params.stored } : context.direct!;
      const output: ToolCallOutput = {
        waitTimedOut: null,
        toolCallId: d.toolCallId,
        providerCallId: d.call.callId,
        toolName: d.call.name,
        result: d.result ?? failedResult('execution_failed', NO_RESULT_TEXT),
        recorded,
        terminal: d.terminal,
        doom: d.doom,
        plan: null,
      };
      // A recorded result is the fact that asked for the reservation (`recording`'s entry): it is
      // committed with it, in this one context copy (issue 14 point 2: one assign fewer a step).
      const patch = applyToolOutput(context, output, d.terminal !== null);
      if (recorded && context.counts.reserving !== 0) patch.counts = withCounts(patch.counts!, { reservedCall: context.counts.reserving, reserving: 0 });
      return { ...patch, direct: null };
    }),
    /** `tool_call_finished` once the direct call's result is stored (reference §6.4). */
    announceDirectFinished: enqueueActions(({ context, self, event, enqueue }, result: ToolResult) => {
      const d = context.direct!;
      announceToParent(enqueue, self, event, toolCallFinishedUpdate({ toolCallId: d.toolCallId, providerCallId: d.call.callId, toolName: d.call.name }, result));
    }),
    discardDraft: enqueueActions(({ context, self, event, enqueue }) => {
      if (context.draft.semantic || context.draft.text !== '' || context.draft.reasoning !== '') {
        announceToParent(enqueue, self, event, { type: 'draft_cleared', reason: 'discarded' });
      }
      enqueue(assign({ draft: emptyDraft() }));
    }),
  },
});
