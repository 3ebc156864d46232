/**
 * @module machines/tool-call/machine
 * The part of one tool call's lifecycle (seed 000 §5) that can wait: a permission card
 * (waiting_permission → executing → recording) and the control tools (update_plan,
 * request_user_input, the agent tools, in `control`). The Turn validates and authorises every call
 * with its own actors and runs a call that needs neither itself (`tools.run`); it spawns this machine
 * only for a call that has to wait, with the validation and authorisation it already made
 * (`input.start`). It always ends with a result (written, or at least decided) and says whether the
 * call terminates the turn.
 */
import { fromCallback, fromPromise, sendParent, sendTo, setup, type ActorRefFrom, type AnyActorRef } from 'xstate';
import { assign } from '../assign.js';
import { enqueueActions } from '../enqueue.js';
import type { PermissionDecision } from '../../protocol/input.js';
import type { TurnPlanSnapshot } from '../../protocol/plan.js';
import type { PermissionCard, SessionUpdate } from '../../protocol/updates.js';
import { answersResultText, type UserInputRequest } from '../../protocol/user-input.js';
import {
  ACTOR_STOPPED_TEXT,
  CANCELLED_BEFORE_RUN_TEXT,
  NO_RESULT_TEXT,
  NON_INTERACTIVE_REFUSAL_TEXT,
  PLAN_NOT_SAVED_TEXT,
  UNANSWERED_TEXT,
  USER_DENIED_TEXT,
} from '../../protocol/model-texts.js';
import { cancelledResult, deniedResult, failedResult, outcomeUnknownResult, succeededResult, toolCallFinishedUpdate, type ToolResult } from '../../protocol/tool-result.js';
import type {
  ApprovalRecord,
  LiveToolCall,
  Grants,
  ToolCallEvent,
  ToolCallInput,
  ToolCallOutput,
  ToolCallTerminal,
} from '../types.js';
import { batchUpdate } from '../publish.js';
import {
  executeInputOf,
  recordInputOf,
  type AgentToolInput,
  type AgentToolOutput,
  type ExecuteInput,
  type PlanCommitInput,
  type PlanCommitOutput,
  type RecordInput,
} from './ports.js';
import { DEFAULT_TOOL_CANCEL_GRACE_MS, TOOL_CANCEL_GRACE } from './cancel-grace.js';
import { actorFailureResult, failureText, recordFailureTerminal, stopBeforeRun, storageTerminalCode, terminalAfterRun, unconfirmedStop } from './outcomes.js';


/** The texts this machine writes as results live with every other text the model sees. */
export { ACTOR_STOPPED_TEXT, CANCELLED_BEFORE_RUN_TEXT, NON_INTERACTIVE_REFUSAL_TEXT, UNANSWERED_TEXT, USER_DENIED_TEXT };

export interface ToolCallContext extends ToolCallInput {
  args: unknown;
  resolvedName: string | null;
  card: PermissionCard | null;
  approval: ApprovalRecord;
  result: ToolResult | null;
  terminal: ToolCallTerminal | null;
  stopRequest: 'cancel' | 'stop' | null;
  recorded: boolean;
  executed: boolean;
  plan: TurnPlanSnapshot | null;
  waitTimedOut: boolean | null;
}

function notProvided(name: string): never {
  throw new Error(`tool-call actor "${name}" was not provided`);
}

/** The Session actor of a tool call: its Turn's parent. */
function sessionOf(self: AnyActorRef): AnyActorRef {
  // Always set: a tool call runs only under a Turn, and a Turn only under a Session.
  return self._parent!._parent!;
}

/**
 * A running call as the snapshot shows it, read from the tool-call actor's own state when a host
 * asks (instead of an event to the Turn on every status change of every call). Control tools
 * other than request_user_input show `validating`, as they always did; a call the Turn runs itself
 * has no such actor and shows the Turn's own state (`directCallStatusOf` in machines/turn/context.ts).
 */
export function liveToolCallOf(snapshot: { value: unknown; context: ToolCallContext }): Pick<LiveToolCall, 'status' | 'result'> {
  const value = snapshot.value;
  if (value === 'done') {
    const result = snapshot.context.result;
    return snapshot.context.recorded && result ? { status: 'finished', result: { status: result.status, text: result.text } } : { status: 'recording' };
  }
  if (value === 'waiting_permission' || value === 'recording') return { status: value };
  // A tool asked to stop (`executing.stopping`) is still executing until it reports how it ended.
  if ((value as { executing?: unknown } | null)?.executing !== undefined) return { status: 'executing' };
  const control = (value as { control?: unknown } | null)?.control;
  return { status: control === 'user_input' ? 'waiting_user_input' : 'validating' };
}

/** Whether an earlier "allow for turn/session" already covers this card. */
export function hasGrant(grants: Grants, card: PermissionCard): boolean {
  return grants[card.environmentId]?.includes(card.grantKey) ?? false;
}

const toolCallSetup = setup({
  types: {
    context: {} as ToolCallContext,
    input: {} as ToolCallInput,
    output: {} as ToolCallOutput,
    events: {} as ToolCallEvent,
  },
  actors: {
    executeTool: fromCallback<ToolCallEvent, ExecuteInput>(() => notProvided('executeTool')),
    commitPlanUpdate: fromPromise<PlanCommitOutput, PlanCommitInput>(async () => notProvided('commitPlanUpdate')),
    runAgentTool: fromPromise<AgentToolOutput, AgentToolInput>(async () => notProvided('runAgentTool')),
    /** Writes the result and answers it as stored (made storable, issue 13.2): the update repeats that. */
    recordToolResult: fromPromise<ToolResult, RecordInput>(async () => notProvided('recordToolResult')),
  },
  guards: {
    planCommitted: (_, output: PlanCommitOutput) => output.ok,
  },
  delays: { [TOOL_CANCEL_GRACE]: DEFAULT_TOOL_CANCEL_GRACE_MS },
  actions: {
    recordStopBeforeRun: assign(({ context, event }) => stopBeforeRun(event.type === 'toolcall.stop' || context.stopRequest === 'stop')),
    announceResolved: sendParent(({ context }, decision: PermissionDecision) => ({
      type: 'toolcall.permission_resolved' as const,
      toolCallId: context.toolCallId,
      decision,
    })),
    abortExecution: sendTo('execute', { type: 'toolcall.cancel' }),
    /**
     * Hands an update to the session directly (one hop): the session sequences it and builds the
     * envelope. The session is the Turn's parent, the Turn this call's parent; nothing in between
     * relays or changes an update. The updates of one macrostep go as one event (machines/publish.ts).
     */
    publish: enqueueActions(({ self, event, enqueue }, update: SessionUpdate) => {
      const batch = batchUpdate(self, event, update);
      if (batch !== null) enqueue.sendTo(sessionOf(self), batch);
    }),
    announceGrant: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'toolcall.decide') return;
      if (event.decision !== 'allow_for_turn' && event.decision !== 'allow_for_session') return;
      enqueue.sendParent({
        type: 'toolcall.granted',
        scope: event.decision === 'allow_for_turn' ? 'turn' : 'session',
        environmentId: context.card!.environmentId,
        grantKey: context.card!.grantKey,
      });
    }),
    announceFinished: enqueueActions(({ context, self, event, enqueue }) => {
      if (!context.recorded || !context.result) return;
      const result = context.result;
      const publish = (update: SessionUpdate) => {
        const batch = batchUpdate(self, event, update);
        if (batch !== null) enqueue.sendTo(sessionOf(self), batch);
      };
      // Reference §6.4: plan_updated (full snapshot) after the commit, then tool_call_finished.
      if (context.plan) publish({ type: 'plan_updated', explanation: context.plan.explanation, plan: context.plan.steps, updatedAt: context.plan.updatedAt });
      publish(toolCallFinishedUpdate({ toolCallId: context.toolCallId, providerCallId: context.call.callId, toolName: context.call.name }, result));
    }),
  },
});

export const toolCallMachine = toolCallSetup.createMachine({
  id: 'toolCall',
  context: ({ input }) => ({
    ...input,
    args: input.start?.args,
    doom: input.start?.doom ?? input.doom,
    resolvedName: input.call.name,
    card: input.start?.kind === 'card' ? input.start.card : null,
    approval:
      input.start?.kind === 'card'
        ? { decision: 'none', source: 'sandbox', card: input.start.card, requestedAt: input.start.at, decidedAt: null }
        : { decision: 'none', source: 'control_tool', card: null, requestedAt: null, decidedAt: null },
    result: null,
    terminal: null,
    stopRequest: null,
    recorded: false,
    executed: false,
    plan: null,
    waitTimedOut: null,
  }),
  initial: 'routing',
  on: {
    'toolcall.cancel': { actions: assign({ stopRequest: ({ context }) => context.stopRequest ?? 'cancel' }) },
    'toolcall.stop': { actions: assign({ stopRequest: () => 'stop' as const }) },
  },
  states: {
    // The Turn already validated and authorised the call: it waits for a card or is a control tool.
    routing: {
      always: [{ guard: ({ context }) => context.start?.kind === 'card', target: 'waiting_permission' }, { target: 'control' }],
    },
    waiting_permission: {
      entry: [
        sendParent(({ context }) => ({ type: 'toolcall.permission_requested', toolCallId: context.toolCallId, card: context.card! })),
      ],
      on: {
        'toolcall.decide': [
          {
            guard: ({ event }) => event.decision === 'deny',
            target: 'recording',
            actions: [
              assign(({ event, context }) => ({
                result: deniedResult(USER_DENIED_TEXT),
                terminal: { code: 'permission_denied' as const, message: 'the user denied a tool call' },
                approval: { ...context.approval, decision: 'deny' as const, source: 'user', decidedAt: event.at },
              })),
              { type: 'announceResolved', params: ({ event }) => event.decision },
            ],
          },
          {
            target: 'executing',
            actions: [
              assign(({ event, context }) => ({
                approval: { ...context.approval, decision: event.decision, source: 'user', decidedAt: event.at },
              })),
              'announceGrant',
              { type: 'announceResolved', params: ({ event }) => event.decision },
            ],
          },
        ],
        'toolcall.cancel': {
          target: 'recording',
          actions: [
            assign(({ context }) => ({
              stopRequest: 'cancel' as const,
              result: cancelledResult(CANCELLED_BEFORE_RUN_TEXT),
              terminal: { code: 'cancelled' as const, message: 'the turn was cancelled' },
              approval: { ...context.approval, decision: 'none' as const, source: 'user' },
            })),
            sendParent(({ context }) => ({ type: 'toolcall.permission_resolved', toolCallId: context.toolCallId, decision: 'cancelled' })),
          ],
        },
        'toolcall.stop': {
          target: 'recording',
          actions: [
            assign(() => ({
              stopRequest: 'stop' as const,
              result: outcomeUnknownResult(ACTOR_STOPPED_TEXT),
              terminal: { code: 'actor_stopped' as const, message: 'the session actor stopped while a permission was pending' },
            })),
            sendParent(({ context }) => ({ type: 'toolcall.permission_resolved', toolCallId: context.toolCallId, decision: 'actor_stopped' })),
          ],
        },
      },
    },
    executing: {
      invoke: {
        id: 'execute',
        src: 'executeTool',
        input: ({ context }) => executeInputOf(context, context),
        onError: {
          target: 'recording',
          actions: assign({ result: ({ event }) => actorFailureResult(event.error) }),
        },
      },
      on: {
        'tool.progress': {
          actions: { type: 'publish', params: ({ context, event }) => ({ type: 'tool_call_progress', toolCallId: context.toolCallId, progress: event.progress }) },
        },
        'tool.finished': {
          target: 'recording',
          actions: assign(({ context, event }) => ({
            result: event.result,
            executed: true,
            terminal: terminalAfterRun(context.stopRequest, event.result),
          })),
        },
      },
      initial: 'running',
      states: {
        running: {
          on: {
            'toolcall.cancel': { target: 'stopping', actions: assign({ stopRequest: ({ context }) => context.stopRequest ?? 'cancel' }) },
            'toolcall.stop': { target: 'stopping', actions: assign({ stopRequest: () => 'stop' as const }) },
          },
        },
        // The tool got its abort (bash kills its process group at once) and reports how it ended; a
        // tool that has not confirmed its stop when the grace elapses ends outcome_unknown, and
        // leaving this state stops its actor. A second cancel or a stop is noted by the root handlers.
        stopping: {
          entry: 'abortExecution',
          after: {
            [TOOL_CANCEL_GRACE]: { target: '#toolCall.recording', actions: assign(({ context }) => unconfirmedStop(context.stopRequest)) },
          },
        },
      },
    },
    control: {
      initial: 'routing',
      states: {
        routing: {
          always: [
            { guard: ({ context }) => context.call.name === 'update_plan', target: 'plan' },
            { guard: ({ context }) => context.call.name === 'request_user_input', target: 'user_input' },
            { target: 'agent' },
          ],
        },
        // The model asked the user; the turn waits like it waits for a card, and a cancel ends the wait.
        user_input: {
          entry: [
            sendParent(({ context }) => ({
              type: 'toolcall.user_input_requested' as const,
              toolCallId: context.toolCallId,
              request: context.args as UserInputRequest,
            })),
          ],
          on: {
            'toolcall.answer': {
              target: '#toolCall.recording',
              actions: [
                assign(({ context, event }) => ({
                  result: succeededResult(answersResultText(context.args as UserInputRequest, event.answers)),
                })),
                sendParent(({ context, event }) => ({
                  type: 'toolcall.user_input_resolved' as const,
                  toolCallId: context.toolCallId,
                  outcome: 'answered' as const,
                  answers: event.answers,
                })),
              ],
            },
            'toolcall.cancel': {
              target: '#toolCall.recording',
              actions: [
                assign(() => ({
                  stopRequest: 'cancel' as const,
                  result: cancelledResult(UNANSWERED_TEXT),
                  terminal: { code: 'cancelled' as const, message: 'the turn was cancelled' },
                })),
                sendParent(({ context }) => ({ type: 'toolcall.user_input_resolved' as const, toolCallId: context.toolCallId, outcome: 'cancelled' as const })),
              ],
            },
            'toolcall.stop': {
              target: '#toolCall.recording',
              actions: [
                'recordStopBeforeRun',
                sendParent(({ context }) => ({ type: 'toolcall.user_input_resolved' as const, toolCallId: context.toolCallId, outcome: 'cancelled' as const })),
              ],
            },
          },
        },
        plan: {
          invoke: {
            id: 'commitPlan',
            src: 'commitPlanUpdate',
            input: ({ context }) => ({
              sessionId: context.sessionId,
              turnId: context.turnId,
              toolCallId: context.toolCallId,
              providerCallId: context.call.callId,
              args: context.args,
              permissionMode: context.permissionMode,
              permissionModeOrigin: context.permissionModeOrigin,
            }),
            onDone: [
              {
                guard: { type: 'planCommitted', params: ({ event }) => event.output },
                target: '#toolCall.done',
                // The guard above took this branch only for a committed plan; the check narrows the type.
                actions: assign(({ event }) => (event.output.ok ? { result: event.output.result, plan: event.output.plan, recorded: true } : {})),
              },
              { target: '#toolCall.recording', actions: assign({ result: ({ event }) => event.output.result }) },
            ],
            onError: {
              target: '#toolCall.done',
              actions: assign(({ event }) => ({
                result: failedResult('execution_failed', PLAN_NOT_SAVED_TEXT),
                terminal: { code: storageTerminalCode(event.error), message: failureText(event.error) },
              })),
            },
          },
        },
        agent: {
          invoke: {
            id: 'runAgentTool',
            src: 'runAgentTool',
            input: ({ context }) => ({
              sessionId: context.sessionId,
              turnId: context.turnId,
              toolCallId: context.toolCallId,
              toolName: context.call.name,
              args: context.args,
            }),
            onDone: {
              target: '#toolCall.recording',
              actions: assign(({ context, event }) => ({
                result: event.output.result,
                waitTimedOut: event.output.waitTimedOut ?? null,
                // A spawn or follow-up that was already under way is recorded as it happened; the turn still ends.
                terminal: context.stopRequest === 'cancel' ? { code: 'cancelled' as const, message: 'the turn was cancelled' } : context.terminal,
              })),
            },
            onError: {
              target: '#toolCall.recording',
              actions: assign({ result: ({ event }) => actorFailureResult(event.error) }),
            },
          },
          on: {
            // wait_agent ends at once on cancel or stop; the other agent tools finish what they started.
            'toolcall.cancel': [
              { guard: ({ context }) => context.call.name === 'wait_agent', target: '#toolCall.recording', actions: 'recordStopBeforeRun' },
              { actions: assign({ stopRequest: ({ context }) => context.stopRequest ?? 'cancel' }) },
            ],
            'toolcall.stop': [
              { guard: ({ context }) => context.call.name === 'wait_agent', target: '#toolCall.recording', actions: 'recordStopBeforeRun' },
              { actions: assign({ stopRequest: () => 'stop' as const }) },
            ],
          },
        },
      },
    },
    recording: {
      invoke: {
        id: 'record',
        src: 'recordToolResult',
        input: ({ context }) => recordInputOf(context, context),
        onDone: { target: 'done', actions: assign({ recorded: true, result: ({ event }) => event.output }) },
        onError: {
          target: 'done',
          actions: assign(({ event }) => ({ recorded: false, terminal: recordFailureTerminal(event.error) })),
        },
      },
    },
    done: {
      type: 'final',
      entry: 'announceFinished',
    },
  },
  output: ({ context }) => ({
    waitTimedOut: context.waitTimedOut,
    toolCallId: context.toolCallId,
    providerCallId: context.call.callId,
    toolName: context.call.name,
    result: context.result ?? failedResult('execution_failed', NO_RESULT_TEXT),
    recorded: context.recorded,
    terminal: context.terminal,
    doom: context.doom,
    plan: context.plan,
  }),
});

export type ToolCallActorRef = ActorRefFrom<typeof toolCallMachine>;
