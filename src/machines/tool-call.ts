/**
 * @module machines/tool-call
 * The part of one tool call's lifecycle (seed 000 §5) that can wait: a permission card
 * (waiting_permission → executing → recording) and the control tools (update_plan,
 * request_user_input, the agent tools, in `control`). The Turn validates and authorises every call
 * with its own actors and runs a call that needs neither itself (`tools.run`); it spawns this machine
 * only for a call that has to wait, with the validation and authorisation it already made
 * (`input.start`). It always ends with a result (written, or at least decided) and says whether the
 * call terminates the turn.
 */
import { assign, enqueueActions, fromCallback, fromPromise, sendParent, sendTo, setup, type ActorRefFrom, type AnyActorRef } from 'xstate';
import type { PermissionDecision } from '../protocol/input.js';
import type { TurnPlanSnapshot } from '../protocol/plan.js';
import type { PermissionCard, SessionUpdate } from '../protocol/updates.js';
import { answersResultText, type UserInputRequest } from '../protocol/user-input.js';
import { NON_INTERACTIVE_REFUSAL_TEXT } from '../services/permissions/texts.js';
import type { ToolResult } from '../services/tools/define.js';
import type {
  ApprovalRecord,
  LiveToolCall,
  Grants,
  ToolCallEvent,
  ToolCallInput,
  ToolCallOutput,
  ToolCallTerminal,
} from './types.js';

export const USER_DENIED_TEXT = 'The user denied this tool call.';
export const UNANSWERED_TEXT = 'the turn was cancelled before the user answered';
export const CANCELLED_BEFORE_RUN_TEXT = 'tool call was cancelled before it ran';
/** A refused write of a session another runtime owns now ends the turn `ownership_lost` (issue 15); any other, `persistence_error`. */
export function storageTerminalCode(error: unknown): 'ownership_lost' | 'persistence_error' {
  return (error as { code?: string } | null)?.code === 'ownership_lost' ? 'ownership_lost' : 'persistence_error';
}

export const ACTOR_STOPPED_TEXT = 'the runtime stopped while this tool call was pending; its outcome is unknown';
/** Reference §4.13: the refusal a sub-agent gets instead of a card (the text lives with the other policy texts). */
export { NON_INTERACTIVE_REFUSAL_TEXT };

export interface RecordInput {
  sessionId: string;
  turnId: string;
  toolCallId: string;
  providerCallId: string;
  toolName: string;
  result: ToolResult;
  approval: ApprovalRecord;
  resolvedName: string | null;
  /** The mode the call ran (or would have run) under, for the trace's `sessionMode` / `sandboxMode`. */
  permissionMode: ToolCallInput['permissionMode'];
  /** Where that mode came from, for the trace's `sessionModeOrigin`. */
  permissionModeOrigin: ToolCallInput['permissionModeOrigin'];
  /** Whether the tool itself ran (the trace records `sandboxMode` only then). */
  executed: boolean;
}

export interface ExecuteInput {
  sessionId: string;
  turnId: string;
  toolCallId: string;
  providerCallId: string;
  toolName: string;
  args: unknown;
  permissionMode: ToolCallInput['permissionMode'];
  approval: ApprovalRecord;
}

export interface PlanCommitInput {
  sessionId: string;
  turnId: string;
  toolCallId: string;
  providerCallId: string;
  args: unknown;
  /** The session's mode and its origin at call time, for the trace (a control tool has no `sandboxMode`). */
  permissionMode: ToolCallInput['permissionMode'];
  permissionModeOrigin: ToolCallInput['permissionModeOrigin'];
}

export type PlanCommitOutput = { ok: true; result: ToolResult; plan: TurnPlanSnapshot } | { ok: false; result: ToolResult };

export interface AgentToolInput {
  sessionId: string;
  turnId: string;
  toolCallId: string;
  toolName: string;
  args: unknown;
}

export interface AgentToolOutput {
  result: ToolResult;
  waitTimedOut?: boolean;
}

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

/** How a turn ends after a tool finished running: stopped, cancelled (by request or by the tool), or not at all. */
export function terminalAfterRun(
  stopRequest: 'cancel' | 'stop' | null | undefined,
  result: ToolResult,
): { code: 'actor_stopped' | 'cancelled'; message: string } | null {
  if (stopRequest === 'stop') return { code: 'actor_stopped', message: 'the session actor stopped while a tool was running' };
  if (stopRequest === 'cancel' || result.status === 'cancelled') return { code: 'cancelled', message: 'the turn was cancelled' };
  return null;
}

export function failed(code: NonNullable<ToolResult['error']>['code'], message: string): ToolResult {
  return { status: 'failed', text: message, error: { code, message, retryable: false } };
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
 * has no such actor and shows the Turn's own state (`directCallStatusOf` in machines/turn.ts).
 */
export function liveToolCallOf(snapshot: { value: unknown; context: ToolCallContext }): Pick<LiveToolCall, 'status' | 'result'> {
  const value = snapshot.value;
  if (value === 'done') {
    const result = snapshot.context.result;
    return snapshot.context.recorded && result ? { status: 'finished', result: { status: result.status, text: result.text } } : { status: 'recording' };
  }
  if (value === 'waiting_permission' || value === 'executing' || value === 'recording') return { status: value };
  const control = (value as { control?: unknown } | null)?.control;
  return { status: control === 'user_input' ? 'waiting_user_input' : 'validating' };
}

/** Whether an earlier "allow for turn/session" already covers this card. */
export function hasGrant(grants: Grants, card: PermissionCard): boolean {
  return grants[card.environmentId]?.includes(card.grantKey) ?? false;
}

/** The result and terminal of a call stopped before its tool ran: a cancel, or the actor stopping. */
export function stopBeforeRun(stop: boolean): { stopRequest: 'cancel' | 'stop'; result: ToolResult; terminal: ToolCallTerminal } {
  return stop
    ? {
        stopRequest: 'stop',
        result: { status: 'outcome_unknown', text: ACTOR_STOPPED_TEXT, error: { code: 'outcome_unknown', message: ACTOR_STOPPED_TEXT, retryable: false } },
        terminal: { code: 'actor_stopped', message: 'the session actor stopped' },
      }
    : {
        stopRequest: 'cancel',
        result: { status: 'cancelled', text: CANCELLED_BEFORE_RUN_TEXT, error: { code: 'cancelled', message: CANCELLED_BEFORE_RUN_TEXT, retryable: false } },
        terminal: { code: 'cancelled', message: 'the turn was cancelled' },
      };
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
  actions: {
    recordStopBeforeRun: assign(({ context, event }) => stopBeforeRun(event.type === 'toolcall.stop' || context.stopRequest === 'stop')),
    announceResolved: sendParent(({ context, event }) => ({
      type: 'toolcall.permission_resolved' as const,
      toolCallId: context.toolCallId,
      decision: (event as Extract<ToolCallEvent, { type: 'toolcall.decide' }>).decision as PermissionDecision,
    })),
    abortExecution: sendTo('execute', { type: 'toolcall.cancel' }),
    /**
     * Hands an update to the session directly (one hop): the session sequences it and builds the
     * envelope. The session is the Turn's parent, the Turn this call's parent; nothing in between
     * relays or changes an update.
     */
    publish: sendTo(({ self }) => sessionOf(self), (_, update: SessionUpdate) => ({ type: 'session.publish' as const, update })),
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
    announceFinished: enqueueActions(({ context, self, enqueue }) => {
      if (!context.recorded || !context.result) return;
      const result = context.result;
      if (context.plan) {
        // Reference §6.4: plan_updated (full snapshot) after the commit, then tool_call_finished.
        enqueue.sendTo(sessionOf(self), {
          type: 'session.publish',
          update: { type: 'plan_updated', explanation: context.plan.explanation, plan: context.plan.steps, updatedAt: context.plan.updatedAt },
        });
      }
      enqueue.sendTo(sessionOf(self), {
        type: 'session.publish',
        update: {
          type: 'tool_call_finished',
          toolCallId: context.toolCallId,
          providerCallId: context.call.callId,
          toolName: context.call.name,
          status: result.status,
          text: result.text,
          ...(result.error ? { error: result.error } : {}),
        },
      });
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
                result: { status: 'denied' as const, text: USER_DENIED_TEXT, error: { code: 'permission_denied' as const, message: USER_DENIED_TEXT, retryable: false } },
                terminal: { code: 'permission_denied' as const, message: 'the user denied a tool call' },
                approval: { ...context.approval, decision: 'deny' as const, source: 'user', decidedAt: event.at },
              })),
              'announceResolved',
            ],
          },
          {
            target: 'executing',
            actions: [
              assign(({ event, context }) => ({
                approval: { ...context.approval, decision: event.decision, source: 'user', decidedAt: event.at },
              })),
              'announceGrant',
              'announceResolved',
            ],
          },
        ],
        'toolcall.cancel': {
          target: 'recording',
          actions: [
            assign(({ context }) => ({
              stopRequest: 'cancel' as const,
              result: { status: 'cancelled' as const, text: CANCELLED_BEFORE_RUN_TEXT, error: { code: 'cancelled' as const, message: CANCELLED_BEFORE_RUN_TEXT, retryable: false } },
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
              result: { status: 'outcome_unknown' as const, text: ACTOR_STOPPED_TEXT, error: { code: 'outcome_unknown' as const, message: ACTOR_STOPPED_TEXT, retryable: false } },
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
        input: ({ context }) => ({
          sessionId: context.sessionId,
          turnId: context.turnId,
          toolCallId: context.toolCallId,
          providerCallId: context.call.callId,
          toolName: context.call.name,
          args: context.args,
          permissionMode: context.permissionMode,
          approval: context.approval,
        }),
        onError: {
          target: 'recording',
          actions: assign({ result: ({ event }) => failed('execution_failed', String((event.error as Error)?.message ?? event.error)) }),
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
        // The tool gets its abort and reports how it ended; a process tree must be killed, not orphaned.
        'toolcall.cancel': {
          actions: [assign({ stopRequest: ({ context }) => context.stopRequest ?? 'cancel' }), 'abortExecution'],
        },
        'toolcall.stop': { actions: [assign({ stopRequest: () => 'stop' as const }), 'abortExecution'] },
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
                  result: { status: 'succeeded' as const, text: answersResultText(context.args as UserInputRequest, event.answers) },
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
                  result: { status: 'cancelled' as const, text: UNANSWERED_TEXT, error: { code: 'cancelled' as const, message: UNANSWERED_TEXT, retryable: false } },
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
                actions: assign(({ event }) => {
                  const out = event.output as Extract<PlanCommitOutput, { ok: true }>;
                  return { result: out.result, plan: out.plan, recorded: true };
                }),
              },
              { target: '#toolCall.recording', actions: assign({ result: ({ event }) => event.output.result }) },
            ],
            onError: {
              target: '#toolCall.done',
              actions: assign(({ event }) => ({
                result: failed('execution_failed', 'the plan could not be saved'),
                terminal: { code: storageTerminalCode(event.error), message: String((event.error as Error)?.message ?? event.error) },
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
              actions: assign({ result: ({ event }) => failed('execution_failed', String((event.error as Error)?.message ?? event.error)) }),
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
        input: ({ context }) => ({
          sessionId: context.sessionId,
          turnId: context.turnId,
          toolCallId: context.toolCallId,
          providerCallId: context.call.callId,
          toolName: context.call.name,
          result: context.result!,
          approval: context.approval,
          resolvedName: context.resolvedName,
          permissionMode: context.permissionMode,
          permissionModeOrigin: context.permissionModeOrigin,
          executed: context.executed,
        }),
        onDone: { target: 'done', actions: assign({ recorded: true, result: ({ event }) => event.output }) },
        onError: {
          target: 'done',
          actions: assign(({ event }) => {
            const error = event.error as { code?: string; message?: string };
            return {
              recorded: false,
              terminal: {
                code: error?.code === 'chat_state_error' ? ('chat_state_error' as const) : storageTerminalCode(error),
                message: String(error?.message ?? event.error),
              },
            };
          }),
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
    result: context.result ?? failed('execution_failed', 'the tool call ended without a result'),
    recorded: context.recorded,
    terminal: context.terminal,
    doom: context.doom,
    plan: context.plan,
  }),
});

export type ToolCallActorRef = ActorRefFrom<typeof toolCallMachine>;
