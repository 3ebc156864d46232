/**
 * @module machines/turn/states/ending
 * `ending`: the turn's end is written (unless the final answer's statement wrote it already,
 * `endRecorded`), and the final state follows the outcome (or the refusal of a session another
 * runtime owns now).
 */
import { assign } from '../../assign.js';
import { failedOutcome, isOwnershipLost, storageFailure } from '../outcomes.js';
import { planUnfinishedSteps, withEnd } from '../context.js';
import { turnSetup } from '../setup.js';

export const endingState = turnSetup.createStateConfig({
  invoke: {
    id: 'finishTurn',
    src: 'finishTurn',
    input: ({ context }) => ({
      sessionId: context.fixed.sessionId,
      turnId: context.turnId,
      outcome: context.outcome ?? failedOutcome('actor_stopped', 'the turn ended without an outcome'),
      planUnfinishedStepCount: planUnfinishedSteps(context),
      unmadeModelCall: context.counts.reservedCall,
      // Written already with the final answer (`persisting`): only the local bookkeeping is left.
      recorded: context.end.endRecorded,
    }),
    onDone: [
      { guard: 'outcomeCompleted', target: 'completed', actions: assign({ end: ({ context, event }) => withEnd(context.end, { endRecorded: event.output }) }) },
      { guard: 'outcomeCancelled', target: 'cancelled', actions: assign({ end: ({ context, event }) => withEnd(context.end, { endRecorded: event.output }) }) },
      { target: 'failed', actions: assign({ end: ({ context, event }) => withEnd(context.end, { endRecorded: event.output }) }) },
    ],
    onError: [
      // The end itself was refused for want of the lease: whatever the turn decided, none of it
      // after the takeover is stored, and the host hears why (issue 15).
      {
        guard: ({ event }) => isOwnershipLost(event.error),
        target: 'failed',
        actions: assign({ outcome: ({ event }) => storageFailure(event.error) }),
      },
      { guard: 'outcomeCompleted', target: 'completed' },
      { guard: 'outcomeCancelled', target: 'cancelled' },
      { target: 'failed' },
    ],
  },
});
