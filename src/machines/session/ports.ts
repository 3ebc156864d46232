/**
 * @module machines/session/ports
 * What the Session machine is given and what the actors around it exchange with it: the session's
 * input (which a sub-agent's child Session actor takes too), the last terminal outcome the core
 * reloads, and the grant table and limits the Session hands each Turn it invokes. Only plain,
 * serialisable data: handles never enter machine context.
 */
import type { PermissionMode, PermissionModeOrigin } from '../../protocol/input.js';
import type { SystemPart } from '../../protocol/model-messages.js';
import type { TurnPlanSnapshot } from '../../protocol/plan.js';
import type { TurnOutcome } from '../../protocol/updates.js';
import type { TokenUsage } from '../../protocol/usage.js';

/** Granted approvals: environment id -> the grant keys allowed in it. */
export type Grants = Record<string, string[]>;

/** The per-turn limits of a session (reference §3.6). */
export interface TurnLimits {
  maxModelCalls: number;
  doomLoopThreshold: number;
}

/** How the session's last turn ended, kept to answer a repeated `clientRequestId`. */
export interface LastTerminal {
  turnId: string;
  clientRequestId: string;
  outcome: TurnOutcome;
  plan: TurnPlanSnapshot | null;
}

/** The Session machine's input, and a child Session actor's. */
export interface SessionInput {
  sessionId: string;
  permissionMode: PermissionMode;
  permissionModeOrigin: PermissionModeOrigin;
  nonInteractive: boolean;
  systemContext: SystemPart[];
  limits: TurnLimits;
  compactAtTokens: number;
  compactionEnabled: boolean;
  tokenTotals: TokenUsage;
  acceptedRequests: Record<string, string>;
  lastTerminal: LastTerminal | null;
  reloadRequired: boolean;
}

