/**
 * @module services/model/port
 * The provider-neutral model port: a request in, a stream of events out.
 */
import type { ProviderOpaqueBlock, ReasoningBlock, ToolCallBlock } from '../../protocol/content.js';
import type { ModelMessage, SystemPart } from '../../protocol/model-messages.js';
import type { RateLimitSnapshot } from '../../protocol/rate-limits.js';
import type { TokenUsage } from '../../protocol/usage.js';

// The message shapes moved down to the protocol; this keeps the old import path working.
export type { ModelMessage, SystemPart } from '../../protocol/model-messages.js';

export interface ToolDefinition {
  name: string;
  description: string;
  /** JSON Schema of the arguments object. */
  parameters: Record<string, unknown>;
}

/** What the runtime asks of a model; adapters encode it for their provider and read no other source. */
export interface ModelRequest {
  system: SystemPart[];
  messages: ModelMessage[];
  tools: ToolDefinition[];
  maxOutputTokens?: number;
  reasoningEffort?: string;
  /**
   * The turn asked for structured output: the final answer should be one JSON value of this schema.
   * Adapters that can constrain the answer send it (OpenAI: `response_format` / `text.format` of
   * type `json_schema`); the runtime validates the answer either way.
   */
  responseFormat?: ResponseFormat;
}

/** A JSON Schema the final answer must follow (the root is an object, as the providers require). */
export interface ResponseFormat {
  name: string;
  schema: Record<string, unknown>;
}

export type FinishReason = 'stop' | 'tool_use' | 'length' | 'content_filter' | 'refusal' | 'incomplete' | 'unknown';

export type ModelStreamEvent =
  /**
   * Answer text. Each output message of the provider is its own text block: `newBlock` marks the
   * first delta of a message after text of an earlier one, and `phase` (the Responses API's
   * `commentary` / `final_answer`) is carried on the first delta of the message that has one.
   */
  | { type: 'text_delta'; delta: string; newBlock?: true; phase?: string }
  | { type: 'reasoning_delta'; delta: string }
  /** A complete tool call; adapters emit it only once its arguments are complete. */
  | { type: 'tool_call'; callId: string; name: string; arguments: string }
  | { type: 'provider_opaque'; provider: string; data: unknown }
  | { type: 'completed'; usage: TokenUsage; responseId?: string; finishReason?: FinishReason; actualModel?: string }
  /** A transport retry happened before any output; visible in the trace as attempts. `delayMs`: the wait before it. */
  | { type: 'retry'; attempt: number; reason: string; delayMs?: number };

export interface ModelCallOptions {
  signal: AbortSignal;
}

export interface ModelPort {
  /** `<provider>/<model>` as stored in `turns.model_id`. */
  readonly id: string;
  readonly providerId: string;
  readonly model: string;
  readonly contextWindow?: number;
  readonly maxOutputTokens?: number;
  /** Streams one response. Throws `ModelError` on failure; an abort ends it with the signal's reason. */
  stream(request: ModelRequest, options: ModelCallOptions): AsyncIterable<ModelStreamEvent>;
  /** The latest rate-limit headers seen, if the provider sends them. */
  rateLimits?(): RateLimitSnapshot | null;
}

export type { ReasoningBlock, ProviderOpaqueBlock, ToolCallBlock, RateLimitSnapshot };
