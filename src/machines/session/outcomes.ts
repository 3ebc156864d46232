/**
 * @module machines/session/outcomes
 * Pure mappings from what went wrong to what the Session answers: a command its state refuses
 * becomes a `CommandErrorReply` whose `code` is a `CommandErrorCode` of `errors.ts` (the session
 * handle turns it back into the matching `CommandError`), and a Turn actor that failed becomes the
 * turn's `actor_stopped` outcome. The chart calls these; it lists no codes of its own.
 */
import { errorMessage, type CommandErrorCode } from '../../errors.js';
import type { TurnPlanSnapshot } from '../../protocol/plan.js';
import type { Phase, TurnOutcome } from '../../protocol/updates.js';
import { addUsage, type TokenUsage } from '../../protocol/usage.js';
import { planUnfinishedSteps, ZERO_USAGE, type TurnContext } from '../turn/context.js';
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
  // errorMessage never throws: String() of an object without a prototype would, inside the assign.
  return `the turn actor failed: ${errorMessage(error)}`;
}

/** The outcome of a turn whose actor failed instead of finishing (the chart's `onError`). */
export function turnCrashOutcome(error: unknown): TurnOutcome {
  return { status: 'failed', code: 'actor_stopped', message: turnCrashMessage(error) };
}

/**
 * What the failed Turn actor knew, read from its last snapshot (an actor that fails keeps the
 * context of its last completed step): the usage of the model calls it made, its plan, the model
 * call it reserved and never made, and the phase it was in. The crashed turn's end records and
 * announces these as a normal end would (integrity-paths point 2). Absent (the actor failed as it
 * started), the turn made nothing: zero usage, no plan, nothing reserved.
 */
export interface CrashedTurnFacts {
  usage: TokenUsage;
  plan: TurnPlanSnapshot | null;
  planUnfinishedStepCount: number | null;
  unmadeModelCall: number;
  phase: Phase | null;
}

export function crashedTurnFacts(last: TurnContext | undefined): CrashedTurnFacts {
  if (!last) return { usage: ZERO_USAGE, plan: null, planUnfinishedStepCount: null, unmadeModelCall: 0, phase: null };
  return {
    // A copy: the dead actor's objects are not shared with the session's context.
    usage: addUsage(ZERO_USAGE, last.usage),
    plan: last.plan,
    planUnfinishedStepCount: planUnfinishedSteps(last),
    unmadeModelCall: last.counts.reservedCall,
    phase: last.phase,
  };
}
