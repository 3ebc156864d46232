/**
 * @module machines/turn/states/compacting
 * `compacting`: a threshold or overflow compaction inside the turn, after which the model call is
 * sampled again.
 */
import { assign } from '../../assign.js';
import { enqueueActions } from '../../enqueue.js';
import { announceToParent } from '../../publish.js';
import { withEnd } from '../context.js';
import { compactionFailure } from '../outcomes.js';
import { turnSetup } from '../setup.js';

export const compactingState = turnSetup.createStateConfig({
  entry: { type: 'enterPhase', params: 'compacting' },
  on: { 'turn.cancel': { target: 'ending', actions: 'outcomeFromStop' }, 'turn.stop': { target: 'ending', actions: 'outcomeFromStop' } },
  invoke: {
    id: 'compactConversation',
    src: 'compactConversation',
    input: ({ context }) => ({
      sessionId: context.fixed.sessionId,
      turnId: context.turnId,
      trigger: context.modelCall.compactionTrigger ?? 'threshold',
      modelCallIndex: context.counts.modelCallIndex,
      plan: context.plan,
      systemContext: context.fixed.systemContext,
      compactAtTokens: context.fixed.compactAtTokens,
      estimatedInputTokens: context.modelCall.estimatedInputTokens,
      triggerModelSpanId: context.modelCall.compactionTrigger === 'overflow' ? `${context.turnId}.model${context.counts.submissionCount}` : null,
    }),
    onDone: {
      target: 'running_model.streaming',
      actions: [
        enqueueActions(({ event, context, self, enqueue }) => {
          if (!event.output.checkpointId) return;
          announceToParent(enqueue, self, event, {
            type: 'conversation_compacted',
            compactionId: event.output.checkpointId,
            kind: context.modelCall.compactionTrigger ?? 'threshold',
            conversationTokensBefore: event.output.conversationTokensBefore,
            conversationTokensAfter: event.output.conversationTokensAfter,
          });
        }),
        assign(({ context, event }) => ({
          modelCall: {
            ...context.modelCall,
            summarizedThisCall: context.modelCall.summarizedThisCall || event.output.summarized,
            samplingSequence: context.modelCall.samplingSequence + 1,
            compactionTrigger: null,
          },
        })),
      ],
    },
    onError: {
      target: 'ending',
      actions: assign(({ context, event }) => {
        const failure = compactionFailure(event.error);
        return { outcome: failure.outcome, end: withEnd(context.end, { reloadRequired: failure.reloadRequired }) };
      }),
    },
  },
});
