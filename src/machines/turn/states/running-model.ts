/**
 * @module machines/turn/states/running-model
 * `running_model`: check the limits, drain the inbox, call the model (sampling → requesting →
 * receiving) and persist its answer, which ends the turn, loops for steering input or starts the
 * tool batch. One model actor spans `streaming`, the call's states and `persisting` alike.
 */
import { sendTo } from 'xstate';
import { assign } from '../../assign.js';
import { enqueueActions } from '../../enqueue.js';
import { TEXT_BLOCK_SEPARATOR } from '../../../protocol/content.js';
import { addUsage } from '../../../protocol/usage.js';
import { announceToParent } from '../../publish.js';
import { emptyDraft, nextDirectCall, planUnfinishedSteps, toolCallIdFor, withCounts, withEnd, type TurnContext } from '../context.js';
import { assemblyFailure, counterWriteFailure, failedOutcome, modelFailure, samplingFailure, stopOutcome, storageFailure } from '../outcomes.js';
import { turnSetup } from '../setup.js';

/** The context patch of a committed answer with tool calls: its batch, from the first call. */
function intoBatch(context: TurnContext, assistantMessageId: string) {
  const calls = context.draft.toolCalls;
  const toolCallIds = calls.map((_, i) => toolCallIdFor(context.turnId, context.counts.toolCallCount + i + 1));
  return {
    usage: addUsage(context.usage, context.draft.completion!.usage),
    batch: { assistantMessageId, calls, toolCallIds },
    counts: withCounts(context.counts, { batchIndex: 0, toolCallCount: context.counts.toolCallCount + calls.length }),
    liveToolCalls: calls.map((call, i) => ({
      toolCallId: toolCallIds[i]!,
      providerCallId: call.callId,
      toolName: call.name,
      arguments: call.arguments,
      status: 'pending' as const,
    })),
    draft: emptyDraft(),
  };
}

/**
 * The outcome of a model call's request, from `requesting` (a call that wrote its counters) or
 * straight from `sampling` (a call the fact before reserved): compaction first, or the call is made.
 * A stop noted before it ends the call there, before the model is asked.
 */
const requestOutcome = turnSetup.createStateConfig({
  on: {
    'model.over_threshold': [
      { guard: 'stopRequested', target: '#turn.ending', actions: 'outcomeFromStop' },
      {
        target: '#turn.compacting',
        actions: assign(({ context, event }) => ({
          modelCall: { ...context.modelCall, estimatedInputTokens: event.estimatedInputTokens, compactionTrigger: 'threshold' as const, thresholdTried: true },
        })),
      },
    ],
    'model.call_recorded': [
      { guard: 'stopRequested', target: '#turn.ending', actions: 'outcomeFromStop' },
      {
        target: '#turn.running_model.streaming.receiving',
        actions: assign(({ context, event }) => ({
          // The reservation (if any) is spent: the call is being made.
          counts: withCounts(context.counts, { submissionCount: context.counts.submissionCount + 1, reservedCall: 0 }),
          draft: emptyDraft(),
          modelCall: { ...context.modelCall, compactionTrigger: null, estimatedInputTokens: event.estimatedInputTokens },
        })),
      },
    ],
  },
}).on!;

export const runningModelState = turnSetup.createStateConfig({
  entry: { type: 'enterPhase', params: 'running_model' },
  initial: 'checking',
  states: {
    checking: {
      always: [
        { guard: 'stopRequested', target: '#turn.ending', actions: 'outcomeFromStop' },
        {
          guard: 'maxModelCallsReached',
          target: '#turn.ending',
          actions: assign({
            outcome: ({ context }) => failedOutcome('max_model_calls', `the turn reached max_model_calls (${context.fixed.limits.maxModelCalls})`),
          }),
        },
        {
          guard: ({ context }) => context.host.mailbox.length === 0 && context.host.pendingInput.length === 0,
          target: 'streaming',
          actions: 'beginLogicalCall',
        },
        { target: 'draining', actions: 'beginLogicalCall' },
      ],
    },
    draining: {
      invoke: {
        id: 'drainInbox',
        src: 'drainInbox',
        input: ({ context }) => ({
          sessionId: context.fixed.sessionId,
          turnId: context.turnId,
          mailbox: context.host.mailbox,
          pendingInput: context.host.pendingInput,
        }),
        onDone: [
          { guard: 'stopRequested', target: '#turn.ending', actions: 'outcomeFromStop' },
          {
            target: 'streaming',
            actions: assign(({ context, event }) => ({
              host: {
                ...context.host,
                mailbox: context.host.mailbox.filter((m) => !event.output.mailboxIds.includes(m.id)),
                pendingInput: context.host.pendingInput.filter((m) => !event.output.inputIds.includes(m.id)),
              },
            })),
          },
        ],
        onError: { target: '#turn.ending', actions: assign({ outcome: ({ event }) => storageFailure(event.error) }) },
      },
    },
    streaming: {
      // One actor per model call, from sampling to the stored answer (issue 14 point 3): it samples
      // World State, assembles the request from the session's conversation (nothing of it enters
      // this context), asks for a threshold compaction or records the call's counters, streams,
      // and stores the answer when the chart, in `persisting`, tells it to (`model.persist`). It
      // reports each step as an event and the chart takes every transition: `sampling` shows the
      // sampling (and, for a call the fact before reserved, the assembly: it has no write of its
      // own), `requesting` the assembly and the counters' write of a call that writes them,
      // `receiving` the stream, `persisting` the commit. Leaving
      // `streaming` stops it, which aborts a request in flight; a commit in flight finishes.
      initial: 'sampling',
      // The model call is the `model` slot of the Turn's effects actor (machines/turn/effects.ts):
      // started here, stopped on leaving (`stopEffect`), as an invoke here would be.
      entry: sendTo('effects', ({ context }) => ({
        type: 'effects.model.start' as const,
        input: {
          sessionId: context.fixed.sessionId,
          turnId: context.turnId,
          modelCallIndex: context.counts.modelCallIndex,
          spanId: `${context.turnId}.model${context.counts.submissionCount + 1}`,
          samplingSequence: context.modelCall.samplingSequence,
          permissionMode: context.host.permissionMode,
          disabledSkillNames: context.fixed.disabledSkillNames,
          systemContext: context.fixed.systemContext,
          compactAtTokens: context.fixed.compactAtTokens,
          thresholdCompaction: !context.modelCall.thresholdTried && !context.modelCall.summarizedThisCall,
          counted: context.counts.reservedCall === context.counts.modelCallIndex,
        },
      })),
      exit: { type: 'stopEffect', params: 'model' },
      on: {
        // The call failed: the actor's last event (the real actor also turns a stream that ends
        // without a completed response into a `model_protocol_error`). It comes only from the
        // call's states: once the answer is complete the actor reports only the commit's outcome.
        'model.failed': [
          {
            // World State could not be sampled (reference §2.3): nothing was asked.
            guard: { type: 'failedBeforeCall', params: ({ event }) => ({ error: event.error, stage: 'sample' as const }) },
            target: '#turn.ending',
            actions: assign({ outcome: ({ event }) => samplingFailure(event.error) }),
          },
          {
            // The request could not be assembled (reference §2.7): nothing was recorded or sent.
            guard: { type: 'failedBeforeCall', params: ({ event }) => ({ error: event.error, stage: 'assemble' as const }) },
            target: '#turn.ending',
            actions: assign({
              outcome: ({ context, event }) => (context.stopRequest !== null ? stopOutcome(context.stopRequest) : assemblyFailure(event.error)),
            }),
          },
          {
            // The call's counters could not be written: the model was not asked.
            guard: { type: 'failedBeforeCall', params: ({ event }) => ({ error: event.error, stage: 'record' as const }) },
            target: '#turn.ending',
            actions: assign({ outcome: ({ event }) => counterWriteFailure(event.error) }),
          },
          {
            guard: { type: 'overflowToCompact', params: ({ event }) => ({ error: event.error }) },
            target: '#turn.compacting',
            actions: ['discardDraft', assign(({ context }) => ({ modelCall: { ...context.modelCall, compactionTrigger: 'overflow' as const, overflowResubmitted: true } }))],
          },
          {
            target: '#turn.ending',
            actions: ['discardDraft', assign({ outcome: ({ event }) => modelFailure(event.error) })],
          },
        ],
      },
      states: {
        sampling: {
          // A cancel waits for the sampling in flight (the root handler notes it). A call that writes
          // its counters reports the sampling (`model.sampled`) and shows `requesting` while it
          // writes them; a call the fact before reserved (`counted`) has nothing to write, so it
          // reports the sampling with its request's outcome and goes from here to `receiving` or
          // `compacting` in one macrostep (issue 14 point 3). Either way a stop noted before that
          // event ends the call before the model is asked.
          on: {
            'model.sampled': [{ guard: 'stopRequested', target: '#turn.ending', actions: 'outcomeFromStop' }, { target: 'requesting' }],
            ...requestOutcome,
          },
        },
        requesting: {
          // A cancel waits for the counters' write in flight (the root handler notes it).
          on: requestOutcome,
        },
        receiving: {
          on: {
            'model.text_delta': {
              // Another output message opens a text block of its own; the live text shows it as a paragraph.
              actions: enqueueActions(({ context, self, event, enqueue }) => {
                const blocks = context.draft.textBlocks;
                const last = blocks.at(-1);
                if (event.delta === '') {
                  // Nothing to show or store: no block is opened for it.
                  enqueue(assign({ draft: { ...context.draft, semantic: true } }));
                  announceToParent(enqueue, self, event, { type: 'text_delta', delta: '' });
                  return;
                }
                const opens = last === undefined || (event.newBlock === true && last.text !== '');
                const phase = event.phase !== undefined ? { phase: event.phase } : {};
                const shown = opens && last !== undefined ? TEXT_BLOCK_SEPARATOR + event.delta : event.delta;
                const textBlocks = opens
                  ? [...blocks, { type: 'text' as const, text: event.delta, ...phase }]
                  : [...blocks.slice(0, -1), { ...last!, ...(last!.phase === undefined ? phase : {}), text: last!.text + event.delta }];
                enqueue(assign({ draft: { ...context.draft, text: context.draft.text + shown, textBlocks, semantic: true } }));
                announceToParent(enqueue, self, event, { type: 'text_delta', delta: shown });
              }),
            },
            'model.reasoning_delta': {
              actions: [
                assign({ draft: ({ context, event }) => ({ ...context.draft, reasoning: context.draft.reasoning + event.delta, semantic: true }) }),
                { type: 'emit', params: ({ event }) => ({ type: 'reasoning_delta', delta: event.delta }) },
              ],
            },
            'model.tool_call': {
              actions: assign({
                draft: ({ context, event }) => ({
                  ...context.draft,
                  semantic: true,
                  toolCalls: [...context.draft.toolCalls, { type: 'tool_call', callId: event.callId, name: event.name, arguments: event.arguments }],
                }),
              }),
            },
            'model.provider_opaque': {
              actions: assign({
                draft: ({ context, event }) => ({ ...context.draft, opaque: [...context.draft.opaque, { provider: event.provider, data: event.data }] }),
              }),
            },
            // The model actor's last event (it holds the completion until the stream has ended
            // well): the answer is complete, so the Turn goes on to store it at once (issue 14
            // point 3: no `observable.complete` and `done.actor` round after it).
            'model.completed': {
              target: 'persisting',
              // Whether the answer ends the turn is decided here, once, as `persisting` is entered
              // (this is the only way in): the write either carries the end or does not, whatever
              // arrives while it runs. One `assign` with the completion: one context copy.
              actions: assign(({ context, event }) => ({
                draft: {
                  ...context.draft,
                  completion: {
                    usage: event.usage,
                    ...(event.responseId !== undefined ? { responseId: event.responseId } : {}),
                    ...(event.finishReason !== undefined ? { finishReason: event.finishReason } : {}),
                  },
                },
                end: withEnd(context.end, {
                  endingWithAnswer:
                    context.draft.toolCalls.length === 0 && context.host.pendingInput.length === 0 && context.stopRequest === null && context.fixed.answerJudged !== true,
                }),
              })),
            },
            // Leaving this state stops the model actor, which aborts the provider request.
            'turn.cancel': { target: '#turn.ending', actions: ['requestStop', 'discardDraft', 'outcomeFromStop'] },
            'turn.stop': { target: '#turn.ending', actions: ['requestStop', 'discardDraft', 'outcomeFromStop'] },
          },
        },
        persisting: {
          // `endingWithAnswer` was decided by the transition in (`receiving` on `model.completed`).
          // The model actor stores the answer when told: it is the same actor, so no second actor
          // is started, initialised and answered for the commit. No cancel or stop is handled
          // here: the root notes it and the commit in flight finishes (the branches below read it).
          entry: sendTo('effects', ({ context }) => ({
            type: 'model.persist' as const,
            draft: context.draft,
            end: context.end.endingWithAnswer ? { planUnfinishedStepCount: planUnfinishedSteps(context) } : null,
          })),
          on: {
            'model.persisted': [
              {
                // The final answer and the turn's end committed together: a stop or steering input that
                // came during the write finds the turn ended (steering input goes to the next turn).
                guard: ({ context }) => context.end.endingWithAnswer,
                target: '#turn.ending',
                actions: [
                  { type: 'emit', params: { type: 'draft_cleared', reason: 'committed' } },
                  assign(({ context }) => ({
                    usage: addUsage(context.usage, context.draft.completion!.usage),
                    outcome: { status: 'completed' as const, finalText: context.draft.text },
                    draft: emptyDraft(),
                    end: withEnd(context.end, { endRecorded: true }),
                  })),
                ],
              },
              {
                // Structured output: a final answer that does not fit the turn's schema fails the turn.
                guard: ({ context, event }) =>
                  event.outputProblem !== undefined &&
                  context.draft.toolCalls.length === 0 &&
                  context.host.pendingInput.length === 0 &&
                  context.stopRequest === null,
                target: '#turn.ending',
                actions: [
                  { type: 'emit', params: { type: 'draft_cleared', reason: 'committed' } },
                  assign(({ context, event }) => ({
                    usage: addUsage(context.usage, context.draft.completion!.usage),
                    outcome: failedOutcome('output_invalid', event.outputProblem!),
                    draft: emptyDraft(),
                  })),
                ],
              },
              {
                guard: ({ context }) => context.draft.toolCalls.length === 0 && (context.host.pendingInput.length === 0 || context.stopRequest !== null),
                target: '#turn.ending',
                actions: [
                  { type: 'emit', params: { type: 'draft_cleared', reason: 'committed' } },
                  assign(({ context }) => ({
                    usage: addUsage(context.usage, context.draft.completion!.usage),
                    outcome: context.stopRequest === null ? { status: 'completed' as const, finalText: context.draft.text } : stopOutcome(context.stopRequest),
                    draft: emptyDraft(),
                  })),
                ],
              },
              {
                // A final answer while steering input waits: the turn takes the input in one more round.
                guard: ({ context }) => context.draft.toolCalls.length === 0,
                target: '#turn.running_model.checking',
                actions: [
                  { type: 'emit', params: { type: 'draft_cleared', reason: 'committed' } },
                  assign(({ context }) => ({ usage: addUsage(context.usage, context.draft.completion!.usage), draft: emptyDraft() })),
                ],
              },
              {
                // A stop noted during the commit: `tools.next` records the batch cancelled.
                guard: 'stopRequested',
                target: '#turn.tools',
                actions: [
                  { type: 'emit', params: { type: 'draft_cleared', reason: 'committed' } },
                  assign(({ context, event }) => intoBatch(context, event.messageId)),
                ],
              },
              {
                // The batch's first call starts at once, as `tools.next` would start it (no stop, and a
                // batch has a call): one microstep and one context copy fewer a step (issue 14 point 3).
                target: '#tools.run',
                actions: [
                  { type: 'emit', params: { type: 'draft_cleared', reason: 'committed' } },
                  assign(({ context, event }) => {
                    const patch = intoBatch(context, event.messageId);
                    return { ...patch, direct: nextDirectCall({ ...context, ...patch }) };
                  }),
                ],
              },
            ],
            'model.persist_failed': { target: '#turn.ending', actions: ['discardDraft', assign({ outcome: ({ event }) => storageFailure(event.error) })] },
          },
        },
      },
    },
  },
});
