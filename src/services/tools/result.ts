/**
 * @module services/tools/result
 * How a tool result becomes part of the conversation: one tool message per result, written with
 * the turn's other facts and appended to the session's chat. Every result goes this one way: the
 * tool-call machine's record step, the Turn's own record step and the cancelled remainder of a
 * batch. The `tool_call_finished` update that follows is the machines' (`toolCallFinishedUpdate`).
 */
import type { NewMessage } from '../../protocol/content.js';
import { storableValue } from '../../protocol/storable-text.js';
import { toolResultContent, type ToolResult } from '../../protocol/tool-result.js';
import type { RuntimeServices } from '../runtime.js';

/** The tool message that answers one provider call. */
export function toolResultMessage(id: string, providerCallId: string, toolName: string, result: ToolResult): NewMessage {
  return { id, role: 'tool', kind: 'normal', content: toolResultContent(providerCallId, result), providerCallId, toolName };
}

export interface CommitToolResultInput {
  sessionId: string;
  turnId: string;
  providerCallId: string;
  toolName: string;
  result: ToolResult;
  /** The next model call this result reserves (the Turn's direct call only; 0 or absent: none). */
  reserveModelCall?: number;
}

/**
 * Writes a result as its tool message and appends the stored message to the session's chat.
 * Answers the result as stored: made storable first (issue 13.2), so a NUL from `printf '\0'` or a
 * lone surrogate from a host tool is U+FFFD in the row, the update and the next request alike.
 * Throws what the storage throws (`persistence_error`, `ownership_lost`, `chat_state_error`).
 */
export async function commitToolResult(services: Pick<RuntimeServices, 'ids' | 'storage' | 'session'>, input: CommitToolResultInput): Promise<ToolResult> {
  const result = storableValue(input.result);
  const message = toolResultMessage(services.ids.next('msg'), input.providerCallId, input.toolName, result);
  const stored = await services.storage.commitToolResult(input.turnId, message, input.reserveModelCall);
  services.session(input.sessionId).chat.append([stored]);
  return result;
}
