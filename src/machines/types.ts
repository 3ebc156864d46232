/**
 * @module machines/types
 * Data shapes shared by the Session, Turn and tool-call machines. Everything here is plain,
 * serialisable data: handles (storage, model, tools, clock) never enter machine context.
 */
import type { NewMessage, StoredMessage, TextBlock, ToolCallBlock } from '../protocol/content.js';
import type { PermissionDecision, PermissionMode, PermissionModeOrigin } from '../protocol/input.js';
import type { TurnPlanSnapshot } from '../protocol/plan.js';
import type { RateLimitSnapshot } from '../protocol/rate-limits.js';
import type { LiveToolCall, PendingApproval } from '../protocol/snapshot.js';
import type { PendingUserInput, UserInputAnswers, UserInputRequest } from '../protocol/user-input.js';
import type { PermissionCard, SessionUpdate, ToolProgress, TurnOutcome } from '../protocol/updates.js';
import type { AgentMessage } from '../protocol/agent-message.js';
import type { SystemPart } from '../protocol/model-messages.js';
import type { ToolResult } from '../protocol/tool-result.js';
import type { TokenUsage } from '../protocol/usage.js';
import type { Grants, TurnLimits } from './session/ports.js';

// The grant table and the turn limits are the Session's; this keeps their old import path working.
export type { Grants, TurnLimits } from './session/ports.js';

export interface DoomState {
  signature: string | null;
  count: number;
}

export type TerminalCode = 'permission_denied' | 'doom_loop' | 'persistence_error' | 'chat_state_error' | 'ownership_lost' | 'cancelled' | 'actor_stopped';

export interface ToolCallTerminal {
  code: TerminalCode;
  message: string;
}

export interface ToolCallInput {
  sessionId: string;
  turnId: string;
  toolCallId: string;
  call: ToolCallBlock;
  permissionMode: PermissionMode;
  permissionModeOrigin: PermissionModeOrigin;
  nonInteractive: boolean;
  turnGrants: Grants;
  sessionGrants: Grants;
  doom: DoomState;
  doomLoopThreshold: number;
  parentSpanId: string | null;
  /** Set when the Turn spawns the machine for a call it validated itself (a card, a control tool). */
  start?: ToolCallStart;
}

/**
 * Where a tool-call machine starts: the Turn validated and authorised the call itself and spawns
 * the machine only because the call has to wait (a card to ask, a control tool).
 */
export type ToolCallStart =
  | { kind: 'card'; card: PermissionCard; at: number; args: unknown; doom: DoomState }
  | { kind: 'control'; args: unknown; doom: DoomState };

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

export interface ToolCallOutput {
  /** wait_agent only: it ended by its timeout (consecutive timeouts reaching the threshold are a doom loop). */
  waitTimedOut: boolean | null;
  toolCallId: string;
  providerCallId: string;
  toolName: string;
  result: ToolResult;
  recorded: boolean;
  terminal: ToolCallTerminal | null;
  doom: DoomState;
  plan: TurnPlanSnapshot | null;
}

/** What the `validateToolCall` actor concludes before authorisation (seed 000 §5 steps 2-6). */
export type ValidatedCall =
  | { kind: 'invalid'; result: ToolResult; doom: DoomState; resolvedName: string | null }
  | { kind: 'doom_loop'; result: ToolResult; doom: DoomState }
  | { kind: 'control'; args: unknown; doom: DoomState }
  | { kind: 'registered'; args: unknown; doom: DoomState };

export type AuthorizationOutput =
  | { kind: 'execute' }
  | { kind: 'deny'; text: string; source: string }
  | { kind: 'card'; card: PermissionCard; at: number };

export interface ApprovalRecord {
  decision: PermissionDecision | 'grant' | 'none';
  source: string;
  card: PermissionCard | null;
  requestedAt: number | null;
  decidedAt: number | null;
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
  /** World State is sampled (and any change stored) for this model call; the request comes next. */
  | { type: 'model.sampled' }
  /** The assembled request reached the compaction line: compact before the call (nothing was recorded). */
  | { type: 'model.over_threshold'; estimatedInputTokens: number }
  /** The call's counters are committed; the request goes to the model now. */
  | { type: 'model.call_recorded'; estimatedInputTokens: number }
  | { type: 'model.tool_call'; callId: string; name: string; arguments: string }
  | { type: 'model.provider_opaque'; provider: string; data: unknown }
  | { type: 'model.completed'; usage: TokenUsage; responseId?: string; finishReason?: string }
  /** The provider's latest rate-limit headers, read after a model call; the session merges them. */
  | { type: 'model.rate_limits_reported'; snapshot: RateLimitSnapshot }
  | { type: 'toolcall.permission_requested'; toolCallId: string; card: PermissionCard }
  | { type: 'toolcall.permission_resolved'; toolCallId: string; decision: PermissionDecision | 'cancelled' | 'actor_stopped' }
  | { type: 'toolcall.user_input_requested'; toolCallId: string; request: UserInputRequest }
  | { type: 'toolcall.user_input_resolved'; toolCallId: string; outcome: 'answered' | 'cancelled'; answers?: UserInputAnswers }
  | { type: 'toolcall.granted'; scope: 'turn' | 'session'; environmentId: string; grantKey: string }
  /** From the `check` actor of a call the Turn runs itself: validation's and authorisation's outcomes. */
  | { type: 'tool.validated'; output: ValidatedCall }
  | { type: 'tool.authorized'; output: AuthorizationOutput }
  | { type: 'tool.check_failed'; error: unknown }
  /** From the `execute` actor of a call the Turn runs itself (`tools.run.executing`). */
  | { type: 'tool.progress'; progress: ToolProgress }
  | { type: 'tool.finished'; result: ToolResult };

/** What the Turn sends its `check` actor on entering `authorizing`: authorise these parsed arguments. */
export type CheckToolCallEvent = { type: 'tool.authorize'; args: unknown };

export type ToolCallEvent =
  | { type: 'toolcall.decide'; decision: PermissionDecision; at: number }
  | { type: 'toolcall.answer'; answers: UserInputAnswers }
  | { type: 'toolcall.cancel' }
  | { type: 'toolcall.stop' }
  | { type: 'tool.progress'; progress: ToolProgress }
  | { type: 'tool.finished'; result: ToolResult };

export type SessionParentEvent =
  | { type: 'session.publish'; update: SessionUpdate }
  | { type: 'turn.granted'; scope: 'turn' | 'session'; environmentId: string; grantKey: string }
  | { type: 'turn.rate_limits_reported'; snapshot: RateLimitSnapshot };

export type { PendingApproval, PendingUserInput, LiveToolCall, StoredMessage };
