/**
 * @module machines/turn/ports
 * What the Turn's invoked actors are given and give back: the inputs and outputs of begin turn,
 * the drain, the model call, the assistant message's write, compaction, the cancelled remainder of
 * a batch and the end. `services/turn-actors.ts` implements them against these types.
 */
import type { NewMessage, ToolCallBlock } from '../../protocol/content.js';
import type { AgentMessage } from '../../protocol/agent-message.js';
import type { TurnPlanSnapshot } from '../../protocol/plan.js';
import type { TurnOutcome } from '../../protocol/updates.js';
import type { ModelDraft, TurnInput } from '../types.js';

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
export interface ModelFailure {
  code?: string;
  message?: string;
  semanticOutput?: boolean;
  /** Set when the call failed before the model was asked: its World State, request or counters. */
  stage?: 'sample' | 'assemble' | 'record';
  cause?: unknown;
}

