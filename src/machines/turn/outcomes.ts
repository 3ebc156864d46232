/**
 * @module machines/turn/outcomes
 * How the Turn's failures and stops become its outcome: pure functions over what its actors throw.
 * A storage failure is read over the `errors.ts` classes by the tool-call machine's mapping
 * (`storageFailureCode`), so a refused write ends a turn the same way wherever it happens. A model
 * call's failure is read over `ModelError` and, before the model was asked, over the stage of the
 * actor's `ModelCallSetupFailure` and the `OpenworkError` that stage threw: never over a `code`
 * carried by a plain object.
 */
import { errorMessage, isOpenworkError, ModelError } from '../../errors.js';
import { storableText } from '../../protocol/storable-text.js';
import type { TurnOutcome } from '../../protocol/updates.js';
import { storageFailureCode, storageTerminalCode } from '../tool-call/outcomes.js';
import { ModelCallSetupFailure, type ModelCallStage } from './ports.js';

/** A failed outcome; its message is made storable. */
export function failedOutcome(code: string, message: string): TurnOutcome {
  // A provider's or a tool's message may carry a NUL; the stored end and the update say the same storable text.
  return { status: 'failed', code, message: storableText(message) };
}

/** The text of a thrown value: its `message` when it has one, else the value itself. */
export function errorText(error: unknown): string {
  // Read inside an assign: String() of an object without a prototype, or a throwing getter, would crash the Turn.
  try {
    if (error && typeof error === 'object' && 'message' in error) return String((error as { message: unknown }).message);
    return String(error);
  } catch {
    return errorMessage(error);
  }
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

/** World State codes (reference §2.3): a source that could not be sampled fails the turn with its own code. */
type WorldStateCode = 'user_project_context_error' | 'project_instruction_error' | 'skill_catalog_task_error';

/** The World State code an `OpenworkError` carries, or null for any other failure. */
function worldStateCode(error: unknown): WorldStateCode | null {
  if (!isOpenworkError(error)) return null;
  switch (error.code) {
    case 'user_project_context_error':
    case 'project_instruction_error':
    case 'skill_catalog_task_error':
      return error.code;
    default:
      return null;
  }
}

/** The stage at which the model actor failed before the model was asked, or null for a failure of the call itself. */
export function modelCallStage(error: unknown): ModelCallStage | null {
  return error instanceof ModelCallSetupFailure ? error.stage : null;
}

/** What a stage threw (the failure itself when it is not a setup failure). */
function setupCause(error: unknown): unknown {
  return error instanceof ModelCallSetupFailure ? error.cause : error;
}

/**
 * World State could not be sampled (reference §2.3), so nothing was asked: a source's own code, or
 * the storage failure that stopped the sampling (`storageFailure`).
 */
export function samplingFailure(error: unknown): TurnOutcome {
  const cause = setupCause(error);
  const code = worldStateCode(cause);
  return code ? failedOutcome(code, errorText(cause)) : storageFailure(cause);
}

/**
 * The request could not be assembled (reference §2.7), so nothing was recorded or sent: a World
 * State code, `chat_state_error` (the conversation cannot be sent as it is), or
 * `model_protocol_error` for anything else (an `AssemblyError`, a tool source that failed).
 */
export function assemblyFailure(error: unknown): TurnOutcome {
  const cause = setupCause(error);
  const code = worldStateCode(cause) ?? (isOpenworkError(cause) && cause.code === 'chat_state_error' ? 'chat_state_error' : 'model_protocol_error');
  return failedOutcome(code, errorText(cause));
}

/** The call's counters could not be written, so the model was not asked: the storage failure. */
export function counterWriteFailure(error: unknown): TurnOutcome {
  return storageFailure(setupCause(error));
}

/**
 * The provider refused the context before any output of the call (seed 000 §6): a compaction may
 * make room for one resubmission. The chart adds its own conditions (compaction on, not tried yet).
 */
export function isContextOverflow(error: unknown): boolean {
  return error instanceof ModelError && error.code === 'context_overflow' && !error.semanticOutput;
}

/**
 * The model call failed: `model_protocol_error` when the provider broke the stream's protocol,
 * else `model_error` (the provider failed, or refused a context that could not be compacted).
 */
export function modelFailure(error: unknown): TurnOutcome {
  const code = error instanceof ModelError && error.code === 'model_protocol_error' ? 'model_protocol_error' : 'model_error';
  return failedOutcome(code, errorText(error));
}

/**
 * A compaction during the turn failed: the turn fails `compaction_error` (`ownership_lost` when the
 * session is another runtime's now). A checkpoint that was
 * committed but could not be installed (an `OpenworkError` coded `reload_required`) also leaves the
 * session needing a reload before its next turn.
 */
export function compactionFailure(error: unknown): { outcome: TurnOutcome; reloadRequired: boolean } {
  return {
    // A lease lost before the summary request, or a checkpoint the fence refused: `ownership_lost`,
    // as for every other write of the turn (trust-leftovers).
    outcome: failedOutcome(isOwnershipLost(error) ? 'ownership_lost' : 'compaction_error', errorText(error)),
    reloadRequired: isOpenworkError(error) && error.code === 'reload_required',
  };
}
