/**
 * @module machines/tool-call/ports
 * The contract between the tool-call machine and the actors the core provides for it: each
 * invoked actor's input and output, and the two builders of the execute and record inputs that
 * the Turn's own run of a call shares (`tools.run`). Actors import their types from here, not
 * from the machine.
 */
import type { TurnPlanSnapshot } from '../../protocol/plan.js';
import type { ToolResult } from '../../protocol/tool-result.js';
import type { ApprovalRecord, ToolCallInput } from '../types.js';

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
  /** The Turn's direct call only: the next model call to reserve with this result (0 or absent: none). */
  reserveModelCall?: number;
  /**
   * The span's `error_code` when it is the cause rather than the result's code: `actor_stopped` for
   * a call whose tool-call machine failed (its result says `outcome_unknown`, the span why).
   */
  spanErrorCode?: string;
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

/**
 * What a call's execute and record steps read. The tool-call machine keeps it in its context and
 * the Turn in `direct` for a call it runs itself; both build the steps' inputs with the two
 * functions below, so the two paths cannot drift apart.
 */
export type CallFacts = Pick<ToolCallInput, 'toolCallId' | 'call' | 'permissionMode' | 'permissionModeOrigin'> & {
  args: unknown;
  approval: ApprovalRecord;
  result: ToolResult | null;
  resolvedName: string | null;
  executed: boolean;
};

/**
 * The ids of the session and turn a call belongs to, passed beside its facts: the Turn keeps them
 * outside `direct`, and a copy of `direct` with the two keys added would give every step's copy a V8
 * map of its own (docs/decisions.md, "No spread-plus-key copies on the step path").
 */
export interface CallOwner {
  sessionId: string;
  turnId: string;
}

/** The `executeTool` input of a call. */
export function executeInputOf(c: CallFacts, owner: CallOwner): ExecuteInput {
  return {
    sessionId: owner.sessionId,
    turnId: owner.turnId,
    toolCallId: c.toolCallId,
    providerCallId: c.call.callId,
    toolName: c.call.name,
    args: c.args,
    permissionMode: c.permissionMode,
    approval: c.approval,
  };
}

/**
 * The `recordToolResult` input of a call whose result is decided; `reserveModelCall` is the Turn's
 * direct call's (0: none).
 */
export function recordInputOf(c: CallFacts, owner: CallOwner, reserveModelCall = 0): RecordInput {
  return {
    sessionId: owner.sessionId,
    turnId: owner.turnId,
    toolCallId: c.toolCallId,
    providerCallId: c.call.callId,
    toolName: c.call.name,
    result: c.result!,
    approval: c.approval,
    resolvedName: c.resolvedName,
    permissionMode: c.permissionMode,
    permissionModeOrigin: c.permissionModeOrigin,
    executed: c.executed,
    reserveModelCall,
  };
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
