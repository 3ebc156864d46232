/**
 * @module protocol/tool-result
 * What a tool call gives back to the model: a status and the text the model reads. The tool-call
 * and Turn machines keep it in their context, so it sits below them and the tools that make it.
 */
import type { ToolError, ToolResultStatus } from './content.js';

/** The result of one tool call. */
export interface ToolResult {
  status: ToolResultStatus;
  text: string;
  error?: ToolError;
  artifacts?: Array<Record<string, unknown>>;
  sandboxDenied?: boolean;
}
