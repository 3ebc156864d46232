/**
 * @module protocol/content
 * The content blocks stored in `messages.content` (a JSON array) and the message rows built from them.
 */
import { z } from 'zod';

/**
 * Text of the conversation. An assistant message holds one text block per output message of the
 * provider (a commentary and a final answer stay two blocks); `phase` is the Responses API's label
 * of that message (`commentary` / `final_answer`), kept to send it back as it came.
 */
export const textBlockSchema = z.object({ type: z.literal('text'), text: z.string(), phase: z.string().optional() });

/** Between two text blocks wherever they are shown as one text: a paragraph break. */
export const TEXT_BLOCK_SEPARATOR = '\n\n';

/** Reasoning text the provider streamed; `opaque` keeps provider data needed in the next request. */
export const reasoningBlockSchema = z.object({
  type: z.literal('reasoning'),
  text: z.string(),
});

/** Provider-opaque items (e.g. encrypted reasoning) kept on the assistant message and sent back. */
export const providerOpaqueBlockSchema = z.object({
  type: z.literal('provider_opaque'),
  provider: z.string(),
  data: z.unknown(),
});

/** A complete tool call as the provider sent it; `arguments` is the raw JSON text. */
export const toolCallBlockSchema = z.object({
  type: z.literal('tool_call'),
  callId: z.string().min(1),
  name: z.string(),
  arguments: z.string(),
});

export const toolResultStatusSchema = z.enum(['succeeded', 'failed', 'denied', 'cancelled', 'outcome_unknown']);
export type ToolResultStatus = z.infer<typeof toolResultStatusSchema>;

export const toolErrorCodeSchema = z.enum([
  'tool_not_found',
  'invalid_arguments',
  'permission_denied',
  'cancelled',
  'timeout',
  'execution_failed',
  'outcome_unknown',
  'sandbox_unavailable',
  /** An MCP server answered the call with `isError: true` (the tool ran and reported a failure). */
  'mcp_tool_error',
  /** An MCP server answered with a JSON-RPC error, or with a result that is not a tool result. */
  'mcp_protocol_error',
  /** The MCP server's process or connection went away during the call; it restarts on the next call. */
  'mcp_server_exited',
  /** The MCP server could not be started or reached for this call. */
  'mcp_server_unavailable',
  /**
   * bash wrote past its disk limits (trust-lease): a file past the file size limit (RLIMIT_FSIZE),
   * or more bytes or inodes than one call may use on the file systems it can write.
   */
  'disk_limit_exceeded',
]);
export type ToolErrorCode = z.infer<typeof toolErrorCodeSchema>;

export const toolErrorSchema = z.object({
  code: toolErrorCodeSchema,
  message: z.string(),
  retryable: z.boolean(),
});
export type ToolError = z.infer<typeof toolErrorSchema>;

/** The one block of a tool message: the text the model sees plus facts it never sees. */
export const toolResultBlockSchema = z.object({
  type: z.literal('tool_result'),
  callId: z.string().min(1),
  status: toolResultStatusSchema,
  text: z.string(),
  error: toolErrorSchema.optional(),
  artifacts: z.array(z.record(z.string(), z.unknown())).optional(),
  sandboxDenied: z.boolean().optional(),
});

export const contentBlockSchema = z.discriminatedUnion('type', [
  textBlockSchema,
  reasoningBlockSchema,
  providerOpaqueBlockSchema,
  toolCallBlockSchema,
  toolResultBlockSchema,
]);

export type TextBlock = z.infer<typeof textBlockSchema>;
export type ReasoningBlock = z.infer<typeof reasoningBlockSchema>;
export type ProviderOpaqueBlock = z.infer<typeof providerOpaqueBlockSchema>;
export type ToolCallBlock = z.infer<typeof toolCallBlockSchema>;
export type ToolResultBlock = z.infer<typeof toolResultBlockSchema>;
export type ContentBlock = z.infer<typeof contentBlockSchema>;

export const messageRoleSchema = z.enum(['system', 'user', 'assistant', 'tool']);
export type MessageRole = z.infer<typeof messageRoleSchema>;
export const messageKindSchema = z.enum(['normal', 'skill_instruction', 'agent_message', 'world_state']);
export type MessageKind = z.infer<typeof messageKindSchema>;

/** A message as written to storage; `sequence` is assigned by the storage transaction. */
export interface NewMessage {
  id: string;
  role: Exclude<MessageRole, 'system'>;
  kind: MessageKind;
  content: ContentBlock[];
  providerCallId?: string;
  toolName?: string;
}

/** A committed message row. */
export interface StoredMessage extends NewMessage {
  sessionId: string;
  turnId: string | null;
  sequence: number;
  createdAt: string;
}

/** The model-visible status of a tool result (seed 000 §5). */
export type ModelToolStatus = 'success' | 'error' | 'denied' | 'interrupted';

export function modelToolStatus(status: ToolResultStatus): ModelToolStatus {
  switch (status) {
    case 'succeeded':
      return 'success';
    case 'failed':
    case 'outcome_unknown':
      return 'error';
    case 'denied':
      return 'denied';
    case 'cancelled':
      return 'interrupted';
    default: {
      const never: never = status;
      throw new Error(`unknown tool status ${String(never)}`);
    }
  }
}

export function toolCallsOf(content: readonly ContentBlock[]): ToolCallBlock[] {
  return content.filter((b): b is ToolCallBlock => b.type === 'tool_call');
}

export function textOf(content: readonly ContentBlock[]): string {
  return content
    .filter((b): b is TextBlock => b.type === 'text')
    .map((b) => b.text)
    .join(TEXT_BLOCK_SEPARATOR);
}
