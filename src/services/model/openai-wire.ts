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

const TRANSIENT_CODES = new Set(['server_error', 'rate_limit_exceeded', 'server_is_overloaded', 'slow_down', 'overloaded_error', 'rate_limit_error', 'internal_server_error', 'service_unavailable']);

/**
 * Codes that a provider uses for a failure that the same request may not meet again: OpenAI's
 * names, and the HTTP status that compatible servers (vLLM, gateways) put in `code` as a number.
 */
export function isTransientCode(code: string | number | null | undefined): boolean {
  if (code === null || code === undefined) return false;
  const status = typeof code === 'number' ? code : /^\d{3}$/.test(code) ? Number(code) : NaN;
  if (status >= 100 && status <= 599) return status === 408 || status === 409 || status === 429 || status >= 500;
  return TRANSIENT_CODES.has(String(code));
}

/** An error object a provider sends in place of (or inside) a response: `{code, type, message}`. */
export interface ProviderErrorBody {
  code?: string | number | null;
  type?: string | null;
  message?: string | null;
}

/** The fields of an error object the provider sent, each kept only when it has the expected type. */
export function errorBodyOf(value: unknown, fallbackMessage: string): ProviderErrorBody {
  const body = (value && typeof value === 'object' ? value : {}) as Record<string, unknown>;
  return {
    code: typeof body.code === 'string' || typeof body.code === 'number' ? body.code : null,
    type: typeof body.type === 'string' ? body.type : null,
    message: typeof body.message === 'string' ? body.message : fallbackMessage,
  };
}

/**
 * A failure the provider reported in the body (an in-stream `error` event or chunk, `response.failed`,
 * a JSON error object answered with 200), classified by its code: retried when the code is transient
 * and nothing was emitted yet, `context_overflow` when it is a context-length refusal.
 */
export function providerFailure(error: ProviderErrorBody, semanticOutput: boolean, errorPhase: ErrorPhase = 'response_body', cause?: unknown): ModelError {
  const code = error.code === null || error.code === undefined ? undefined : String(error.code);
  const message = error.message ?? 'the provider reported an error';
  const overflow = isContextOverflow(code, error.type, message);
  return modelFailure(overflow ? 'context_overflow' : 'model_error', `the provider failed the response: ${message}`, {
    errorPhase,
    deliveryState: 'accepted_no_semantic_output',
    ...(code ? { providerCode: code } : {}),
    semanticOutput,
    retryable: !overflow && !semanticOutput && (isTransientCode(error.code) || isTransientCode(error.type)),
    ...(cause !== undefined ? { cause } : {}),
  });
}

/** Whether a body is an HTML page rather than the JSON or event stream an API answers with. */
export function looksLikeHtml(text: string, contentType?: string | null): boolean {
  return /text\/html|application\/xhtml/i.test(contentType ?? '') || /^\s*(<!doctype\s+html|<html[\s>]|<head[\s>]|<body[\s>])/i.test(text);
}

function decodeEntities(text: string): string {
  return text
    .replace(/&nbsp;/g, ' ')
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&#39;|&apos;/g, "'")
    .replace(/&amp;/g, '&');
}

/**
 * An HTML page (a proxy's 404, a CDN's 502, a captive portal) in one short line: its title and its
 * first line of visible text, so that the error says what answered without pasting the markup.
 */
export function summariseHtml(html: string, limit = 200): string {
  const oneLine = (text: string) => decodeEntities(text).replace(/\s+/g, ' ').trim();
  const title = oneLine(/<title[^>]*>([\s\S]*?)<\/title>/i.exec(html)?.[1] ?? '');
  const body = (/<body[^>]*>([\s\S]*)/i.exec(html)?.[1] ?? html)
    .replace(/<!--[\s\S]*?-->/g, '')
    .replace(/<(script|style|head|title)\b[^>]*>[\s\S]*?<\/\1>/gi, '')
    .replace(/<[^>]*>/g, '\n');
  const first = body
    .split('\n')
    .map(oneLine)
    .find((line) => line !== '' && line !== title);
  const summary = [title, first].filter((part) => part !== undefined && part !== '').join(' — ') || 'an empty page';
  return summary.length > limit ? `${summary.slice(0, limit - 1)}…` : summary;
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
