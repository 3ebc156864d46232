/**
 * @module machines/turn
 * The Turn machine: one ActiveTurn of a session (seed 000 §3-§6, seed 004 TurnState).
 *
 *   starting → running_model (checking → draining → streaming (sampling → requesting → receiving) → persisting) ⇄ compacting
 *              running_model → tools.run (validating → authorizing: one check actor; executing → recording) → running_model
 *                              tools.run → tools.call (a card or a control tool: the tool-call machine)
 *                                          call.running_tools ⇄ call.waiting_permission | call.waiting_user_input
 *   → ending → completed | failed | cancelled
 *
 * Every effect (the model call, each storage write, each tool run) is an invoked actor with an
 * error path. Cancel stops whatever is invoked; storage writes already in flight finish first, so
 * that no committed fact is left half-known.
 */
import { assign, enqueueActions, fromCallback, fromEventObservable, fromPromise, sendParent, sendTo, setup, type ActorRefFrom, type SnapshotFrom } from 'xstate';
import { TEXT_BLOCK_SEPARATOR, type NewMessage, type ToolCallBlock } from '../protocol/content.js';
import type { TurnPlanSnapshot } from '../protocol/plan.js';
import { storableText } from '../protocol/storable-text.js';
import type { Phase, SessionUpdate, TurnOutcome } from '../protocol/updates.js';
import type { AgentMessage } from '../services/agents/mailbox.js';
import { addUsage, type TokenUsage } from '../storage/storage.js';
import { authorizationFailedText, doomLoopText, NO_RESULT_TEXT, NON_INTERACTIVE_REFUSAL_TEXT, REMAINING_CALL_TEXT, validationFailedText } from '../protocol/model-texts.js';
import { hasGrant, toolCallMachine } from './tool-call/machine.js';
import { recordFailureTerminal, stopBeforeRun, terminalAfterRun } from './tool-call/outcomes.js';
import { executeInputOf, recordInputOf, type ExecuteInput, type RecordInput } from './tool-call/ports.js';
import { cancelledResult, deniedResult, failedResult, toolCallFinishedUpdate, type ToolResult } from '../protocol/tool-result.js';
import type {
  AuthorizationOutput,
  CheckToolCallEvent,
  DirectCall,
  DoomState,
  Grants,
  LiveToolCall,
  ModelDraft,
  PendingApproval,
  PendingUserInput,
  ToolBatch,
  ToolCallOutput,
  TurnEvent,
  TurnInput,
  TurnOutput,
  ToolCallEvent,
  ToolCallInput,
  ValidatedCall,
} from './types.js';

export { REMAINING_CALL_TEXT };

const ZERO_USAGE: TokenUsage = { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 };

export interface TurnContext extends TurnInput {
  phase: Phase | null;
  turnGrants: Grants;
  pendingApprovals: PendingApproval[];
  /** request_user_input questions waiting for the host's answers (seed 004 `pending_user_input`). */
  pendingUserInput: PendingUserInput[];
  modelCallIndex: number;
  submissionCount: number;
  /**
   * The logical model call whose counters a fact already wrote (begin turn, the batch's last tool
   * result), 0 for none: that call writes no counter statement of its own, and the turn's end takes
   * it back if it is never made. `reserving` is the call a fact in flight asks for; it becomes
   * `reservedCall` when that fact has committed.
   */
  reservedCall: number;
  reserving: number;
  toolCallCount: number;
  usage: TokenUsage;
  /** The last assembled request's estimate, for a compaction's trace. */
  estimatedInputTokens: number | null;
  draft: ModelDraft;
  batch: ToolBatch | null;
  batchIndex: number;
  liveToolCalls: LiveToolCall[];
  /** The call the Turn runs with its own actors (`tools.run`), until it ends or has to wait. */
  direct: DirectCall | null;
  doom: DoomState;
  plan: TurnPlanSnapshot | null;
  outcome: TurnOutcome | null;
  stopRequest: 'cancel' | 'stop' | null;
  compactionTrigger: 'threshold' | 'overflow' | null;
  /** One overflow resubmission per logical model call (seed 000 §4). */
  overflowResubmitted: boolean;
  /** A threshold compaction (pruning, maybe a summary) was already tried in this logical call. */
  thresholdTried: boolean;
  /** A summary checkpoint was written in this logical call: no second compaction (reference §3.1). */
  summarizedThisCall: boolean;
  /** World State sampling number within the logical call (2 after an in-turn compaction). */
  samplingSequence: number;
  /** A checkpoint was committed but not installed: the session must refuse turns until reloaded. */
  reloadRequired: boolean;
  /** Consecutive wait_agent timeouts; reaching the doom-loop threshold ends the turn (reference §5.5). */
  waitTimeouts: number;
  endRecorded: boolean;
}

export interface BeginTurnInput {
  sessionId: string;
  turnId: string;
  clientRequestId: string;
  messages: NewMessage[];
  /** The first model call is next: its counters ride on the turn's row (`reservedCall`). */
  reserveModelCall: boolean;
}

export interface DrainInput {
  sessionId: string;
  turnId: string;
  mailbox: AgentMessage[];
  pendingInput: NewMessage[];
}

export interface DrainOutput {
  mailboxIds: string[];
  inputIds: string[];
}

export interface CallModelInput {
  sessionId: string;
  turnId: string;
  modelCallIndex: number;
  /** The span of this submission, if it is made (`<turn>.model<n>`). */
  spanId: string;
  /** World State sampling number within the logical call (reference §2.3). */
  samplingSequence: number;
  permissionMode: TurnInput['permissionMode'];
  disabledSkillNames: string[];
  systemContext: TurnInput['systemContext'];
  /** The automatic compaction line (0 = never). */
  compactAtTokens: number;
  /** Whether a request over the line asks for a threshold compaction first (once per logical call). */
  thresholdCompaction: boolean;
  /** The call's counters were written by the fact before it (`reservedCall`): no statement of its own. */
  counted: boolean;
}

/** How a model call fails before the model is asked: `stage` says where, `cause` is the error. */
export interface ModelCallSetupFailure {
  stage: 'sample' | 'assemble' | 'record';
  cause: unknown;
  message: string;
}

export interface PersistAssistantInput {
  sessionId: string;
  turnId: string;
  modelCallIndex: number;
  spanId: string;
  draft: ModelDraft;
}

export interface CompactInput {
  sessionId: string;
  turnId: string;
  trigger: 'threshold' | 'overflow';
  modelCallIndex: number;
  plan: TurnPlanSnapshot | null;
  systemContext: TurnInput['systemContext'];
  compactAtTokens: number;
  estimatedInputTokens: number | null;
  /** The failed model call of an overflow (its span id). */
  triggerModelSpanId: string | null;
}

export interface CompactOutput {
  summarized: boolean;
  checkpointId: string | null;
  conversationTokensBefore: number;
  conversationTokensAfter: number;
}

export interface CancelledCallsInput {
  sessionId: string;
  turnId: string;
  calls: Array<{ toolCallId: string; call: ToolCallBlock }>;
  parentSpanId: string | null;
}

export interface FinishInput {
  sessionId: string;
  turnId: string;
  outcome: TurnOutcome;
  planUnfinishedStepCount: number | null;
  /** A reserved model call the turn never made (0 for none): the end takes its counters back. */
  unmadeModelCall: number;
}

/** A failure as the model actor reports it (a `ModelError` or anything thrown). */
interface ModelFailure {
  code?: string;
  message?: string;
  semanticOutput?: boolean;
  /** Set when the call failed before the model was asked: its World State, request or counters. */
  stage?: 'sample' | 'assemble' | 'record';
  cause?: unknown;
}

function notProvided(name: string): never {
  throw new Error(`turn actor "${name}" was not provided`);
}

function emptyDraft(): ModelDraft {
  return { text: '', textBlocks: [], reasoning: '', toolCalls: [], opaque: [], completion: null, semantic: false };
}

function failedOutcome(code: string, message: string): TurnOutcome {
  // A provider's or a tool's message may carry a NUL; the stored end and the update say the same storable text.
  return { status: 'failed', code, message: storableText(message) };
}

function errorText(error: unknown): string {
  if (error && typeof error === 'object' && 'message' in error) return String((error as { message: unknown }).message);
  return String(error);
}

function storageFailure(error: unknown): TurnOutcome {
  const raw = (error as { code?: string } | null)?.code;
  // `ownership_lost` (issue 15): another runtime owns the session now; the write was refused whole.
  const code = raw === 'chat_state_error' || raw === 'ownership_lost' ? raw : 'persistence_error';
  return failedOutcome(code, errorText(error));
}

function stopOutcome(stop: 'cancel' | 'stop' | null): TurnOutcome {
  return stop === 'stop' ? failedOutcome('actor_stopped', 'the session actor stopped during the turn') : { status: 'cancelled' };
}

/** Deterministic, session-unique id of the n-th tool call of a turn, used by commands and updates. */
export function toolCallIdFor(turnId: string, n: number): string {
  return `${turnId}.tc${n}`;
}

const turnSetup = setup({
  types: {
    context: {} as TurnContext,
    input: {} as TurnInput,
    output: {} as TurnOutput,
    events: {} as TurnEvent,
  },
  actors: {
    beginTurn: fromPromise<void, BeginTurnInput>(async () => notProvided('beginTurn')),
    drainInbox: fromPromise<DrainOutput, DrainInput>(async () => notProvided('drainInbox')),
    callModel: fromEventObservable<TurnEvent, CallModelInput>(() => notProvided('callModel')),
    persistAssistantMessage: fromPromise<{ messageId: string; outputProblem?: string }, PersistAssistantInput>(async () => notProvided('persistAssistantMessage')),
    compactConversation: fromPromise<CompactOutput, CompactInput>(async () => notProvided('compactConversation')),
    checkToolCall: fromCallback<CheckToolCallEvent, ToolCallInput>(() => notProvided('checkToolCall')),
    executeTool: fromCallback<ToolCallEvent, ExecuteInput>(() => notProvided('executeTool')),
    recordToolResult: fromPromise<ToolResult, RecordInput>(async () => notProvided('recordToolResult')),
    toolCall: toolCallMachine,
    recordCancelledCalls: fromPromise<void, CancelledCallsInput>(async () => notProvided('recordCancelledCalls')),
    finishTurn: fromPromise<boolean, FinishInput>(async () => notProvided('finishTurn')),
  },
  guards: {
    stopRequested: ({ context }) => context.stopRequest !== null,
    maxModelCallsReached: ({ context }) => context.modelCallIndex >= context.limits.maxModelCalls,
    batchDone: ({ context }) => context.batch === null || context.batchIndex >= context.batch.calls.length,
    outcomeCompleted: ({ context }) => context.outcome?.status === 'completed',
    outcomeCancelled: ({ context }) => context.outcome?.status === 'cancelled',
    isInvalid: (_, output: ValidatedCall) => output.kind === 'invalid',
    isDoomLoop: (_, output: ValidatedCall) => output.kind === 'doom_loop',
    isControl: (_, output: ValidatedCall) => output.kind === 'control',
    isExecute: (_, output: AuthorizationOutput) => output.kind === 'execute',
    isRuleDeny: (_, output: AuthorizationOutput) => output.kind === 'deny',
    isGranted: ({ context }, output: AuthorizationOutput) =>
      output.kind === 'card' && (hasGrant(context.turnGrants, output.card) || hasGrant(context.sessionGrants, output.card)),
    isNonInteractive: ({ context }) => context.nonInteractive,
    directTerminal: ({ context }) => context.direct?.terminal != null,
  },
  actions: {
    /** Emits `phase_changed` only when the phase really changes: the chart is the source of phases. */
    enterPhase: enqueueActions(({ context, enqueue }, phase: Phase) => {
      if (context.phase === phase) return;
      enqueue.assign({ phase });
      enqueue.sendParent({ type: 'session.publish', update: { type: 'phase_changed', phase } });
    }),
    emit: sendParent((_, update: SessionUpdate) => ({ type: 'session.publish' as const, update })),
    requestStop: assign({
      stopRequest: ({ context, event }) => (event.type === 'turn.stop' ? 'stop' : (context.stopRequest ?? 'cancel')),
    }),
    outcomeFromStop: assign({ outcome: ({ context, event }) => stopOutcome(event.type === 'turn.stop' ? 'stop' : context.stopRequest) }),
    announceFinished: sendParent(({ context }) => ({
      type: 'session.publish' as const,
      update: {
        type: 'turn_finished' as const,
        outcome: context.outcome ?? failedOutcome('actor_stopped', 'the turn ended without an outcome'),
        usage: context.usage,
      },
    })),
    /** The fact that asked for a reservation has committed: the call's counters are written. */
    reservationCommitted: assign(({ context }) => (context.reserving === 0 ? {} : { reservedCall: context.reserving, reserving: 0 })),
    beginLogicalCall: assign({
      modelCallIndex: ({ context }) => context.modelCallIndex + 1,
      overflowResubmitted: false,
      thresholdTried: false,
      summarizedThisCall: false,
      samplingSequence: 1,
      compactionTrigger: null,
    }),
    /** The call stopped before its tool ran (a cancel or stop while it was validated or authorised). */
    directStopBeforeRun: assign(({ context, event }) => {
      const stopped = stopBeforeRun(event.type === 'turn.stop' || context.stopRequest === 'stop');
      return { stopRequest: stopped.stopRequest, direct: { ...context.direct!, result: stopped.result, terminal: stopped.terminal } };
    }),
    /** The direct call's end: its live entry, doom count and outcome, as a tool-call machine's output would set them. */
    /** `stored`: the result as recorded (what the stored message says), when it was recorded. */
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
      return { ...applyToolOutput(context, output, d.terminal !== null), direct: null };
    }),
    /** `tool_call_finished` once the direct call's result is stored (reference §6.4). */
    announceDirectFinished: sendParent(({ context }, result: ToolResult) => {
      const d = context.direct!;
      return {
        type: 'session.publish' as const,
        update: toolCallFinishedUpdate({ toolCallId: d.toolCallId, providerCallId: d.call.callId, toolName: d.call.name }, result),
      };
    }),
    discardDraft: enqueueActions(({ context, enqueue }) => {
      if (context.draft.semantic || context.draft.text !== '' || context.draft.reasoning !== '') {
        enqueue.sendParent({ type: 'session.publish', update: { type: 'draft_cleared', reason: 'discarded' } });
      }
      enqueue.assign({ draft: emptyDraft() });
    }),
  },
});

export const turnMachine = turnSetup.createMachine({
  id: 'turn',
  context: ({ input }) => ({
    ...input,
    phase: null,
    turnGrants: {},
    pendingApprovals: [],
    pendingUserInput: [],
    modelCallIndex: 0,
    submissionCount: 0,
    reservedCall: 0,
    reserving: 0,
    toolCallCount: 0,
    usage: ZERO_USAGE,
    estimatedInputTokens: null,
    draft: emptyDraft(),
    batch: null,
    batchIndex: 0,
    liveToolCalls: [],
    direct: null,
    doom: { signature: null, count: 0 },
    plan: null,
    outcome: null,
    stopRequest: null,
    compactionTrigger: null,
    overflowResubmitted: false,
    thresholdTried: false,
    summarizedThisCall: false,
    samplingSequence: 1,
    reloadRequired: false,
    waitTimeouts: 0,
    endRecorded: false,
  }),
  initial: 'starting',
  on: {
    'turn.cancel': { actions: 'requestStop' },
    'turn.stop': { actions: 'requestStop' },
    'turn.steer': { actions: assign({ pendingInput: ({ context, event }) => [...context.pendingInput, event.message] }) },
    'turn.mailbox': { actions: assign({ mailbox: ({ context, event }) => [...context.mailbox, event.message] }) },
    'turn.set_mode': { actions: assign({ permissionMode: ({ event }) => event.mode, permissionModeOrigin: ({ event }) => event.origin }) },
    // Rate limits are session state (seed 004 §2): the turn only passes them up.
    'model.rate_limits_reported': { actions: sendParent(({ event }) => ({ type: 'turn.rate_limits_reported' as const, snapshot: event.snapshot })) },
  },
  states: {
    starting: {
      entry: [{ type: 'enterPhase', params: 'starting' }, assign({ reserving: ({ context }) => nextModelCall(context) })],
      invoke: {
        id: 'beginTurn',
        src: 'beginTurn',
        input: ({ context }) => ({
          sessionId: context.sessionId,
          turnId: context.turnId,
          clientRequestId: context.clientRequestId,
          messages: context.messages,
          reserveModelCall: context.reserving === 1,
        }),
        onDone: { target: 'running_model', actions: 'reservationCommitted' },
        onError: { target: 'ending', actions: assign({ outcome: ({ event }) => storageFailure(event.error) }) },
      },
    },
    running_model: {
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
                outcome: ({ context }) => failedOutcome('max_model_calls', `the turn reached max_model_calls (${context.limits.maxModelCalls})`),
              }),
            },
            {
              guard: ({ context }) => context.mailbox.length === 0 && context.pendingInput.length === 0,
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
              sessionId: context.sessionId,
              turnId: context.turnId,
              mailbox: context.mailbox,
              pendingInput: context.pendingInput,
            }),
            onDone: [
              { guard: 'stopRequested', target: '#turn.ending', actions: 'outcomeFromStop' },
              {
                target: 'streaming',
                actions: assign(({ context, event }) => ({
                  mailbox: context.mailbox.filter((m) => !event.output.mailboxIds.includes(m.id)),
                  pendingInput: context.pendingInput.filter((m) => !event.output.inputIds.includes(m.id)),
                })),
              },
            ],
            onError: { target: '#turn.ending', actions: assign({ outcome: ({ event }) => storageFailure(event.error) }) },
          },
        },
        streaming: {
          // One actor per model call: it samples World State, assembles the request from the session's
          // conversation (nothing of it enters this context), asks for a threshold compaction or
          // records the call's counters, and then streams. `sampling` shows the first, `requesting`
          // the next two, `receiving` the stream.
          initial: 'sampling',
          invoke: {
            id: 'callModel',
            src: 'callModel',
            input: ({ context }) => ({
              sessionId: context.sessionId,
              turnId: context.turnId,
              modelCallIndex: context.modelCallIndex,
              spanId: `${context.turnId}.model${context.submissionCount + 1}`,
              samplingSequence: context.samplingSequence,
              permissionMode: context.permissionMode,
              disabledSkillNames: context.disabledSkillNames,
              systemContext: context.systemContext,
              compactAtTokens: context.compactAtTokens,
              thresholdCompaction: !context.thresholdTried && !context.summarizedThisCall,
              counted: context.reservedCall === context.modelCallIndex,
            }),
            onDone: [
              { guard: ({ context }) => context.draft.completion !== null, target: 'persisting' },
              {
                target: '#turn.ending',
                actions: [
                  'discardDraft',
                  assign({ outcome: () => failedOutcome('model_protocol_error', 'the model stream ended without a completed response') }),
                ],
              },
            ],
            onError: [
              {
                // World State could not be sampled (reference §2.3): nothing was asked.
                guard: ({ event }) => (event.error as ModelFailure)?.stage === 'sample',
                target: '#turn.ending',
                actions: assign({
                  outcome: ({ event }) => {
                    const cause = (event.error as ModelFailure).cause;
                    const code = (cause as { code?: string } | null)?.code;
                    const known = ['user_project_context_error', 'project_instruction_error', 'skill_catalog_task_error'];
                    return code && known.includes(code) ? failedOutcome(code, errorText(cause)) : storageFailure(cause);
                  },
                }),
              },
              {
                // The request could not be assembled (reference §2.7): nothing was recorded or sent.
                guard: ({ event }) => (event.error as ModelFailure)?.stage === 'assemble',
                target: '#turn.ending',
                actions: assign({
                  outcome: ({ context, event }) => {
                    if (context.stopRequest !== null) return stopOutcome(context.stopRequest);
                    const failure = (event.error as ModelFailure).cause as { code?: string } | undefined;
                    const known = ['user_project_context_error', 'project_instruction_error', 'skill_catalog_task_error', 'chat_state_error'];
                    const code = failure?.code && known.includes(failure.code) ? failure.code : 'model_protocol_error';
                    return failedOutcome(code, errorText(failure));
                  },
                }),
              },
              {
                // The call's counters could not be written: the model was not asked.
                guard: ({ event }) => (event.error as ModelFailure)?.stage === 'record',
                target: '#turn.ending',
                actions: assign({ outcome: ({ event }) => storageFailure((event.error as ModelFailure).cause) }),
              },
              {
                guard: ({ context, event }) =>
                  (event.error as ModelFailure)?.code === 'context_overflow' &&
                  // Without automatic compaction there is nothing to resubmit after: the turn fails.
                  context.compactionEnabled &&
                  !(event.error as ModelFailure).semanticOutput &&
                  !context.draft.semantic &&
                  !context.overflowResubmitted &&
                  !context.summarizedThisCall,
                target: '#turn.compacting',
                actions: ['discardDraft', assign({ compactionTrigger: 'overflow', overflowResubmitted: true })],
              },
              {
                target: '#turn.ending',
                actions: [
                  'discardDraft',
                  assign({
                    outcome: ({ event }) => {
                      const failure = event.error as ModelFailure;
                      const code = failure?.code === 'model_protocol_error' ? 'model_protocol_error' : 'model_error';
                      return failedOutcome(code, errorText(event.error));
                    },
                  }),
                ],
              },
            ],
          },
          states: {
            sampling: {
              // A cancel waits for the sampling in flight (the root handler notes it); the call stops
              // here, before its counters are written.
              on: {
                'model.sampled': [{ guard: 'stopRequested', target: '#turn.ending', actions: 'outcomeFromStop' }, { target: 'requesting' }],
              },
            },
            requesting: {
              // A cancel waits for the counters' write in flight (the root handler notes it).
              on: {
                'model.over_threshold': [
                  { guard: 'stopRequested', target: '#turn.ending', actions: 'outcomeFromStop' },
                  {
                    target: '#turn.compacting',
                    actions: assign({ estimatedInputTokens: ({ event }) => event.estimatedInputTokens, compactionTrigger: 'threshold', thresholdTried: true }),
                  },
                ],
                'model.call_recorded': [
                  { guard: 'stopRequested', target: '#turn.ending', actions: 'outcomeFromStop' },
                  {
                    target: 'receiving',
                    actions: assign(({ context, event }) => ({
                      submissionCount: context.submissionCount + 1,
                      // The reservation (if any) is spent: the call is being made.
                      reservedCall: 0,
                      draft: emptyDraft(),
                      compactionTrigger: null,
                      estimatedInputTokens: event.estimatedInputTokens,
                    })),
                  },
                ],
              },
            },
            receiving: {
              on: {
                'model.text_delta': {
                  // Another output message opens a text block of its own; the live text shows it as a paragraph.
                  actions: enqueueActions(({ context, event, enqueue }) => {
                    const blocks = context.draft.textBlocks;
                    const last = blocks.at(-1);
                    if (event.delta === '') {
                      // Nothing to show or store: no block is opened for it.
                      enqueue.assign({ draft: { ...context.draft, semantic: true } });
                      enqueue.sendParent({ type: 'session.publish', update: { type: 'text_delta', delta: '' } });
                      return;
                    }
                    const opens = last === undefined || (event.newBlock === true && last.text !== '');
                    const phase = event.phase !== undefined ? { phase: event.phase } : {};
                    const shown = opens && last !== undefined ? TEXT_BLOCK_SEPARATOR + event.delta : event.delta;
                    const textBlocks = opens
                      ? [...blocks, { type: 'text' as const, text: event.delta, ...phase }]
                      : [...blocks.slice(0, -1), { ...last!, ...(last!.phase === undefined ? phase : {}), text: last!.text + event.delta }];
                    enqueue.assign({ draft: { ...context.draft, text: context.draft.text + shown, textBlocks, semantic: true } });
                    enqueue.sendParent({ type: 'session.publish', update: { type: 'text_delta', delta: shown } });
                  }),
                },
                'model.reasoning_delta': {
                  actions: [
                    assign({ draft: ({ context, event }) => ({ ...context.draft, reasoning: context.draft.reasoning + event.delta, semantic: true }) }),
                    sendParent(({ event }) => ({ type: 'session.publish', update: { type: 'reasoning_delta', delta: event.delta } })),
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
                'model.completed': {
                  actions: assign({
                    draft: ({ context, event }) => ({
                      ...context.draft,
                      completion: {
                        usage: event.usage,
                        ...(event.responseId !== undefined ? { responseId: event.responseId } : {}),
                        ...(event.finishReason !== undefined ? { finishReason: event.finishReason } : {}),
                      },
                    }),
                  }),
                },
                // Leaving this state stops the model actor, which aborts the provider request.
                'turn.cancel': { target: '#turn.ending', actions: ['requestStop', 'discardDraft', 'outcomeFromStop'] },
                'turn.stop': { target: '#turn.ending', actions: ['requestStop', 'discardDraft', 'outcomeFromStop'] },
              },
            },
          },
        },
        persisting: {
          invoke: {
            id: 'persistAssistantMessage',
            src: 'persistAssistantMessage',
            input: ({ context }) => ({
              sessionId: context.sessionId,
              turnId: context.turnId,
              modelCallIndex: context.modelCallIndex,
              spanId: `${context.turnId}.model${context.submissionCount}`,
              draft: context.draft,
            }),
            onDone: [
              {
                // Structured output: a final answer that does not fit the turn's schema fails the turn.
                guard: ({ context, event }) =>
                  event.output.outputProblem !== undefined &&
                  context.draft.toolCalls.length === 0 &&
                  context.pendingInput.length === 0 &&
                  context.stopRequest === null,
                target: '#turn.ending',
                actions: [
                  { type: 'emit', params: { type: 'draft_cleared', reason: 'committed' } },
                  assign(({ context, event }) => ({
                    usage: addUsage(context.usage, context.draft.completion!.usage),
                    outcome: failedOutcome('output_invalid', event.output.outputProblem!),
                    draft: emptyDraft(),
                  })),
                ],
              },
              {
                guard: ({ context }) => context.draft.toolCalls.length === 0 && (context.pendingInput.length === 0 || context.stopRequest !== null),
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
                target: 'checking',
                actions: [
                  { type: 'emit', params: { type: 'draft_cleared', reason: 'committed' } },
                  assign(({ context }) => ({ usage: addUsage(context.usage, context.draft.completion!.usage), draft: emptyDraft() })),
                ],
              },
              {
                target: '#turn.tools',
                actions: [
                  { type: 'emit', params: { type: 'draft_cleared', reason: 'committed' } },
                  assign(({ context, event }) => {
                    const calls = context.draft.toolCalls;
                    const toolCallIds = calls.map((_, i) => toolCallIdFor(context.turnId, context.toolCallCount + i + 1));
                    return {
                      usage: addUsage(context.usage, context.draft.completion!.usage),
                      batch: { assistantMessageId: event.output.messageId, calls, toolCallIds },
                      batchIndex: 0,
                      toolCallCount: context.toolCallCount + calls.length,
                      liveToolCalls: calls.map((call, i) => ({
                        toolCallId: toolCallIds[i]!,
                        providerCallId: call.callId,
                        toolName: call.name,
                        arguments: call.arguments,
                        status: 'pending' as const,
                      })),
                      draft: emptyDraft(),
                    };
                  }),
                ],
              },
            ],
            onError: { target: '#turn.ending', actions: ['discardDraft', assign({ outcome: ({ event }) => storageFailure(event.error) })] },
          },
        },
      },
    },
    compacting: {
      entry: { type: 'enterPhase', params: 'compacting' },
      on: { 'turn.cancel': { target: 'ending', actions: 'outcomeFromStop' }, 'turn.stop': { target: 'ending', actions: 'outcomeFromStop' } },
      invoke: {
        id: 'compactConversation',
        src: 'compactConversation',
        input: ({ context }) => ({
          sessionId: context.sessionId,
          turnId: context.turnId,
          trigger: context.compactionTrigger ?? 'threshold',
          modelCallIndex: context.modelCallIndex,
          plan: context.plan,
          systemContext: context.systemContext,
          compactAtTokens: context.compactAtTokens,
          estimatedInputTokens: context.estimatedInputTokens,
          triggerModelSpanId: context.compactionTrigger === 'overflow' ? `${context.turnId}.model${context.submissionCount}` : null,
        }),
        onDone: {
          target: 'running_model.streaming',
          actions: [
            enqueueActions(({ event, context, enqueue }) => {
              if (!event.output.checkpointId) return;
              enqueue.sendParent({
                type: 'session.publish',
                update: {
                  type: 'conversation_compacted',
                  compactionId: event.output.checkpointId,
                  kind: context.compactionTrigger ?? 'threshold',
                  conversationTokensBefore: event.output.conversationTokensBefore,
                  conversationTokensAfter: event.output.conversationTokensAfter,
                },
              });
            }),
            assign(({ context, event }) => ({
              summarizedThisCall: context.summarizedThisCall || event.output.summarized,
              samplingSequence: context.samplingSequence + 1,
              compactionTrigger: null,
            })),
          ],
        },
        onError: {
          target: 'ending',
          actions: assign(({ event }) => ({
            outcome: failedOutcome('compaction_error', errorText(event.error)),
            reloadRequired: (event.error as { code?: string })?.code === 'reload_required',
          })),
        },
      },
    },
    tools: {
      id: 'tools',
      initial: 'next',
      states: {
        next: {
          always: [
            { guard: 'batchDone', target: '#turn.running_model' },
            { guard: 'stopRequested', target: 'cancelling_remaining', actions: 'outcomeFromStop' },
            {
              target: 'run',
              actions: assign(({ context }) => ({
                direct: {
                  toolCallId: context.batch!.toolCallIds[context.batchIndex]!,
                  call: context.batch!.calls[context.batchIndex]!,
                  permissionMode: context.permissionMode,
                  permissionModeOrigin: context.permissionModeOrigin,
                  args: undefined,
                  resolvedName: null,
                  doom: context.doom,
                  approval: { decision: 'none' as const, source: 'sandbox', card: null, requestedAt: null, decidedAt: null },
                  result: null,
                  terminal: null,
                  executed: false,
                  start: null,
                },
              })),
            },
          ],
        },
        // A call runs as the Turn's own actors (validate, authorize, execute, record) as long as it
        // needs nobody: no card to ask, no control tool. One that has to wait goes to `call`, which
        // spawns the tool-call machine with what was decided here (issue 14 point 3).
        run: {
          initial: 'validating',
          entry: { type: 'enterPhase', params: 'running_tools' },
          // One actor validates the call and, when the chart says so, authorises it; `validating`
          // and `authorizing` show which it is doing (issue 14 point 3: one actor fewer a call).
          invoke: { id: 'check', src: 'checkToolCall', input: ({ context }) => toolCallInputOf(context) },
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
                    actions: assign(({ context, event }) => {
                      const out = event.output as Extract<ValidatedCall, { kind: 'invalid' }>;
                      return { direct: { ...context.direct!, result: out.result, doom: out.doom, resolvedName: out.resolvedName } };
                    }),
                  },
                  {
                    guard: { type: 'isDoomLoop', params: ({ event }) => event.output },
                    target: 'recording',
                    actions: assign(({ context, event }) => {
                      const out = event.output as Extract<ValidatedCall, { kind: 'doom_loop' }>;
                      const d = context.direct!;
                      return {
                        direct: {
                          ...d,
                          result: out.result,
                          doom: out.doom,
                          resolvedName: d.call.name,
                          terminal: { code: 'doom_loop' as const, message: out.result.text },
                          approval: { ...d.approval, source: 'system' },
                        },
                      };
                    }),
                  },
                  { guard: 'stopRequested', target: 'recording', actions: 'directStopBeforeRun' },
                  {
                    guard: { type: 'isControl', params: ({ event }) => event.output },
                    target: '#tools.call',
                    actions: assign(({ context, event }) => {
                      const out = event.output as Extract<ValidatedCall, { kind: 'control' }>;
                      return {
                        direct: { ...context.direct!, args: out.args, doom: out.doom, resolvedName: context.direct!.call.name, start: { kind: 'control' as const, args: out.args, doom: out.doom } },
                      };
                    }),
                  },
                  {
                    target: 'authorizing',
                    actions: assign(({ context, event }) => {
                      const out = event.output as Extract<ValidatedCall, { kind: 'registered' }>;
                      return { direct: { ...context.direct!, args: out.args, doom: out.doom, resolvedName: context.direct!.call.name } };
                    }),
                  },
                ],
                'tool.check_failed': {
                  target: 'recording',
                  actions: assign(({ context, event }) => ({
                    direct: { ...context.direct!, result: failedResult('execution_failed', validationFailedText(errorText(event.error))) },
                  })),
                },
              },
            },
            authorizing: {
              entry: sendTo('check', ({ context }) => ({ type: 'tool.authorize' as const, args: context.direct!.args })),
              on: {
                'turn.cancel': { target: 'recording', actions: 'directStopBeforeRun' },
                'turn.stop': { target: 'recording', actions: 'directStopBeforeRun' },
                'tool.authorized': [
                  { guard: { type: 'isExecute', params: ({ event }) => event.output }, target: 'executing' },
                  {
                    guard: { type: 'isRuleDeny', params: ({ event }) => event.output },
                    target: 'recording',
                    actions: assign(({ context, event }) => {
                      const out = event.output as Extract<AuthorizationOutput, { kind: 'deny' }>;
                      // Reference §4.6: bash without a sandbox is not run and answers sandbox_unavailable.
                      const code = out.source === 'sandbox_unavailable' ? ('sandbox_unavailable' as const) : ('permission_denied' as const);
                      const d = context.direct!;
                      return {
                        direct: {
                          ...d,
                          result: deniedResult(out.text, code),
                          approval: { ...d.approval, source: out.source },
                        },
                      };
                    }),
                  },
                  {
                    guard: { type: 'isGranted', params: ({ event }) => event.output },
                    target: 'executing',
                    actions: assign(({ context, event }) => {
                      const out = event.output as Extract<AuthorizationOutput, { kind: 'card' }>;
                      const d = context.direct!;
                      return { direct: { ...d, approval: { ...d.approval, decision: 'grant' as const, source: 'user', card: out.card } } };
                    }),
                  },
                  {
                    guard: 'isNonInteractive',
                    target: 'recording',
                    actions: assign(({ context, event }) => {
                      const out = event.output as Extract<AuthorizationOutput, { kind: 'card' }>;
                      const d = context.direct!;
                      return {
                        direct: {
                          ...d,
                          result: deniedResult(NON_INTERACTIVE_REFUSAL_TEXT),
                          approval: { ...d.approval, source: 'non_interactive', card: out.card },
                        },
                      };
                    }),
                  },
                  {
                    // A card to ask: the call waits, so it becomes a tool-call machine.
                    target: '#tools.call',
                    actions: assign(({ context, event }) => {
                      const out = event.output as Extract<AuthorizationOutput, { kind: 'card' }>;
                      const d = context.direct!;
                      return { direct: { ...d, start: { kind: 'card' as const, card: out.card, at: out.at, args: d.args, doom: d.doom } } };
                    }),
                  },
                ],
                'tool.check_failed': {
                  target: 'recording',
                  actions: assign(({ context, event }) => ({
                    direct: { ...context.direct!, result: failedResult('execution_failed', authorizationFailedText(errorText(event.error))) },
                  })),
                },
              },
            },
            executing: {
              invoke: {
                id: 'execute',
                src: 'executeTool',
                input: ({ context }) => executeInputOf({ ...context.direct!, sessionId: context.sessionId, turnId: context.turnId }),
                onError: {
                  target: 'recording',
                  actions: assign(({ context, event }) => ({ direct: { ...context.direct!, result: failedResult('execution_failed', errorText(event.error)) } })),
                },
              },
              on: {
                'tool.progress': {
                  actions: { type: 'emit', params: ({ context, event }) => ({ type: 'tool_call_progress', toolCallId: context.direct!.toolCallId, progress: event.progress }) },
                },
                'tool.finished': {
                  target: 'recording',
                  actions: assign(({ context, event }) => ({
                    direct: {
                      ...context.direct!,
                      result: event.result,
                      executed: true,
                      terminal: terminalAfterRun(context.stopRequest, event.result),
                    },
                  })),
                },
                // The tool gets its abort and reports how it ended; a process tree must be killed, not orphaned.
                'turn.cancel': { actions: ['requestStop', sendTo('execute', { type: 'toolcall.cancel' })] },
                'turn.stop': { actions: ['requestStop', sendTo('execute', { type: 'toolcall.cancel' })] },
              },
            },
            recording: {
              // The batch's last result reserves the next model call when nothing can end the turn first.
              entry: assign({ reserving: ({ context }) => (context.batchIndex + 1 >= context.batch!.calls.length && context.direct!.terminal === null ? nextModelCall(context) : 0) }),
              invoke: {
                id: 'record',
                src: 'recordToolResult',
                input: ({ context }) => ({ ...recordInputOf({ ...context.direct!, sessionId: context.sessionId, turnId: context.turnId }), reserveModelCall: context.reserving }),
                onDone: [
                  {
                    guard: 'directTerminal',
                    target: '#tools.cancelling_remaining',
                    actions: [
                      'reservationCommitted',
                      { type: 'announceDirectFinished', params: ({ event }) => event.output },
                      { type: 'finishDirect', params: ({ event }) => ({ recorded: true, stored: event.output }) },
                    ],
                  },
                  {
                    target: '#tools.next',
                    actions: [
                      'reservationCommitted',
                      { type: 'announceDirectFinished', params: ({ event }) => event.output },
                      { type: 'finishDirect', params: ({ event }) => ({ recorded: true, stored: event.output }) },
                    ],
                  },
                ],
                onError: {
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
                guard: ({ context, event }) =>
                  event.output.terminal !== null || (event.output.waitTimedOut === true && context.waitTimeouts + 1 >= context.limits.doomLoopThreshold),
                target: 'cancelling_remaining',
                actions: assign(({ context, event }) => ({ ...applyToolOutput(context, event.output, true), direct: null })),
              },
              { target: 'next', actions: assign(({ context, event }) => ({ ...applyToolOutput(context, event.output, false), direct: null })) },
            ],
            onError: {
              target: 'cancelling_remaining',
              actions: assign(({ context, event }) => ({
                batchIndex: context.batchIndex + 1,
                direct: null,
                pendingApprovals: [],
                pendingUserInput: [],
                outcome: failedOutcome('persistence_error', `tool call actor failed: ${errorText(event.error)}`),
              })),
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
                sendParent(({ event }) => ({
                  type: 'session.publish',
                  update: {
                    type: 'permission_resolved',
                    toolCallId: event.toolCallId,
                    decision: event.decision === 'actor_stopped' ? 'cancelled' : event.decision,
                  },
                })),
              ],
            },
            'toolcall.granted': {
              actions: [
                assign(({ context, event }) =>
                  event.scope === 'turn'
                    ? { turnGrants: addGrant(context.turnGrants, event.environmentId, event.grantKey) }
                    : { sessionGrants: addGrant(context.sessionGrants, event.environmentId, event.grantKey) },
                ),
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
                sendParent(({ event }) => ({
                  type: 'session.publish',
                  update: {
                    type: 'user_input_resolved',
                    toolCallId: event.toolCallId,
                    outcome: event.outcome,
                    ...(event.answers ? { answers: event.answers } : {}),
                  },
                })),
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
                sendParent(({ context }) => ({
                  type: 'session.publish' as const,
                  update: { type: 'permission_requested' as const, toolCallId: context.pendingApprovals[0]!.toolCallId, card: context.pendingApprovals[0]!.card },
                })),
              ],
            },
            waiting_user_input: {
              entry: [
                { type: 'enterPhase', params: 'waiting_user_input' },
                sendParent(({ context }) => ({
                  type: 'session.publish' as const,
                  update: { type: 'user_input_requested' as const, toolCallId: context.pendingUserInput[0]!.toolCallId, request: context.pendingUserInput[0]!.request },
                })),
              ],
            },
          },
        },
        cancelling_remaining: {
          invoke: {
            id: 'recordCancelledCalls',
            src: 'recordCancelledCalls',
            input: ({ context }) => ({
              sessionId: context.sessionId,
              turnId: context.turnId,
              calls: (context.batch?.calls ?? [])
                .map((call, i) => ({ toolCallId: context.batch!.toolCallIds[i]!, call }))
                .slice(context.batchIndex),
              parentSpanId: `${context.turnId}.model${context.submissionCount}`,
            }),
            onDone: {
              target: '#turn.ending',
              actions: [
                enqueueActions(({ context, enqueue }) => {
                  for (const [i, call] of (context.batch?.calls ?? []).entries()) {
                    if (i < context.batchIndex) continue;
                    enqueue.sendParent({
                      type: 'session.publish',
                      update: toolCallFinishedUpdate(
                        { toolCallId: context.batch!.toolCallIds[i]!, providerCallId: call.callId, toolName: call.name },
                        cancelledResult(REMAINING_CALL_TEXT),
                      ),
                    });
                  }
                }),
                assign(({ context }) => ({
                  liveToolCalls: context.liveToolCalls.map((c, i) =>
                    i >= context.batchIndex ? { ...c, status: 'finished' as const, result: { status: 'cancelled' as const, text: REMAINING_CALL_TEXT } } : c,
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
    },
    ending: {
      invoke: {
        id: 'finishTurn',
        src: 'finishTurn',
        input: ({ context }) => ({
          sessionId: context.sessionId,
          turnId: context.turnId,
          outcome: context.outcome ?? failedOutcome('actor_stopped', 'the turn ended without an outcome'),
          planUnfinishedStepCount: context.plan ? context.plan.steps.filter((s) => s.status !== 'completed').length : null,
          unmadeModelCall: context.reservedCall,
        }),
        onDone: [
          { guard: 'outcomeCompleted', target: 'completed', actions: assign({ endRecorded: ({ event }) => event.output }) },
          { guard: 'outcomeCancelled', target: 'cancelled', actions: assign({ endRecorded: ({ event }) => event.output }) },
          { target: 'failed', actions: assign({ endRecorded: ({ event }) => event.output }) },
        ],
        onError: [
          // The end itself was refused for want of the lease: whatever the turn decided, none of it
          // after the takeover is stored, and the host hears why (issue 15).
          {
            guard: ({ event }) => (event.error as { code?: string } | null)?.code === 'ownership_lost',
            target: 'failed',
            actions: assign({ outcome: ({ event }) => storageFailure(event.error) }),
          },
          { guard: 'outcomeCompleted', target: 'completed' },
          { guard: 'outcomeCancelled', target: 'cancelled' },
          { target: 'failed' },
        ],
      },
    },
    completed: { type: 'final', entry: [{ type: 'enterPhase', params: 'completed' }, 'announceFinished'] },
    failed: { type: 'final', entry: [{ type: 'enterPhase', params: 'failed' }, 'announceFinished'] },
    cancelled: { type: 'final', entry: [{ type: 'enterPhase', params: 'cancelled' }, 'announceFinished'] },
  },
  output: ({ context }) => ({
    turnId: context.turnId,
    outcome: context.outcome ?? failedOutcome('actor_stopped', 'the turn ended without an outcome'),
    plan: context.plan,
    usage: context.usage,
    mailbox: context.mailbox,
    pendingInput: context.pendingInput,
    endRecorded: context.endRecorded,
    reloadRequired: context.reloadRequired,
  }),
});

/**
 * The logical model call that comes next if nothing ends the turn first (no stop asked, under
 * `max_model_calls`), or 0: what a fact before it reserves. A cancel, a failure or a compaction that
 * fails may still end the turn before the call; the end then takes the reservation back.
 */
function nextModelCall(context: TurnContext): number {
  if (context.stopRequest !== null || context.modelCallIndex >= context.limits.maxModelCalls) return 0;
  return context.modelCallIndex + 1;
}

/** What validation and authorisation (and a tool-call machine) need to know of the current call. */
function toolCallInputOf(context: TurnContext): ToolCallInput {
  const d = context.direct!;
  return {
    sessionId: context.sessionId,
    turnId: context.turnId,
    toolCallId: d.toolCallId,
    call: d.call,
    permissionMode: d.permissionMode,
    permissionModeOrigin: d.permissionModeOrigin,
    nonInteractive: context.nonInteractive,
    turnGrants: context.turnGrants,
    sessionGrants: context.sessionGrants,
    doom: context.doom,
    doomLoopThreshold: context.limits.doomLoopThreshold,
    parentSpanId: `${context.turnId}.model${context.submissionCount}`,
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
  if (!direct || typeof run !== 'string') return null;
  return { toolCallId: direct.toolCallId, status: run as LiveToolCall['status'] };
}

function patchLive(list: LiveToolCall[], patch: Partial<LiveToolCall> & { toolCallId: string }): LiveToolCall[] {
  return list.map((c) => (c.toolCallId === patch.toolCallId ? { ...c, ...patch } : c));
}

function addGrant(grants: Grants, environmentId: string, grantKey: string): Grants {
  const existing = grants[environmentId] ?? [];
  return existing.includes(grantKey) ? grants : { ...grants, [environmentId]: [...existing, grantKey] };
}

function applyToolOutput(context: TurnContext, output: ToolCallOutput, terminal: boolean): Partial<TurnContext> {
  const patch: Partial<TurnContext> = {
    batchIndex: context.batchIndex + 1,
    // The call's live entry as its last state left it: finished once its result is stored.
    liveToolCalls: patchLive(context.liveToolCalls, {
      toolCallId: output.toolCallId,
      ...(output.recorded ? { status: 'finished' as const, result: { status: output.result.status, text: output.result.text } } : { status: 'recording' as const }),
    }),
    doom: output.doom,
    pendingApprovals: [],
    pendingUserInput: [],
    waitTimeouts: output.waitTimedOut === true ? context.waitTimeouts + 1 : output.waitTimedOut === false ? 0 : context.waitTimeouts,
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

export type TurnActorRef = ActorRefFrom<typeof turnMachine>;
export type TurnSnapshot = SnapshotFrom<typeof turnMachine>;
