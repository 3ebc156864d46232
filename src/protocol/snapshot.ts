/**
 * @module protocol/snapshot
 * The in-memory SessionSnapshot (seed 000 §8) and the host-facing status (seed 004 §1).
 */
import type { PermissionMode } from './input.js';
import type { TurnPlanSnapshot } from './plan.js';
import type { PermissionCard, Phase, TurnOutcome } from './updates.js';
import type { ToolResultStatus } from './content.js';
import type { RateLimitSnapshot } from './rate-limits.js';
import type { PendingUserInput } from './user-input.js';
import type { TokenUsage } from './usage.js';

export interface LiveToolCall {
  toolCallId: string;
  providerCallId: string;
  toolName: string;
  arguments: string;
  status: 'pending' | 'validating' | 'authorizing' | 'waiting_permission' | 'waiting_user_input' | 'executing' | 'recording' | 'finished';
  result?: { status: ToolResultStatus; text: string };
}

export interface PendingApproval {
  toolCallId: string;
  card: PermissionCard;
}

export type SessionRuntimeSnapshot =
  | { type: 'idle' }
  | {
      type: 'running';
      turnId: string;
      clientRequestId: string;
      phase: Phase;
      draft: { text: string; reasoning: string };
      toolCalls: LiveToolCall[];
      pendingApprovals: PendingApproval[];
      /** Questions of request_user_input waiting for `answerUserInput`. */
      pendingUserInput: PendingUserInput[];
      plan: TurnPlanSnapshot | null;
    }
  | {
      type: 'terminal';
      turnId: string;
      clientRequestId: string;
      outcome: TurnOutcome;
      plan: TurnPlanSnapshot | null;
    };

export interface SandboxStatus {
  available: boolean;
  kind: string;
  detail?: string;
}

export interface SessionSnapshot {
  version: 7;
  sessionId: string;
  lastUpdateSequence: number;
  permissionMode: PermissionMode;
  sandbox: SandboxStatus;
  reloadRequired: boolean;
  runtime: SessionRuntimeSnapshot;
  /** The provider's rate limits as last reported (seed 004 §2 merge), null until a provider sends any. */
  rateLimits: RateLimitSnapshot | null;
  /** Tokens of every finished turn of this session, stored ones included (a running turn adds its own when it ends). */
  usage: TokenUsage;
}

export type { PendingUserInput };

export type SessionStatus =
  | { type: 'not_loaded' }
  | { type: 'idle' }
  | { type: 'active'; activeFlags: Array<'waiting_on_approval' | 'waiting_on_user_input'> }
  | { type: 'system_error'; message: string };
