/**
 * @module errors
 * Every failure that crosses the public API is an `OpenworkError` with a stable `code`.
 * Subclasses say who is at fault; the `code` says exactly what happened.
 */

/** Answers to commands that the current state of a session refuses (seed 000 §2). */
export type CommandErrorCode =
  | 'busy'
  | 'turn_not_active'
  | 'permission_not_pending'
  | 'user_input_not_pending'
  | 'session_active'
  | 'reload_required'
  | 'actor_stopped'
  | 'session_not_found'
  | 'snapshot_required'
  | 'sub_agent_mode_fixed'
  | 'checkpoint_not_found'
  | 'core_closed'
  | 'session_owned_elsewhere'
  | 'ownership_lost';

/** Input the caller should fix before retrying. */
export type InputErrorCode =
  | 'empty_input'
  | 'input_too_large'
  | 'invalid_request'
  | 'agent_delivery_failed'
  | 'skill_unavailable'
  | 'configuration_invalid';

/** Failure codes of a Turn outcome (seed 000 §3) plus the startup and storage codes. */
export type TurnFailureCode =
  | 'model_error'
  | 'model_protocol_error'
  | 'persistence_error'
  | 'chat_state_error'
  | 'compaction_error'
  | 'permission_denied'
  | 'doom_loop'
  | 'max_model_calls'
  | 'output_invalid'
  | 'actor_stopped'
  | 'user_project_context_error'
  | 'project_instruction_error'
  | 'skill_catalog_task_error';

/** Debug-time inspection: an optional inspector package or relay that is not there, a non-loopback bind. */
export type InspectionErrorCode = 'inspector_unavailable' | 'inspector_unreachable' | 'inspector_not_loopback' | 'turn_not_found' | 'trace_unreadable';

export type ErrorCode =
  | CommandErrorCode
  | InputErrorCode
  | TurnFailureCode
  | InspectionErrorCode
  | 'context_overflow'
  | 'migration_error'
  | 'store_locked'
  | 'mcp_server_unavailable'
  | 'updates_lagged'
  | 'script_error';

export interface OpenworkErrorOptions {
  cause?: unknown;
  details?: Record<string, unknown>;
}

/** Base class of every error the library throws. */
export class OpenworkError extends Error {
  readonly code: ErrorCode;
  readonly details: Record<string, unknown>;

  constructor(code: ErrorCode, message: string, options: OpenworkErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.details = options.details ?? {};
  }
}

/** The session's state refuses the command; nothing was changed. */
export class CommandError extends OpenworkError {
  declare readonly code: CommandErrorCode;
  constructor(code: CommandErrorCode, message: string, options?: OpenworkErrorOptions) {
    super(code, message, options);
  }
}

/** `busy`: a turn is already active; `activeTurnId` names it. New turns are never queued. */
export class BusyError extends CommandError {
  readonly activeTurnId: string;
  constructor(activeTurnId: string) {
    super('busy', `session is busy with turn ${activeTurnId}`, { details: { activeTurnId } });
    this.activeTurnId = activeTurnId;
  }
}

/** The input itself is wrong (empty, too large, malformed). */
export class InputError extends OpenworkError {
  declare readonly code: InputErrorCode;
  constructor(code: InputErrorCode, message: string, options?: OpenworkErrorOptions) {
    super(code, message, options);
  }
}

/** A database write or read failed. `sqlState` is set when Postgres reported one. */
export class StorageError extends OpenworkError {
  readonly sqlState: string | undefined;
  constructor(message: string, options: OpenworkErrorOptions & { sqlState?: string } = {}) {
    super('persistence_error', message, options);
    this.sqlState = options.sqlState;
  }
}

/**
 * `store_locked`: the embedded store's directory is held by another live process (issue 13.5).
 * `details` name the lock file and the holder's pid and host.
 */
export class StoreLockedError extends OpenworkError {
  declare readonly code: 'store_locked';
  constructor(message: string, options?: OpenworkErrorOptions) {
    super('store_locked', message, options);
  }
}

/** The model provider failed (`model_error`), broke the stream protocol, or refused the context. */
export class ModelError extends OpenworkError {
  /** True once a text, reasoning or tool-call event had arrived (seed 000 §6). */
  readonly semanticOutput: boolean;
  /** Whether a retry of the same request may succeed (429, 5xx, reset before output). */
  readonly retryable: boolean;
  constructor(
    code: 'model_error' | 'model_protocol_error' | 'context_overflow',
    message: string,
    options: OpenworkErrorOptions & { semanticOutput?: boolean; retryable?: boolean } = {},
  ) {
    super(code, message, options);
    this.semanticOutput = options.semanticOutput ?? false;
    this.retryable = options.retryable ?? false;
  }
}

/**
 * `updates_lagged`: a reader of the updates (`session.stream`, `toSSE`, `toResponse`) fell more than
 * its buffer's capacity (512 updates) behind, so the oldest updates it had not read were dropped for
 * it (seed 000 §7; tokio's broadcast `Lagged`). Nothing else is affected: the turn goes on, its
 * `result` settles and the transcript is stored. Reading on continues from the oldest update still
 * held (`nextSequence`); what was missed comes from `replayUpdates(resumeAfterSequence)`, or from
 * `snapshot()` when that answers `snapshot_required` (reference §8.5).
 */
export class UpdatesLaggedError extends OpenworkError {
  declare readonly code: 'updates_lagged';
  /** How many updates were dropped for this reader. */
  readonly skipped: number;
  /** The sequence to pass to `replayUpdates`: the last one the reader had before the gap. */
  readonly resumeAfterSequence: number;
  /** The sequence of the next update the reader gets. */
  readonly nextSequence: number;
  constructor(lag: { skipped: number; resumeAfterSequence: number; nextSequence: number }) {
    super('updates_lagged', `the reader fell behind: ${lag.skipped} updates after sequence ${lag.resumeAfterSequence} were dropped for it; it goes on at ${lag.nextSequence}`, {
      details: { skipped: lag.skipped, resumeAfterSequence: lag.resumeAfterSequence, nextSequence: lag.nextSequence },
    });
    this.skipped = lag.skipped;
    this.resumeAfterSequence = lag.resumeAfterSequence;
    this.nextSequence = lag.nextSequence;
  }
}

/** Inspection could not be set up; the runtime itself is unaffected. */
export class InspectionError extends OpenworkError {
  declare readonly code: InspectionErrorCode;
  constructor(code: InspectionErrorCode, message: string, options?: OpenworkErrorOptions) {
    super(code, message, options);
  }
}

/** Turns an unknown thrown value into a message without losing it. */
export function errorMessage(error: unknown): string {
  // Always a string (integrity-paths point 3): JSON.stringify answers undefined for undefined, a
  // symbol or a function, and String throws for an object without a prototype; a message getter may throw.
  try {
    if (error instanceof Error && typeof error.message === 'string') return error.message;
    if (typeof error === 'string') return error;
    const json = JSON.stringify(error) as string | undefined;
    if (typeof json === 'string') return json;
  } catch {
    // Fall through to the plainer forms below.
  }
  try {
    return String(error);
  } catch {
    return Object.prototype.toString.call(error);
  }
}

/** Narrows an unknown value to an OpenworkError. */
export function isOpenworkError(error: unknown): error is OpenworkError {
  return error instanceof OpenworkError;
}

/**
 * `mcp_server_unavailable`: an MCP server could not be started, reached or initialised, or did not
 * list its tools. `details.server` names it.
 */
export class McpServerError extends OpenworkError {
  declare readonly code: 'mcp_server_unavailable';
  constructor(server: string, message: string, options?: OpenworkErrorOptions) {
    super('mcp_server_unavailable', message, { ...options, details: { server, ...(options?.details ?? {}) } });
  }
}
