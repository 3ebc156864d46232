/**
 * @module protocol/tool-result
 * The result of one tool call as the runtime carries it: the text the model sees, the status and
 * error code the host and the trace see, and the facts (artifacts, a sandbox denial) neither model
 * nor wire needs. It sits below the machines and the services, which both build results.
 */
import type { ToolError, ToolResultStatus } from './content.js';

export interface ToolResult {
  status: ToolResultStatus;
  text: string;
  error?: ToolError;
  artifacts?: Array<Record<string, unknown>>;
  sandboxDenied?: boolean;
}
