/**
 * @module protocol/tool-result
 * The result of one tool call as the runtime carries it: the text the model sees, the status and
 * error code the host and the trace see, and the facts (artifacts, a sandbox denial) neither model
 * nor wire needs. It sits below the machines and the services, which both build results.
 */
import type { ContentBlock, ToolError, ToolErrorCode, ToolResultStatus } from './content.js';
import type { SessionUpdate } from './updates.js';

export interface ToolResult {
  status: ToolResultStatus;
  text: string;
  error?: ToolError;
  artifacts?: Array<Record<string, unknown>>;
  sandboxDenied?: boolean;
}

/**
 * What a result may carry besides its text: the error's own message when it differs from the text
 * (a command's output with a one-line reason), whether a retry may help, and the facts only the
 * host and the trace read.
 */
export interface ResultOptions {
  message?: string;
  retryable?: boolean;
  artifacts?: Array<Record<string, unknown>>;
  sandboxDenied?: boolean;
}

/** The result of one status other than `succeeded`: the text, its error, then the facts. */
function withError(status: Exclude<ToolResultStatus, 'succeeded'>, code: ToolErrorCode, text: string, options: ResultOptions): ToolResult {
  return {
    status,
    text,
    error: { code, message: options.message ?? text, retryable: options.retryable ?? false },
    ...(options.artifacts ? { artifacts: options.artifacts } : {}),
    ...(options.sandboxDenied !== undefined ? { sandboxDenied: options.sandboxDenied } : {}),
  };
}

/**
 * The tool ran and answered; the model reads `text`.
 *
 * @example
 * succeededResult('Plan updated');
 */
export function succeededResult(text: string, options: Pick<ResultOptions, 'artifacts' | 'sandboxDenied'> = {}): ToolResult {
  return {
    status: 'succeeded',
    text,
    ...(options.artifacts ? { artifacts: options.artifacts } : {}),
    ...(options.sandboxDenied !== undefined ? { sandboxDenied: options.sandboxDenied } : {}),
  };
}

/**
 * The call did not do what it was asked: bad input, an unknown tool, a tool that reported a
 * failure or timed out. Not retryable unless said so.
 *
 * @example
 * failedResult('tool_not_found', toolNotFoundText('nope'));
 */
export function failedResult(code: ToolErrorCode, text: string, options: ResultOptions = {}): ToolResult {
  return withError('failed', code, text, options);
}

/** The call was refused and did not run: by the user, by a rule, or because bash has no sandbox. */
export function deniedResult(text: string, code: 'permission_denied' | 'sandbox_unavailable' = 'permission_denied'): ToolResult {
  return withError('denied', code, text, {});
}

/** The call was cancelled: before it ran, while it waited for the user, or by its own abort. */
export function cancelledResult(text: string, options: Pick<ResultOptions, 'message'> = {}): ToolResult {
  return withError('cancelled', 'cancelled', text, options);
}

/** The call may or may not have had its effect: the runtime stopped, or the tool never confirmed its end. */
export function outcomeUnknownResult(text: string, options: Pick<ResultOptions, 'message'> = {}): ToolResult {
  return withError('outcome_unknown', 'outcome_unknown', text, options);
}

/** The single content block of a tool message. */
export function toolResultContent(callId: string, result: ToolResult): ContentBlock[] {
  return [
    {
      type: 'tool_result',
      callId,
      status: result.status,
      text: result.text,
      ...(result.error ? { error: result.error } : {}),
      ...(result.artifacts ? { artifacts: result.artifacts } : {}),
      ...(result.sandboxDenied !== undefined ? { sandboxDenied: result.sandboxDenied } : {}),
    },
  ];
}

/** Which call a result answers, as `tool_call_finished` names it. */
export interface ToolCallIds {
  toolCallId: string;
  providerCallId: string;
  toolName: string;
}

/**
 * The `tool_call_finished` update of a result that is stored (reference §6.4): the same status,
 * text and error the model reads, never the facts only the trace keeps.
 */
export function toolCallFinishedUpdate(ids: ToolCallIds, result: ToolResult): Extract<SessionUpdate, { type: 'tool_call_finished' }> {
  return {
    type: 'tool_call_finished',
    toolCallId: ids.toolCallId,
    providerCallId: ids.providerCallId,
    toolName: ids.toolName,
    status: result.status,
    text: result.text,
    ...(result.error ? { error: result.error } : {}),
  };
}
