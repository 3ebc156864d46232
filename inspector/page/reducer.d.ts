// Types of reducer.js for the Node tests; the page itself loads the plain module.
import type { PermissionCard, SessionUpdate, SessionUpdateEnvelope, TurnOutcome } from '../../src/protocol/updates.js';
import type { SessionSnapshot } from '../../src/protocol/snapshot.js';
import type { PlanStep } from '../../src/protocol/plan.js';
import type { UserInputRequest } from '../../src/protocol/user-input.js';

export interface ViewToolCall {
  toolCallId: string;
  providerCallId: string;
  toolName: string;
  arguments: string;
  status: string;
  progress: string;
  result: { status: string; text: string; errorCode: string | null } | null;
  decision?: string;
}

export interface LogEntry {
  from: number;
  to: number;
  type: SessionUpdate['type'] | 'snapshot';
  turnId: string | null;
  count: number;
  summary: string;
  text: string;
  toolCallId: string | null;
}

/** A `conversation_compacted` update as the view keeps it. */
export interface ViewCompaction {
  compactionId: string;
  kind: 'manual' | 'threshold' | 'overflow' | 'rewind';
  tokensBefore: number;
  tokensAfter: number;
  sequence: number;
  turnId: string | null;
  atMs: number;
}

export interface SessionView {
  version: number;
  sessionId: string;
  epoch: string;
  lastSequence: number;
  turnId: string | null;
  clientRequestId: string | null;
  phase: string | null;
  startedAtMs: number | null;
  endedAtMs: number | null;
  draft: { text: string; reasoning: string };
  toolCalls: Record<string, ViewToolCall>;
  orderedToolCallIds: string[];
  pendingPermission: { turnId: string | null; toolCallId: string; card: PermissionCard } | null;
  /** The model's request_user_input questions waiting for an answer. */
  pendingQuestion: { turnId: string | null; toolCallId: string; request: UserInputRequest } | null;
  plan: { explanation: string | null; steps: PlanStep[]; updatedAt: string } | null;
  terminal: { turnId: string | null; outcome: TurnOutcome } | null;
  /** The compactions seen in this epoch, oldest first (at most COMPACTION_LIMIT). */
  compactions: ViewCompaction[];
  log: LogEntry[];
  sync: { source: 'live' | 'replay' | 'snapshot'; count: number };
}

export const VIEW_VERSION: number;
export const LOG_LIMIT: number;
export const COMPACTION_LIMIT: number;
export function createView(sessionId: string, epoch: string): SessionView;
export function classifyEnvelope(view: SessionView, epoch: string | null, envelope: SessionUpdateEnvelope): 'ignore' | 'apply' | 'gap' | 'epoch';
export function isTurnActive(view: SessionView): boolean;
export function summarize(update: SessionUpdate): string;
export function applyUpdate(view: SessionView, envelope: SessionUpdateEnvelope): SessionView;
export function applySnapshot(view: SessionView | null, sessionId: string, epoch: string, snapshot: SessionSnapshot): SessionView;
