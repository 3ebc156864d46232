/**
 * @module protocol/model-messages
 * The provider-neutral messages of a model request: the system context parts and the conversation
 * as sent. The model port sends them, the machines carry the system context, and the trace records
 * both, so they sit below all three.
 */
import type { MessageKind, ModelToolStatus, ProviderOpaqueBlock, ReasoningBlock, TextBlock, ToolCallBlock } from './content.js';

/** One keyed part of the system context (instructions, environment, skills catalog, ...). */
export interface SystemPart {
  key: string;
  content: string;
}

/** One message of a model request, in the order the model reads them. */
export type ModelMessage =
  | { role: 'user'; kind: MessageKind | 'synthetic'; content: TextBlock[] }
  | { role: 'assistant'; content: Array<TextBlock | ReasoningBlock | ProviderOpaqueBlock | ToolCallBlock> }
  | { role: 'tool'; callId: string; toolName: string; status: ModelToolStatus; text: string; synthetic?: boolean };
