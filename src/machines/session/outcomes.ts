/**
 * @module machines/session/outcomes
 * Pure mappings from what went wrong to what the Session answers: a command its state refuses
 * becomes a `CommandErrorReply` whose `code` is a `CommandErrorCode` of `errors.ts` (the session
 * handle turns it back into the matching `CommandError`), and a Turn actor that failed becomes the
 * turn's `actor_stopped` outcome. The chart calls these; it lists no codes of its own.
 */
import type { CommandErrorCode } from '../../errors.js';
import type { TurnOutcome } from '../../protocol/updates.js';
import type { CommandErrorReply } from './events.js';

/** A refusal of a command; `activeTurnId` goes with `busy` only. */
export function refusal(code: CommandErrorCode, message: string, extra: { activeTurnId?: string } = {}): CommandErrorReply {
  return { ok: false, code, message, ...extra };
}

/** `busy`: the message is the one `BusyError` carries, so the handle's error reads the same. */
export function busyRefusal(activeTurnId: string): CommandErrorReply {
  return refusal('busy', `session is busy with turn ${activeTurnId}`, { activeTurnId });
}

/** A checkpoint was committed but not installed: nothing new starts until the session is reloaded. */
export function reloadRequiredRefusal(): CommandErrorReply {
  return refusal('reload_required', 'a compaction was committed but could not be installed; reload the session');
}

/** The command names a turn that is not the active one. */
export function turnNotActiveRefusal(turnId: string): CommandErrorReply {
  return refusal('turn_not_active', `turn ${turnId} is not active`);
}

/** The message of a Turn actor's failure, as the session's `systemError` and the outcome carry it. */
export function turnCrashMessage(error: unknown): string {
  return `the turn actor failed: ${error instanceof Error ? error.message : String(error)}`;
}

/** The outcome of a turn whose actor failed instead of finishing (the chart's `onError`). */
export function turnCrashOutcome(error: unknown): TurnOutcome {
  return { status: 'failed', code: 'actor_stopped', message: turnCrashMessage(error) };
}
