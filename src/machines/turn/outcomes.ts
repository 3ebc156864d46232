/**
 * @module machines/turn/outcomes
 * How the Turn's failures and stops become its outcome: pure functions over what its actors throw.
 * A storage failure is read over the `errors.ts` classes by the tool-call machine's mapping
 * (`storageFailureCode`), so a refused write ends a turn the same way wherever it happens.
 */
import { storableText } from '../../protocol/storable-text.js';
import type { TurnOutcome } from '../../protocol/updates.js';
import { storageFailureCode, storageTerminalCode } from '../tool-call/outcomes.js';

/** A failed outcome; its message is made storable. */
export function failedOutcome(code: string, message: string): TurnOutcome {
  // A provider's or a tool's message may carry a NUL; the stored end and the update say the same storable text.
  return { status: 'failed', code, message: storableText(message) };
}

/** The text of a thrown value: its `message` when it has one, else the value itself. */
export function errorText(error: unknown): string {
  if (error && typeof error === 'object' && 'message' in error) return String((error as { message: unknown }).message);
  return String(error);
}

/**
 * A storage write of the turn failed: `chat_state_error` (the conversation refused it),
 * `ownership_lost` (issue 15: another runtime owns the session now; the write was refused whole)
 * or `persistence_error`, read over the error classes, never over a bare `code` string.
 */
export function storageFailure(error: unknown): TurnOutcome {
  return failedOutcome(storageFailureCode(error), errorText(error));
}

/** The fence refused the write (`CommandError('ownership_lost')`): the session is another runtime's now. */
export function isOwnershipLost(error: unknown): boolean {
  return storageTerminalCode(error) === 'ownership_lost';
}

/** The outcome of a turn stopped by a cancel, or by its session actor stopping. */
export function stopOutcome(stop: 'cancel' | 'stop' | null): TurnOutcome {
  return stop === 'stop' ? failedOutcome('actor_stopped', 'the session actor stopped during the turn') : { status: 'cancelled' };
}
