/**
 * @module machines/turn/states/tools
 * `tools`: the batch of tool calls of one answer, one at a time. A call runs as the Turn's own
 * actor (`run`) unless it has to wait (`call`, a tool-call machine); what is left after a
 * terminal is recorded as cancelled (`cancelling_remaining`).
 */
import { sendParent, sendTo } from 'xstate';
import { assign } from '../../assign.js';
import { enqueueActions } from '../../enqueue.js';
import { ACTOR_STOPPED_TEXT, authorizationFailedText, REMAINING_CALL_TEXT, validationFailedText } from '../../../protocol/model-texts.js';
import { cancelledResult, failedResult, outcomeUnknownResult, toolCallFinishedUpdate } from '../../../protocol/tool-result.js';
import { TOOL_CANCEL_GRACE } from '../../tool-call/cancel-grace.js';
import { recordFailureTerminal, terminalAfterRun, unconfirmedStop } from '../../tool-call/outcomes.js';
import { executeInputOf, recordInputOf } from '../../tool-call/ports.js';
import { addGrant } from '../../grants.js';
import { announceToParent } from '../../publish.js';
import { orphansOf } from '../../orphans.js';
import { applyToolOutput, intoRecording, nextDirectCall, toolCallInputOf } from '../context.js';
import { cardToAsk, countedCall, doomLoopCall, grantedCard, invalidCall, nonInteractiveRefusal, ruleDenial } from '../direct-call.js';
import { errorText, failedOutcome, storageFailure } from '../outcomes.js';
import { turnSetup } from '../setup.js';

export const toolsState = turnSetup.createStateConfig({
  id: 'tools',
  initial: 'next',
  states: {
    next: {
      always: [
        { guard: 'batchDone', target: '#turn.running_model' },
        { guard: 'stopRequested', target: 'cancelling_remaining', actions: 'outcomeFromStop' },
        { target: 'run', actions: assign(({ context }) => ({ direct: nextDirectCall(context) })) },
      ],
    },
    // A call runs as the Turn's own actor (validate, authorize, execute, record) as long as it
    // needs nobody: no card to ask, no control tool. One that has to wait goes to `call`, which
    // spawns the tool-call machine with what was decided here (issue 14 point 3).
    run: {
      initial: 'validating',
      // The `tool` slot of the Turn's effects actor (machines/turn/effects.ts) does the whole call:
      // it validates as it starts, and authorises, runs and records only when the chart, entering
      // the state that shows it, sends it `tool.authorize`, `tool.execute` or `tool.record` (issue 14
      // point 3: no actor a call). Leaving `run` stops it (`stopEffect`), as an invoke here would.
      entry: [
        { type: 'enterPhase', params: 'running_tools' },
        sendTo('effects', ({ context }) => ({ type: 'effects.tool.start' as const, input: toolCallInputOf(context) })),
      ],
      exit: { type: 'stopEffect', params: 'tool' },
      states: {
        validating: {
          entry: {
            type: 'emit',
            params: ({ context }) => ({
              type: 'tool_call_started',
              toolCallId: context.direct!.toolCallId,
              providerCallId: context.direct!.call.callId,
              toolName: context.direct!.call.name,
              arguments: context.direct!.call.arguments,
              status: 'validating',
            }),
          },
          on: {
            'tool.validated': [
              {
                guard: { type: 'isInvalid', params: ({ event }) => event.output },
                target: 'recording',
                actions: assign(({ context, event }) => intoRecording(context, { direct: { ...context.direct!, ...invalidCall(event.output) } })),
              },
              {
                // The doom-loop rule (seed 000 §4) over the validated arguments: machines/tool-call/doom-loop.ts.
                guard: { type: 'isDoomLoop', params: ({ event }) => event.output },
                target: 'recording',
                actions: assign(({ context, event }) => intoRecording(context, { direct: { ...context.direct!, ...doomLoopCall(context.direct!, event.output) } })),
              },
              { guard: 'stopRequested', target: 'recording', actions: 'directStopBeforeRun' },
              {
                guard: { type: 'isControl', params: ({ event }) => event.output },
                target: '#tools.call',
                actions: assign(({ context, event }) => {
                  const d = context.direct!;
                  const { args, doom } = countedCall(d, event.output);
                  return { direct: { ...d, args, doom, resolvedName: d.call.name, start: { kind: 'control' as const, args, doom } } };
                }),
              },
              {
                target: 'authorizing',
                actions: assign(({ context, event }) => ({ direct: { ...context.direct!, ...countedCall(context.direct!, event.output), resolvedName: context.direct!.call.name } })),
              },
            ],
            'tool.check_failed': {
              target: 'recording',
              actions: assign(({ context, event }) => intoRecording(context, {
                direct: { ...context.direct!, result: failedResult('execution_failed', validationFailedText(errorText(event.error))) },
              })),
            },
          },
        },
        authorizing: {
          entry: sendTo('effects', ({ context }) => ({ type: 'tool.authorize' as const, args: context.direct!.args })),
          on: {
            'turn.cancel': { target: 'recording', actions: 'directStopBeforeRun' },
            'turn.stop': { target: 'recording', actions: 'directStopBeforeRun' },
            'tool.authorized': [
              { guard: { type: 'isExecute', params: ({ event }) => event.output }, target: 'executing' },
              {
                guard: { type: 'isRuleDeny', params: ({ event }) => event.output },
                target: 'recording',
                actions: assign(({ context, event }) => intoRecording(context, { direct: { ...context.direct!, ...ruleDenial(context.direct!, event.output) } })),
              },
              {
                guard: { type: 'isGranted', params: ({ event }) => event.output },
                target: 'executing',
                actions: assign(({ context, event }) => ({ direct: { ...context.direct!, ...grantedCard(context.direct!, event.output) } })),
              },
              {
                guard: 'isNonInteractive',
                target: 'recording',
                actions: assign(({ context, event }) => intoRecording(context, { direct: { ...context.direct!, ...nonInteractiveRefusal(context.direct!, event.output) } })),
              },
              {
                // A card to ask: the call waits, so it becomes a tool-call machine.
                target: '#tools.call',
                actions: assign(({ context, event }) => ({ direct: { ...context.direct!, ...cardToAsk(context.direct!, event.output) } })),
              },
            ],
            'tool.check_failed': {
              target: 'recording',
              actions: assign(({ context, event }) => intoRecording(context, {
                direct: { ...context.direct!, result: failedResult('execution_failed', authorizationFailedText(errorText(event.error))) },
              })),
            },
          },
        },
        executing: {
          entry: sendTo('effects', ({ context }) => ({
            type: 'tool.execute' as const,
            input: executeInputOf(context.direct!, { sessionId: context.fixed.sessionId, turnId: context.turnId }),
          })),
          on: {
            'tool.execute_failed': {
              target: 'recording',
              actions: assign(({ context, event }) => intoRecording(context, { direct: { ...context.direct!, result: failedResult('execution_failed', errorText(event.error)) } })),
            },
            'tool.progress': {
              actions: { type: 'emit', params: ({ context, event }) => ({ type: 'tool_call_progress', toolCallId: context.direct!.toolCallId, progress: event.progress }) },
            },
            'tool.finished': {
              target: 'recording',
              actions: assign(({ context, event }) => intoRecording(context, {
                direct: {
                  ...context.direct!,
                  result: event.result,
                  executed: true,
                  terminal: terminalAfterRun(context.stopRequest, event.result),
                },
              })),
            },
          },
          initial: 'running',
          states: {
            running: {
              on: {
                'turn.cancel': { target: 'stopping', actions: 'requestStop' },
                'turn.stop': { target: 'stopping', actions: 'requestStop' },
              },
            },
            // As the tool-call machine's `executing.stopping` (machines/tool-call/cancel-grace.ts): the
            // tool got its abort (bash kills its process group at once) and reports how it ended, or
            // ends outcome_unknown when the grace elapses. A second cancel or a stop is noted at the root.
            stopping: {
              entry: sendTo('effects', { type: 'toolcall.cancel' }),
              after: {
                [TOOL_CANCEL_GRACE]: {
                  target: '#tools.run.recording',
                  actions: assign(({ context }) => intoRecording(context, { direct: { ...context.direct!, ...unconfirmedStop(context.stopRequest) } })),
                },
              },
            },
          },
        },
        recording: {
          // What the record reserves (`reserving`) was decided by the transition in (`intoRecording`).
          entry: sendTo('effects', ({ context }) => ({
            type: 'tool.record' as const,
            input: recordInputOf(context.direct!, { sessionId: context.fixed.sessionId, turnId: context.turnId }, context.counts.reserving),
          })),
          on: {
            'tool.recorded': [
              {
                guard: 'directTerminal',
                target: '#tools.cancelling_remaining',
                actions: [
                  { type: 'announceDirectFinished', params: ({ event }) => event.result },
                  { type: 'finishDirect', params: ({ event }) => ({ recorded: true, stored: event.result }) },
                ],
              },
              {
                // The batch's last call: `next` would go on to the model at once (`batchDone`), so the
                // transition goes there itself, one microstep fewer a step (issue 14 point 3).
                guard: 'lastOfBatch',
                target: '#turn.running_model',
                actions: [
                  { type: 'announceDirectFinished', params: ({ event }) => event.result },
                  { type: 'finishDirect', params: ({ event }) => ({ recorded: true, stored: event.result }) },
                ],
              },
              {
                target: '#tools.next',
                actions: [
                  { type: 'announceDirectFinished', params: ({ event }) => event.result },
                  { type: 'finishDirect', params: ({ event }) => ({ recorded: true, stored: event.result }) },
                ],
              },
            ],
            'tool.record_failed': {
              target: '#tools.cancelling_remaining',
              actions: [
                assign(({ context, event }) => ({ direct: { ...context.direct!, terminal: recordFailureTerminal(event.error) } })),
                { type: 'finishDirect', params: { recorded: false } },
              ],
            },
          },
        },
      },
    },
    call: {
      initial: 'running_tools',
      // The phase goes out before the call starts: the call publishes to the session directly.
      entry: { type: 'enterPhase', params: 'running_tools' },
      invoke: {
        id: 'toolCall',
        src: 'toolCall',
        input: ({ context }) => ({ ...toolCallInputOf(context), start: context.direct!.start! }),
        onDone: [
          {
            guard: { type: 'callEndsTurn', params: ({ event }) => event.output },
            target: 'cancelling_remaining',
            actions: assign(({ context, event }) => ({ ...applyToolOutput(context, event.output, true), direct: null })),
          },
          { target: 'next', actions: assign(({ context, event }) => ({ ...applyToolOutput(context, event.output, false), direct: null })) },
        ],
        // The tool-call machine failed (a fault in its chart): nothing of it runs any more, so the
        // Turn ends the call as a stopped actor's (seed 000 §5: an `outcome_unknown` result, the turn
        // `failed` with `actor_stopped`), closes the card or question it left open, and records.
        onError: {
          target: 'abandoned',
          actions: [
            enqueueActions(({ context, self, event, enqueue }) => {
              for (const p of context.pendingApprovals) announceToParent(enqueue, self, event, { type: 'permission_resolved', toolCallId: p.toolCallId, decision: 'cancelled' });
              for (const q of context.pendingUserInput) announceToParent(enqueue, self, event, { type: 'user_input_resolved', toolCallId: q.toolCallId, outcome: 'cancelled' });
            }),
            assign(({ context, event }) => ({
              pendingApprovals: [],
              pendingUserInput: [],
              direct: {
                ...context.direct!,
                result: outcomeUnknownResult(ACTOR_STOPPED_TEXT),
                terminal: { code: 'actor_stopped' as const, message: `tool call actor failed: ${errorText(event.error)}` },
              },
            })),
          ],
        },
      },
      on: {
        'toolcall.permission_requested': {
          target: '.waiting_permission',
          actions: assign({ pendingApprovals: ({ event }) => [{ toolCallId: event.toolCallId, card: event.card }] }),
        },
        'toolcall.permission_resolved': {
          target: '.running_tools',
          actions: [
            assign({ pendingApprovals: [] }),
            {
              type: 'emit',
              params: ({ event }) => ({
                type: 'permission_resolved' as const,
                toolCallId: event.toolCallId,
                decision: event.decision === 'actor_stopped' ? ('cancelled' as const) : event.decision,
              }),
            },
          ],
        },
        'toolcall.granted': {
          actions: [
            assign(({ context, event }) => ({
              host:
                event.scope === 'turn'
                  ? { ...context.host, turnGrants: addGrant(context.host.turnGrants, event.environmentId, event.grantKey) }
                  : { ...context.host, sessionGrants: addGrant(context.host.sessionGrants, event.environmentId, event.grantKey) },
            })),
            sendParent(({ event }) => ({ type: 'turn.granted', scope: event.scope, environmentId: event.environmentId, grantKey: event.grantKey })),
          ],
        },
        'toolcall.user_input_requested': {
          target: '.waiting_user_input',
          actions: assign({ pendingUserInput: ({ event }) => [{ toolCallId: event.toolCallId, request: event.request }] }),
        },
        'toolcall.user_input_resolved': {
          target: '.running_tools',
          actions: [
            assign({ pendingUserInput: [] }),
            {
              type: 'emit',
              params: ({ event }) => ({
                type: 'user_input_resolved' as const,
                toolCallId: event.toolCallId,
                outcome: event.outcome,
                ...(event.answers ? { answers: event.answers } : {}),
              }),
            },
          ],
        },
        'turn.decide': { actions: sendTo('toolCall', ({ event }) => ({ type: 'toolcall.decide', decision: event.decision, at: event.at })) },
        'turn.answer': { actions: sendTo('toolCall', ({ event }) => ({ type: 'toolcall.answer', answers: event.answers })) },
        'turn.cancel': { actions: ['requestStop', sendTo('toolCall', { type: 'toolcall.cancel' })] },
        'turn.stop': { actions: ['requestStop', sendTo('toolCall', { type: 'toolcall.stop' })] },
      },
      states: {
        running_tools: { entry: { type: 'enterPhase', params: 'running_tools' } },
        waiting_permission: {
          entry: [
            { type: 'enterPhase', params: 'waiting_permission' },
            {
              type: 'emit',
              params: ({ context }) => ({ type: 'permission_requested' as const, toolCallId: context.pendingApprovals[0]!.toolCallId, card: context.pendingApprovals[0]!.card }),
            },
          ],
        },
        waiting_user_input: {
          entry: [
            { type: 'enterPhase', params: 'waiting_user_input' },
            {
              type: 'emit',
              params: ({ context }) => ({ type: 'user_input_requested' as const, toolCallId: context.pendingUserInput[0]!.toolCallId, request: context.pendingUserInput[0]!.request }),
            },
          ],
        },
      },
    },
    // The result of a call whose tool-call machine failed (`call`'s onError) is written as any
    // result is; its span ends `outcome_unknown` with the cause, `actor_stopped`. The turn ends
    // `actor_stopped` whether or not the write succeeds: the failure is the cause of its end.
    abandoned: {
      // Out of `waiting_permission` / `waiting_user_input`: the card or question is closed.
      entry: { type: 'enterPhase', params: 'running_tools' },
      invoke: [
        {
          // The failed machine's own children (its tool run) were left running (machines/orphans.ts).
          // The input is read as this state is entered, while the failed machine is still a child.
          id: 'stopOrphans',
          src: 'stopOrphans',
          input: ({ self }) => ({ orphans: orphansOf(self.getSnapshot().children.toolCall) }),
        },
        {
          id: 'record',
          src: 'recordToolResult',
          input: ({ context }) => ({
            ...recordInputOf(context.direct!, { sessionId: context.fixed.sessionId, turnId: context.turnId }),
            spanErrorCode: 'actor_stopped',
          }),
          onDone: {
            target: 'cancelling_remaining',
            actions: [
              { type: 'announceDirectFinished', params: ({ event }) => event.output },
              { type: 'finishDirect', params: ({ event }) => ({ recorded: true, stored: event.output }) },
            ],
          },
          onError: { target: 'cancelling_remaining', actions: { type: 'finishDirect', params: { recorded: false } } },
        },
      ],
    },
    cancelling_remaining: {
      invoke: {
        id: 'recordCancelledCalls',
        src: 'recordCancelledCalls',
        input: ({ context }) => ({
          sessionId: context.fixed.sessionId,
          turnId: context.turnId,
          calls: (context.batch?.calls ?? [])
            .map((call, i) => ({ toolCallId: context.batch!.toolCallIds[i]!, call }))
            .slice(context.counts.batchIndex),
          parentSpanId: `${context.turnId}.model${context.counts.submissionCount}`,
        }),
        onDone: {
          target: '#turn.ending',
          actions: [
            enqueueActions(({ context, self, event, enqueue }) => {
              for (const [i, call] of (context.batch?.calls ?? []).entries()) {
                if (i < context.counts.batchIndex) continue;
                announceToParent(
                  enqueue,
                  self,
                  event,
                  toolCallFinishedUpdate({ toolCallId: context.batch!.toolCallIds[i]!, providerCallId: call.callId, toolName: call.name }, cancelledResult(REMAINING_CALL_TEXT)),
                );
              }
            }),
            assign(({ context }) => ({
              liveToolCalls: context.liveToolCalls.map((c, i) =>
                i >= context.counts.batchIndex ? { ...c, status: 'finished' as const, result: { status: 'cancelled' as const, text: REMAINING_CALL_TEXT } } : c,
              ),
            })),
          ],
        },
        onError: {
          target: '#turn.ending',
          actions: assign({
            outcome: ({ context, event }) => (context.outcome?.status === 'failed' ? context.outcome : storageFailure(event.error)),
          }),
        },
      },
    },
  },
});
