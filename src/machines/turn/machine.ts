/**
 * @module machines/turn/machine
 * The Turn machine: one ActiveTurn of a session (seed 000 §3-§6, seed 004 TurnState).
 *
 *   starting → running_model (checking → draining → streaming (sampling → requesting → receiving → persisting: one model actor)) ⇄ compacting
 *              running_model → tools.run (validating → authorizing → executing → recording: one run actor) → running_model
 *                              tools.run → tools.call (a card or a control tool: the tool-call machine)
 *                                          call.running_tools ⇄ call.waiting_permission | call.waiting_user_input
 *   → ending → completed | failed | cancelled
 *
 * Every effect (the model call, each storage write, each tool run) is an invoked actor with an
 * error path; the model call and a direct call's run are slots of one actor invoked for the turn
 * (`effects`), started and stopped by their states as an invoke would be. Cancel stops whatever is
 * invoked; storage writes already in flight finish first, so that no committed fact is left half-known.
 */
import { sendParent, type ActorRefFrom, type SnapshotFrom } from 'xstate';
import { assign } from '../assign.js';
import { REMAINING_CALL_TEXT } from '../../protocol/model-texts.js';
import { emptyDraft, FRESH_LOGICAL_CALL, nextModelCall, notEnded, withCounts, ZERO_USAGE, zeroCounts } from './context.js';
import { failedOutcome, storageFailure } from './outcomes.js';
import { turnSetup } from './setup.js';
import { compactingState } from './states/compacting.js';
import { endingState } from './states/ending.js';
import { runningModelState } from './states/running-model.js';
import { toolsState } from './states/tools.js';

export { REMAINING_CALL_TEXT };

export const turnMachine = turnSetup.createMachine({
  id: 'turn',
  context: ({ input }) => {
    const { turnId, permissionMode, permissionModeOrigin, sessionGrants, mailbox, pendingInput, ...fixed } = input;
    return {
      turnId,
      fixed,
      host: { permissionMode, permissionModeOrigin, sessionGrants, turnGrants: {}, mailbox, pendingInput },
      modelCall: FRESH_LOGICAL_CALL,
      phase: null,
      pendingApprovals: [],
      pendingUserInput: [],
      counts: zeroCounts(),
      usage: ZERO_USAGE,
      draft: emptyDraft(),
      batch: null,
      liveToolCalls: [],
      direct: null,
      doom: { signature: null, count: 0 },
      plan: null,
      outcome: null,
      stopRequest: null,
      end: notEnded(),
    };
  },
  initial: 'starting',
  // The model call and the call the Turn runs itself are done by this one actor, for the whole
  // turn: `running_model.streaming` and `tools.run` start and stop its slots (machines/turn/effects.ts).
  invoke: { id: 'effects', src: 'turnEffects' },
  on: {
    'turn.cancel': { actions: 'requestStop' },
    'turn.stop': { actions: 'requestStop' },
    'turn.steer': { actions: assign({ host: ({ context, event }) => ({ ...context.host, pendingInput: [...context.host.pendingInput, event.message] }) }) },
    'turn.mailbox': { actions: assign({ host: ({ context, event }) => ({ ...context.host, mailbox: [...context.host.mailbox, event.message] }) }) },
    'turn.set_mode': { actions: assign({ host: ({ context, event }) => ({ ...context.host, permissionMode: event.mode, permissionModeOrigin: event.origin }) }) },
    // Rate limits are session state (seed 004 §2): the turn only passes them up.
    'model.rate_limits_reported': { actions: sendParent(({ event }) => ({ type: 'turn.rate_limits_reported' as const, snapshot: event.snapshot })) },
  },
  states: {
    starting: {
      entry: [{ type: 'enterPhase', params: 'starting' }, assign({ counts: ({ context }) => withCounts(context.counts, { reserving: nextModelCall(context) }) })],
      invoke: {
        id: 'beginTurn',
        src: 'beginTurn',
        input: ({ context }) => ({
          sessionId: context.fixed.sessionId,
          turnId: context.turnId,
          clientRequestId: context.fixed.clientRequestId,
          messages: context.fixed.messages,
          reserveModelCall: context.counts.reserving === 1,
        }),
        onDone: { target: 'running_model', actions: 'reservationCommitted' },
        onError: { target: 'ending', actions: assign({ outcome: ({ event }) => storageFailure(event.error) }) },
      },
    },
    running_model: runningModelState,
    compacting: compactingState,
    tools: toolsState,
    ending: endingState,
    completed: { type: 'final', entry: [{ type: 'enterPhase', params: 'completed' }, 'announceFinished'] },
    failed: { type: 'final', entry: [{ type: 'enterPhase', params: 'failed' }, 'announceFinished'] },
    cancelled: { type: 'final', entry: [{ type: 'enterPhase', params: 'cancelled' }, 'announceFinished'] },
  },
  output: ({ context }) => ({
    turnId: context.turnId,
    outcome: context.outcome ?? failedOutcome('actor_stopped', 'the turn ended without an outcome'),
    plan: context.plan,
    usage: context.usage,
    mailbox: context.host.mailbox,
    pendingInput: context.host.pendingInput,
    endRecorded: context.end.endRecorded,
    reloadRequired: context.end.reloadRequired,
  }),
});

export type TurnActorRef = ActorRefFrom<typeof turnMachine>;
export type TurnSnapshot = SnapshotFrom<typeof turnMachine>;
