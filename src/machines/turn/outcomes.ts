/**
 * @module machines/turn/outcomes
 * How the Turn's failures and stops become its outcome: pure functions over what its actors throw.
 */
import { storableText } from '../../protocol/storable-text.js';
import type { TurnOutcome } from '../../protocol/updates.js';

export function failedOutcome(code: string, message: string): TurnOutcome {
  // A provider's or a tool's message may carry a NUL; the stored end and the update say the same storable text.
  return { status: 'failed', code, message: storableText(message) };
}

export function errorText(error: unknown): string {
  if (error && typeof error === 'object' && 'message' in error) return String((error as { message: unknown }).message);
  return String(error);
}

export function storageFailure(error: unknown): TurnOutcome {
  const raw = (error as { code?: string } | null)?.code;
  // `ownership_lost` (issue 15): another runtime owns the session now; the write was refused whole.
  const code = raw === 'chat_state_error' || raw === 'ownership_lost' ? raw : 'persistence_error';
  return failedOutcome(code, errorText(error));
}

export function stopOutcome(stop: 'cancel' | 'stop' | null): TurnOutcome {
  return stop === 'stop' ? failedOutcome('actor_stopped', 'the session actor stopped during the turn') : { status: 'cancelled' };
}
