/**
 * @module services/model/openai-wire
 * What both OpenAI wire formats (Responses and Chat Completions) share: how a tool result's
 * model-visible status is written, how system parts and user messages become text, how a provider
 * failure becomes a `ModelError`, and what counts as a context-length refusal.
 */
import { ModelError } from '../../errors.js';
import type { TextBlock } from '../../protocol/content.js';
import type { ModelMessage, SystemPart } from './port.js';

/** Where in the exchange a model call failed (reference §11.1 `errorPhase`). */
export type ErrorPhase = 'request_encode' | 'connect' | 'response_headers' | 'response_body' | 'stream_decode' | 'response_decode';

/** Whether the request reached the provider (reference §11.1 `deliveryState`). */
export type DeliveryState = 'not_sent' | 'possibly_sent' | 'accepted_no_semantic_output' | 'semantic_output_emitted';

/** The facts a model failure carries into the trace (all optional but the phase). */
export interface FailureFacts {
  errorPhase: ErrorPhase;
  deliveryState: DeliveryState;
  httpStatus?: number;
  providerCode?: string;
  semanticOutput?: boolean;
  retryable?: boolean;
  retryAfterMs?: number;
  cause?: unknown;
}

/** A `ModelError` whose `details` hold the trace facts of reference §11.1. */
export function modelFailure(code: 'model_error' | 'model_protocol_error' | 'context_overflow', message: string, facts: FailureFacts): ModelError {
  const details: Record<string, unknown> = { errorPhase: facts.errorPhase, deliveryState: facts.semanticOutput ? 'semantic_output_emitted' : facts.deliveryState };
  if (facts.httpStatus !== undefined) details.httpStatus = facts.httpStatus;
  if (facts.providerCode !== undefined) details.providerCode = facts.providerCode;
  if (facts.retryAfterMs !== undefined) details.retryAfterMs = facts.retryAfterMs;
  return new ModelError(code, message, {
    ...(facts.cause !== undefined ? { cause: facts.cause } : {}),
    details,
    semanticOutput: facts.semanticOutput ?? false,
    retryable: facts.retryable ?? false,
  });
}

/** A protocol violation found while decoding a stream. */
export function protocolError(message: string, semanticOutput: boolean): ModelError {
  return modelFailure('model_protocol_error', message, { errorPhase: 'stream_decode', deliveryState: 'accepted_no_semantic_output', semanticOutput });
}

const OVERFLOW_CODES = new Set(['context_length_exceeded', 'exceed_context_size_error', 'string_above_max_length']);

/**
 * A context-length refusal: OpenAI's `context_length_exceeded` code, llama.cpp's
 * `exceed_context_size_error` type, or, for servers that send no code (vLLM, Ollama, LM Studio),
 * their fixed refusal wording. Only this adapter reads wording; the runtime sees the code.
 */
export function isContextOverflow(code: string | null | undefined, type: string | null | undefined, message: string): boolean {
  if (code && OVERFLOW_CODES.has(code)) return true;
  if (type && OVERFLOW_CODES.has(type)) return true;
  return /maximum context length|context length exceeded|context_length_exceeded|exceeds? the (available )?context (size|window|length)|prompt is too long|too many tokens in the prompt/i.test(message);
}

/** Codes that a provider uses for a failure that the same request may not meet again. */
export function isTransientCode(code: string | null | undefined): boolean {
  return code === 'server_error' || code === 'rate_limit_exceeded' || code === 'server_is_overloaded' || code === 'slow_down';
}

/** The system parts as one instruction text, in order. */
export function systemText(parts: readonly SystemPart[]): string {
  return parts.map((p) => p.content).join('\n\n');
}

/** A user-role message's text (contextual messages are user-role text too). */
export function userText(content: readonly TextBlock[]): string {
  return content.map((b) => b.text).join('\n\n');
}

/**
 * The text a tool result is sent with. A successful result is its text; any other status
 * (seed 000 §5: `error`, `denied`, `interrupted`) is named first, so the model can tell a refusal or
 * an interruption from output. The prefix is constant, so the synthesized result stays byte-stable.
 */
export function toolResultText(message: Extract<ModelMessage, { role: 'tool' }>): string {
  return message.status === 'success' ? message.text : `[${message.status}] ${message.text}`;
}
