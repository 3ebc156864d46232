/**
 * @module machines/turn/ports
 * What the Turn is given and gives back (its input, output and events, the draft, the batch and
 * the call it runs itself), and what its invoked actors exchange with it: the inputs and outputs
 * of begin turn, the drain, the model call, the assistant message's write, compaction, the
 * cancelled remainder of a batch and the end. `services/turn-actors.ts` implements them against
 * these types. Only plain, serialisable data: handles never enter machine context.
 */
import { errorMessage } from '../../errors.js';
import type { NewMessage, TextBlock, ToolCallBlock } from '../../protocol/content.js';
import type { AgentMessage } from '../../protocol/agent-message.js';
import type { PermissionDecision, PermissionMode, PermissionModeOrigin } from '../../protocol/input.js';
import type { SystemPart } from '../../protocol/model-messages.js';
import type { TurnPlanSnapshot } from '../../protocol/plan.js';
import type { RateLimitSnapshot } from '../../protocol/rate-limits.js';
import type { ToolResult } from '../../protocol/tool-result.js';
import type { PermissionCard, ToolProgress, TurnOutcome } from '../../protocol/updates.js';
import type { UserInputAnswers, UserInputRequest } from '../../protocol/user-input.js';
import type { TokenUsage } from '../../protocol/usage.js';
import type { Grants, TurnLimits } from '../session/ports.js';
import type { ExecuteInput, RecordInput } from '../tool-call/ports.js';
import type { ApprovalRecord, AuthorizationOutput, DoomState, ToolCallStart, ToolCallTerminal, ValidatedCall } from '../types.js';

/**
 * The call the Turn runs with its own actors (`tools.run`): everything the tool-call machine would
 * keep in its context for a call that never waits.
 */
export interface DirectCall {
  toolCallId: string;
  call: ToolCallBlock;
  /**
   * The session's mode when the call started: it is authorised, run and recorded under this one
   * mode, as a tool-call machine took it with its input (a switch applies from the next call).
   */
  permissionMode: PermissionMode;
  permissionModeOrigin: PermissionModeOrigin;
  args: unknown;
  resolvedName: string | null;
  doom: DoomState;
  approval: ApprovalRecord;
  result: ToolResult | null;
  terminal: ToolCallTerminal | null;
  executed: boolean;
  /** Set when the call turns out to wait: where the tool-call machine the Turn spawns for it starts. */
  start: ToolCallStart | null;
}

export interface ModelDraft {
  /** The answer text as streamed and shown: the text blocks joined by a paragraph break. */
  text: string;
  /** The same text as the blocks to store, one per output message of the provider. */
  textBlocks: TextBlock[];
  reasoning: string;
  toolCalls: ToolCallBlock[];
  opaque: Array<{ provider: string; data: unknown }>;
  completion: { usage: TokenUsage; responseId?: string; finishReason?: string } | null;
  semantic: boolean;
}

export interface ToolBatch {
  assistantMessageId: string;
  calls: ToolCallBlock[];
  toolCallIds: string[];
}

export interface TurnInput {
  sessionId: string;
  turnId: string;
  clientRequestId: string;
  /** Skill instruction snapshots, then the user's visible message. */
  messages: NewMessage[];
  systemContext: SystemPart[];
  limits: TurnLimits;
  permissionMode: PermissionMode;
  permissionModeOrigin: PermissionModeOrigin;
  nonInteractive: boolean;
  sessionGrants: Grants;
  tokenBaseline: TokenUsage;
  mailbox: AgentMessage[];
  pendingInput: NewMessage[];
  /** The model request's size limit; automatic compaction starts at this estimate (0 = never). */
  compactAtTokens: number;
  /** Whether an explicit context overflow may be compacted and resubmitted (reference §3.1). */
  compactionEnabled: boolean;
  /** Skills hidden from the catalog, snapshotted when the turn was accepted (reference §7.7). */
  disabledSkillNames: string[];
  /**
   * The final answer is judged against the turn's output schema (structured output) after it is
   * stored, and may fail the turn: such an answer never ends the turn in its own statement.
   */
  answerJudged?: boolean;
}

export interface TurnOutput {
  turnId: string;
  outcome: TurnOutcome;
  plan: TurnPlanSnapshot | null;
  usage: TokenUsage;
  /** Agent messages that arrived after the last drain: they wait for the next user turn. */
  mailbox: AgentMessage[];
  /** Steering input the turn could not take any more: carried into the next turn. */
  pendingInput: NewMessage[];
  endRecorded: boolean;
  /** A checkpoint was committed but could not be installed (reference §3.9 step 8). */
  reloadRequired: boolean;
}

export type TurnEvent =
  | { type: 'turn.cancel' }
  | { type: 'turn.stop' }
  | { type: 'turn.steer'; message: NewMessage }
  | { type: 'turn.mailbox'; message: AgentMessage }
  | { type: 'turn.set_mode'; mode: PermissionMode; origin: PermissionModeOrigin }
  | { type: 'turn.decide'; toolCallId: string; decision: PermissionDecision; at: number }
  | { type: 'turn.answer'; toolCallId: string; answers: UserInputAnswers }
  /** `newBlock`: the provider began another output message; `phase`: that message's label. */
  | { type: 'model.text_delta'; delta: string; newBlock?: boolean; phase?: string }
  | { type: 'model.reasoning_delta'; delta: string }
  /**
   * World State is sampled (and any change stored) for this model call; the request comes next. Sent
   * only by a call that writes its own counters: a call the fact before reserved reports its
   * sampling with the event that ends its request (`model.over_threshold`, `model.call_recorded`).
   */
  | { type: 'model.sampled' }
  /** The assembled request reached the compaction line: compact before the call (nothing was recorded). */
  | { type: 'model.over_threshold'; estimatedInputTokens: number }
  /** The call's counters are committed (by the call, or by the fact before it); the request goes to the model now. */
  | { type: 'model.call_recorded'; estimatedInputTokens: number }
  | { type: 'model.tool_call'; callId: string; name: string; arguments: string }
  | { type: 'model.provider_opaque'; provider: string; data: unknown }
  | { type: 'model.completed'; usage: TokenUsage; responseId?: string; finishReason?: string }
  /**
   * The model actor's failure, before the model was asked (a `ModelCallSetupFailure`) or of the call
   * itself (a `ModelError`): its last event, reported while the Turn is in `streaming`'s call states.
   */
  | { type: 'model.failed'; error: unknown }
  /** The assistant message the Turn asked for (`model.persist`) is committed: the model actor's last event. */
  | { type: 'model.persisted'; messageId: string; outputProblem?: string }
  /** The assistant message's write failed (nothing of it is in the conversation): the model actor's last event. */
  | { type: 'model.persist_failed'; error: unknown }
  /** The provider's latest rate-limit headers, read after a model call; the session merges them. */
  | { type: 'model.rate_limits_reported'; snapshot: RateLimitSnapshot }
  | { type: 'toolcall.permission_requested'; toolCallId: string; card: PermissionCard }
  | { type: 'toolcall.permission_resolved'; toolCallId: string; decision: PermissionDecision | 'cancelled' | 'actor_stopped' }
  | { type: 'toolcall.user_input_requested'; toolCallId: string; request: UserInputRequest }
  | { type: 'toolcall.user_input_resolved'; toolCallId: string; outcome: 'answered' | 'cancelled'; answers?: UserInputAnswers }
  | { type: 'toolcall.granted'; scope: 'turn' | 'session'; environmentId: string; grantKey: string }
  /** From the `run` actor of a call the Turn runs itself: validation's and authorisation's outcomes. */
  | { type: 'tool.validated'; output: ValidatedCall }
  | { type: 'tool.authorized'; output: AuthorizationOutput }
  | { type: 'tool.check_failed'; error: unknown }
  /** From the same actor while the tool runs (`tools.run.executing`); `execute_failed`: the session is gone. */
  | { type: 'tool.progress'; progress: ToolProgress }
  | { type: 'tool.finished'; result: ToolResult }
  | { type: 'tool.execute_failed'; error: unknown }
  /** From the same actor in `tools.run.recording`: the result as stored, or why it was not. */
  | { type: 'tool.recorded'; result: ToolResult }
  | { type: 'tool.record_failed'; error: unknown };

/**
 * What the Turn sends its `run` actor, each on entering the state that does it: authorise these
 * parsed arguments (`authorizing`), run the tool (`executing`), stop it (`executing.stopping`),
 * write the decided result (`recording`).
 */
export type RunToolCallEvent =
  | { type: 'tool.authorize'; args: unknown }
  | { type: 'tool.execute'; input: ExecuteInput }
  | { type: 'toolcall.cancel' }
  | { type: 'tool.record'; input: RecordInput };

/**
 * What the Turn sends its model actor on entering `streaming.persisting`: store this answer (the
 * draft the chart assembled from the actor's events), with the turn's end when the chart decided
 * the answer ends the turn.
 */
export type PersistAssistantCommand = { type: 'model.persist' } & Pick<PersistAssistantInput, 'draft' | 'end'>;


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

/**
 * What the model actor's commit of the assistant message works from: the call's own input and the
 * Turn's `model.persist` command.
 */
export interface PersistAssistantInput {
  sessionId: string;
  turnId: string;
  modelCallIndex: number;
  spanId: string;
  draft: ModelDraft;
  /**
   * The turn's end, when the chart knows this message ends it (a final answer: no tool calls, no
   * steering input waiting, no stop asked, no judged output): written as `completed` in the same
   * statement as the message, so a committed final answer is never left on a running turn and the
   * end costs no round trip of its own. Null: the message does not end the turn.
   */
  end: { planUnfinishedStepCount: number | null } | null;
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
  /**
   * The end was already written, with the final answer (`PersistAssistantInput.end`): nothing is
   * written, only the turn's local bookkeeping is done.
   */
  recorded: boolean;
}

/** Where a model call failed before the model was asked: its World State, its request or its counters. */
export type ModelCallStage = 'sample' | 'assemble' | 'record';

/**
 * How the model actor fails before the model was asked: the stage, and what that stage threw
 * (`cause`). A failure of the call itself is the `ModelError` the actor throws (`errors.ts`).
 * `machines/turn/outcomes.ts` maps both to the Turn's outcome.
 */
export class ModelCallSetupFailure extends Error {
  readonly stage: ModelCallStage;
  constructor(stage: ModelCallStage, cause: unknown) {
    super(errorMessage(cause), { cause });
    this.name = 'ModelCallSetupFailure';
    this.stage = stage;
  }
}

