/**
 * @module machines/types
 * Data shapes shared by the Session, Turn and tool-call machines: a tool call's input, output,
 * terminal and approval, and the events a call and a Turn send. The Turn's own shapes (input,
 * output, events, draft, batch) are in `turn/ports.ts`. Everything here is plain, serialisable
 * data: handles (storage, model, tools, clock) never enter machine context.
 */
import type { StoredMessage, ToolCallBlock } from '../protocol/content.js';
import type { PermissionDecision, PermissionMode, PermissionModeOrigin } from '../protocol/input.js';
import type { TurnPlanSnapshot } from '../protocol/plan.js';
import type { RateLimitSnapshot } from '../protocol/rate-limits.js';
import type { LiveToolCall, PendingApproval } from '../protocol/snapshot.js';
import type { PendingUserInput, UserInputAnswers } from '../protocol/user-input.js';
import type { PermissionCard, ToolProgress } from '../protocol/updates.js';
import type { ToolResult } from '../protocol/tool-result.js';
import type { PublishEvent } from './publish.js';
import type { Grants } from './session/ports.js';

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

/**
 * What the `run` actor concludes of a call's validation (seed 000 §5 steps 2-5): JSON, name and
 * schema. The doom-loop rule (step 6) is the Turn chart's guard over `tool-call/doom-loop.ts`.
 */
export type ValidatedCall =
  | { kind: 'invalid'; result: ToolResult; resolvedName: string | null }
  | { kind: 'control'; args: unknown }
  | { kind: 'registered'; args: unknown };

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

export type ToolCallEvent =
  | { type: 'toolcall.decide'; decision: PermissionDecision; at: number }
  | { type: 'toolcall.answer'; answers: UserInputAnswers }
  | { type: 'toolcall.cancel' }
  | { type: 'toolcall.stop' }
  | { type: 'tool.progress'; progress: ToolProgress }
  | { type: 'tool.finished'; result: ToolResult };

export type SessionParentEvent =
  | PublishEvent
  | { type: 'turn.granted'; scope: 'turn' | 'session'; environmentId: string; grantKey: string }
  | { type: 'turn.rate_limits_reported'; snapshot: RateLimitSnapshot };

export type { PendingApproval, PendingUserInput, LiveToolCall, StoredMessage };
