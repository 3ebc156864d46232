/**
 * @module machines/tool-call/outcomes
 * How a tool call's failures and stops become its result and its terminal: pure functions over
 * the `errors.ts` classes and the result vocabulary, used by the tool-call machine and by the
 * Turn's own run of a call (`tools.run`), so the two end a call the same way.
 */
import { CommandError, errorMessage, isOpenworkError } from '../../errors.js';
import { ACTOR_STOPPED_TEXT, CANCELLED_BEFORE_RUN_TEXT, UNCONFIRMED_STOP_TEXT } from '../../protocol/model-texts.js';
import { cancelledResult, failedResult, outcomeUnknownResult, type ToolResult } from '../../protocol/tool-result.js';
import type { ToolCallTerminal } from '../types.js';

/** The text of an actor's failure: its message, or the thrown value itself when it has none. */
export function failureText(error: unknown): string {
  // String() throws for an object without a prototype, and a getter may throw: the text is always made.
  try {
    return String((error as { message?: unknown } | null)?.message ?? error);
  } catch {
    return errorMessage(error);
  }
}

/** The result of a call whose actor threw (the tool's execute, the agent tool): `execution_failed`. */
export function actorFailureResult(error: unknown): ToolResult {
  return failedResult('execution_failed', failureText(error));
}

/**
 * A refused write of a session another runtime owns now (the fence's `CommandError`) ends the
 * turn `ownership_lost` (issue 15); any other storage failure, `persistence_error`.
 */
export function storageTerminalCode(error: unknown): 'ownership_lost' | 'persistence_error' {
  return error instanceof CommandError && error.code === 'ownership_lost' ? 'ownership_lost' : 'persistence_error';
}

/**
 * The code of a write that failed: the conversation refused it (`chat_state_error`, an
 * `OpenworkError` such as a result for a call it does not hold), the fence refused it
 * (`ownership_lost`), or the database failed (`persistence_error`). Used by the Turn's storage
 * failures too, so both machines read a failure the same way.
 */
export function storageFailureCode(error: unknown): 'chat_state_error' | 'ownership_lost' | 'persistence_error' {
  return isOpenworkError(error) && error.code === 'chat_state_error' ? 'chat_state_error' : storageTerminalCode(error);
}

/** A result that could not be written (`storageFailureCode`): the turn ends. */
export function recordFailureTerminal(error: unknown): ToolCallTerminal {
  return { code: storageFailureCode(error), message: failureText(error) };
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

/** The result and terminal of a call stopped before its tool ran: a cancel, or the actor stopping. */
export function stopBeforeRun(stop: boolean): { stopRequest: 'cancel' | 'stop'; result: ToolResult; terminal: ToolCallTerminal } {
  return stop
    ? { stopRequest: 'stop', result: outcomeUnknownResult(ACTOR_STOPPED_TEXT), terminal: { code: 'actor_stopped', message: 'the session actor stopped' } }
    : { stopRequest: 'cancel', result: cancelledResult(CANCELLED_BEFORE_RUN_TEXT), terminal: { code: 'cancelled', message: 'the turn was cancelled' } };
}

/**
 * The result and terminal of a call whose tool was asked to stop and did not confirm it within the
 * cancel grace (the `after` transition of `executing.stopping`, in the tool-call machine and in the
 * Turn's `tools.run` alike): its outcome is unknown, it counts as run, and the turn ends as the
 * stop asked (cancelled, or actor_stopped).
 */
export function unconfirmedStop(stopRequest: 'cancel' | 'stop' | null): { result: ToolResult; executed: true; terminal: ToolCallTerminal | null } {
  const result = outcomeUnknownResult(UNCONFIRMED_STOP_TEXT);
  return { result, executed: true, terminal: terminalAfterRun(stopRequest, result) };
}
