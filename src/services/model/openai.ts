/**
 * @module services/model/openai
 * `openaiModel`: the `ModelPort` of OpenAI and every OpenAI-compatible server, on the official
 * `openai` client, for both the Responses API and Chat Completions. The only module that imports
 * `openai`: it sends the request, retries transient failures before any output, classifies
 * failures into `ModelError` codes, and keeps the latest rate-limit headers.
 */
import OpenAI, { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError } from 'openai';
import { Stream } from 'openai/streaming';
import { InputError, ModelError, errorMessage } from '../../errors.js';
import type { RateLimitSnapshot } from '../../protocol/rate-limits.js';
import { boundedFetch, MAX_BODY_BYTES, MAX_BODY_LINE_BYTES, MAX_STREAM_EVENTS } from './bounded-body.js';
import { ChatDecoder, encodeChatRequest, type ChatSettings } from './openai-chat.js';
import { parseRateLimitHeaders, type HeaderSource } from './openai-rate-limits.js';
import { ResponsesDecoder, encodeResponsesRequest, type ResponsesSettings } from './openai-responses.js';
import { errorBodyOf, isContextOverflow, looksLikeHtml, modelFailure, protocolError, providerFailure, summariseHtml } from './openai-wire.js';
import type { ModelCallOptions, ModelPort, ModelRequest, ModelStreamEvent } from './port.js';

export interface OpenAIModelOptions {
  /** The provider's model name, e.g. `gpt-5-mini` or a local server's model. */
  model: string;
  /** Which API to speak (default `responses`); OpenAI-compatible servers mostly speak `chat`. */
  api?: 'responses' | 'chat';
  /** Defaults to `OPENAI_BASE_URL`, then OpenAI's own endpoint. */
  baseURL?: string;
  /**
   * Defaults to `OPENAI_API_KEY`. Required for OpenAI's endpoint; with a `baseURL` and no key, a
   * placeholder is sent (local servers do not check it).
   */
  apiKey?: string;
  /** The first half of the stored model id `<provider>/<model>` (default `openai`). */
  provider?: string;
  /** `minimal` | `low` | `medium` | `high` (whatever the model accepts); unset sends none. */
  reasoningEffort?: string;
  /** Responses API: the reasoning summary to stream (default `auto` when an effort is set; null sends none). */
  reasoningSummary?: 'auto' | 'concise' | 'detailed' | null;
  /** Responses API: request encrypted reasoning items and send them back (default: when an effort is set). */
  encryptedReasoning?: boolean;
  /** Responses API: let the provider store responses (default false: the history is ours). */
  store?: boolean;
  maxOutputTokens?: number;
  /** The model's context window in tokens, for the runtime's budget. */
  contextWindow?: number;
  /** Chat Completions: the field that carries `maxOutputTokens` (default: `max_completion_tokens` on OpenAI, `max_tokens` elsewhere). */
  maxTokensField?: 'max_completion_tokens' | 'max_tokens';
  /** Retries of a transient failure (429, 5xx, connection lost before any output); default 2. */
  maxRetries?: number;
  /** First backoff delay (default 500 ms); doubles per retry, with jitter. */
  retryBaseDelayMs?: number;
  /** Upper bound of one backoff delay, `retry-after` included (default 8 s). */
  retryMaxDelayMs?: number;
  /** Time to the response headers, per attempt (the client's timeout; default 10 minutes). */
  timeoutMs?: number;
  /** A stream with no event for this long fails with `model_error` (default 5 minutes). */
  streamIdleTimeoutMs?: number;
  /**
   * The most events one streamed response may carry (default `MAX_STREAM_EVENTS`, 512 Ki); past it
   * the call ends as `model_protocol_error`. Every event costs the runtime time whatever it
   * carries, so this is what bounds a stream of millions of tiny deltas.
   */
  maxStreamEvents?: number;
  /** The most bytes of one response body (default `MAX_BODY_BYTES`, 256 MiB); past it `model_protocol_error`. */
  maxResponseBytes?: number;
  /** Extra HTTP headers of every request. */
  headers?: Record<string, string>;
  /** A `fetch` to use instead of the global one (proxies, tests). */
  fetch?: typeof fetch;
}

/** A `ModelPort` on the `openai` client. */
export interface OpenAIModel extends ModelPort {
  readonly api: 'responses' | 'chat';
  readonly baseURL: string;
  rateLimits(): RateLimitSnapshot | null;
}

const DEFAULT_BASE_URL = 'https://api.openai.com/v1';
/** Sent to a custom `baseURL` when no key is configured: local servers ignore it. */
const PLACEHOLDER_KEY = 'openwork-no-key';

function abortable(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** `retry-after-ms`, then `retry-after` in seconds or as an HTTP date. */
function retryAfterMs(headers: HeaderSource | undefined, now: number): number | undefined {
  if (!headers) return undefined;
  const ms = Number(headers.get('retry-after-ms') ?? NaN);
  if (Number.isFinite(ms) && ms >= 0) return ms;
  const raw = headers.get('retry-after');
  if (raw === null) return undefined;
  const seconds = Number(raw);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(raw);
  return Number.isFinite(date) ? Math.max(0, date - now) : undefined;
}

/** The innermost cause's message: `fetch failed` says less than what failed under it. */
function rootMessage(error: unknown): string {
  let current: unknown = error;
  for (let depth = 0; depth < 4; depth += 1) {
    const cause = current && typeof current === 'object' ? (current as { cause?: unknown }).cause : undefined;
    if (cause === undefined || cause === null) break;
    current = cause;
  }
  return errorMessage(current);
}

function connectionCauseCode(error: unknown): string | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 4 && current && typeof current === 'object'; depth += 1) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string' && /^E[A-Z]+/.test(code)) return code;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

/**
 * The model port of OpenAI and OpenAI-compatible servers.
 *
 * @example
 * const model = openaiModel({ model: 'gpt-5-mini' });                       // OPENAI_API_KEY
 * const local = openaiModel({ model: 'qwen3:8b', api: 'chat', baseURL: 'http://localhost:11434/v1' });
 * const core = await createCore({ storage: pgliteStorage(), model });
 */
export function openaiModel(options: OpenAIModelOptions): OpenAIModel {
  if (typeof options?.model !== 'string' || options.model.trim() === '') {
    throw new InputError('invalid_request', 'openaiModel: `model` is required');
  }
  const api = options.api ?? 'responses';
  if (api !== 'responses' && api !== 'chat') throw new InputError('invalid_request', `openaiModel: unknown api ${JSON.stringify(api)}`);
  const envBase = process.env.OPENAI_BASE_URL?.trim();
  const baseURL = (options.baseURL ?? (envBase ? envBase : undefined) ?? DEFAULT_BASE_URL).replace(/\/+$/, '');
  const customEndpoint = !/^https:\/\/api\.openai\.com(\/|$)/.test(baseURL);
  const envKey = process.env.OPENAI_API_KEY?.trim();
  const apiKey = options.apiKey ?? (envKey ? envKey : undefined) ?? (customEndpoint ? PLACEHOLDER_KEY : undefined);
  if (!apiKey) {
    throw new InputError('invalid_request', 'no OpenAI API key: set OPENAI_API_KEY (or pass apiKey), or point baseURL at an OpenAI-compatible server');
  }
  const maxRetries = Math.max(0, Math.floor(options.maxRetries ?? 2));
  const baseDelay = Math.max(0, options.retryBaseDelayMs ?? 500);
  const maxDelay = Math.max(0, options.retryMaxDelayMs ?? 8_000);
  const provider = options.provider ?? 'openai';
  const idleTimeout = Math.max(1, options.streamIdleTimeoutMs ?? 300_000);
  const maxStreamEvents = Math.max(1, Math.floor(options.maxStreamEvents ?? MAX_STREAM_EVENTS));
  const maxBodyBytes = Math.max(1, Math.floor(options.maxResponseBytes ?? MAX_BODY_BYTES));

  const client = new OpenAI({
    apiKey,
    baseURL,
    // Retries are ours: they must be visible as attempts and must never follow any output.
    maxRetries: 0,
    logLevel: 'off',
    ...(options.timeoutMs !== undefined ? { timeout: options.timeoutMs } : {}),
    ...(options.headers ? { defaultHeaders: options.headers } : {}),
    // Every body is bounded and handed to the client in whole lines (services/model/bounded-body).
    fetch: boundedFetch(options.fetch ?? ((input, init) => fetch(input, init)), { maxLineBytes: Math.min(MAX_BODY_LINE_BYTES, maxBodyBytes), maxBodyBytes }),
  });

  const responsesSettings: ResponsesSettings = {
    model: options.model,
    ...(options.reasoningEffort !== undefined ? { reasoningEffort: options.reasoningEffort } : {}),
    ...(options.reasoningSummary !== undefined ? { reasoningSummary: options.reasoningSummary } : {}),
    encryptedReasoning: options.encryptedReasoning ?? options.reasoningEffort !== undefined,
    store: options.store ?? false,
    ...(options.maxOutputTokens !== undefined ? { maxOutputTokens: options.maxOutputTokens } : {}),
  };
  const chatSettings: ChatSettings = {
    model: options.model,
    ...(options.reasoningEffort !== undefined ? { reasoningEffort: options.reasoningEffort } : {}),
    ...(options.maxOutputTokens !== undefined ? { maxOutputTokens: options.maxOutputTokens } : {}),
    maxTokensField: options.maxTokensField ?? (customEndpoint ? 'max_tokens' : 'max_completion_tokens'),
    includeUsage: true,
  };

  let latestRateLimits: RateLimitSnapshot | null = null;
  const noteHeaders = (headers: HeaderSource | undefined) => {
    if (!headers) return;
    const snapshot = parseRateLimitHeaders(headers, Date.now());
    if (snapshot) latestRateLimits = snapshot;
  };

  /**
   * Opens the stream: the HTTP response is in (headers read), the body not yet. A server that
   * ignored `stream: true` and answered one JSON object gives that object, read whole; an HTML page
   * answered with a success status is a failure that names the page.
   */
  async function open(request: ModelRequest, signal: AbortSignal): Promise<{ events: AsyncIterable<unknown> } | { whole: unknown }> {
    const { data, response } =
      api === 'responses'
        ? await client.responses
            .create({ ...encodeResponsesRequest(request, responsesSettings), stream: true } as unknown as OpenAI.Responses.ResponseCreateParamsStreaming, { signal })
            .withResponse()
        : await client.chat.completions
            .create({ ...encodeChatRequest(request, chatSettings), stream: true } as unknown as OpenAI.Chat.ChatCompletionCreateParamsStreaming, { signal })
            .withResponse();
    noteHeaders(response.headers);
    const contentType = response.headers.get('content-type') ?? '';
    // The client's stream reads the body only when iterated: here the body is still unread.
    if (/^application\/(?:[\w.+-]*\+)?json/i.test(contentType)) {
      const text = await response.text();
      try {
        return { whole: JSON.parse(text) };
      } catch (error) {
        // A proxy that labels its event stream as JSON: read the (now buffered) body as the stream it is.
        if (/^(?:data|event):/m.test(text)) return { events: Stream.fromSSEResponse<unknown>(new Response(text), new AbortController(), client) };
        throw error;
      }
    }
    if (/text\/html|application\/xhtml/i.test(contentType)) {
      const page = await response.text();
      throw modelFailure('model_error', `the provider answered ${response.status} with an HTML page: ${summariseHtml(page)}`, {
        errorPhase: 'response_decode',
        deliveryState: 'accepted_no_semantic_output',
        httpStatus: response.status,
      });
    }
    return { events: data };
  }

  /** Any failure of one attempt as a `ModelError`; `opened` says whether the response had begun. */
  function classify(error: unknown, opened: boolean, semantic: boolean): ModelError {
    if (error instanceof ModelError) return error;
    if (error instanceof APIConnectionTimeoutError) {
      return modelFailure('model_error', `the request to ${baseURL} timed out`, {
        errorPhase: opened ? 'response_body' : 'response_headers',
        deliveryState: 'possibly_sent',
        semanticOutput: semantic,
        retryable: !semantic,
        cause: error,
      });
    }
    if (error instanceof APIConnectionError) {
      const code = connectionCauseCode(error);
      const refused = code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'EHOSTUNREACH';
      return modelFailure('model_error', `cannot reach ${baseURL}${code ? ` (${code})` : `: ${rootMessage(error)}`}`, {
        errorPhase: 'connect',
        deliveryState: refused ? 'not_sent' : 'possibly_sent',
        semanticOutput: semantic,
        retryable: !semantic,
        cause: error,
      });
    }
    if (error instanceof APIUserAbortError) {
      return modelFailure('model_error', 'the request was aborted by the client', { errorPhase: 'response_body', deliveryState: 'possibly_sent', semanticOutput: semantic, cause: error });
    }
    if (error instanceof APIError && typeof error.status !== 'number') {
      // An error the provider sent inside the stream (`error` event or chunk): the client throws it
      // without a status, so its code alone says whether the same request may succeed again.
      return providerFailure(errorBodyOf(error.error, error.message), semantic, 'response_body', error);
    }
    if (error instanceof APIError) {
      const status = typeof error.status === 'number' ? error.status : undefined;
      const body = error.error as { message?: unknown } | undefined;
      // A page instead of an API error (a proxy's 404, a CDN's 502): its title and first line, not its markup.
      const raw = error.message.startsWith(`${status} `) ? error.message.slice(`${status} `.length) : error.message;
      const html = body === undefined && looksLikeHtml(raw, error.headers?.get('content-type'));
      const message = typeof body?.message === 'string' ? body.message : html ? summariseHtml(raw) : error.message;
      const code = error.code ?? undefined;
      if (status !== undefined) noteHeaders(error.headers);
      const overflow = (status === undefined || status === 400 || status === 413) && isContextOverflow(code, error.type, message);
      const transient = status === undefined ? false : status === 408 || status === 409 || status === 429 || status >= 500;
      const wait = retryAfterMs(error.headers, Date.now());
      return modelFailure(
        overflow ? 'context_overflow' : 'model_error',
        html ? `the provider answered ${status} with an HTML page: ${message}` : status !== undefined ? `the provider answered ${status}: ${message}` : `the provider failed the response: ${message}`,
        {
          errorPhase: status !== undefined ? 'response_headers' : 'response_body',
          deliveryState: 'accepted_no_semantic_output',
          ...(status !== undefined ? { httpStatus: status } : {}),
          ...(code ? { providerCode: String(code) } : {}),
          ...(wait !== undefined ? { retryAfterMs: wait } : {}),
          semanticOutput: semantic,
          retryable: !overflow && transient && !semantic,
          cause: error,
        },
      );
    }
    if (error instanceof SyntaxError) {
      return modelFailure('model_protocol_error', `the stream carried malformed data: ${error.message}`, {
        errorPhase: 'stream_decode',
        deliveryState: 'accepted_no_semantic_output',
        semanticOutput: semantic,
        cause: error,
      });
    }
    // Anything else broke the body read: the connection was lost mid-stream.
    const code = connectionCauseCode(error);
    return modelFailure('model_error', `the stream from ${baseURL} was cut${code ? ` (${code})` : `: ${rootMessage(error)}`}`, {
      errorPhase: opened ? 'response_body' : 'connect',
      deliveryState: opened ? 'accepted_no_semantic_output' : 'possibly_sent',
      semanticOutput: semantic,
      retryable: !semantic,
      cause: error,
    });
  }

  function backoff(failure: ModelError, retry: number): number {
    const hinted = failure.details.retryAfterMs;
    if (typeof hinted === 'number') return Math.min(hinted, maxDelay);
    const exponential = baseDelay * 2 ** (retry - 1);
    // Jitter of ±20% keeps many sessions from retrying in step.
    return Math.min(maxDelay, Math.round(exponential * (0.8 + Math.random() * 0.4)));
  }

  async function* stream(request: ModelRequest, { signal }: ModelCallOptions): AsyncGenerator<ModelStreamEvent> {
    for (let attempt = 1; ; attempt += 1) {
      if (signal.aborted) throw signal.reason;
      const decoder = api === 'responses' ? new ResponsesDecoder() : new ChatDecoder();
      // A stream that goes quiet is ended by its own signal, apart from the caller's cancellation.
      const stall = new AbortController();
      let timer: NodeJS.Timeout | undefined;
      // One timer per attempt, not one per event: each event only notes the time.
      let waitingSince: number | null = null;
      const check = () => {
        const idle = waitingSince === null ? 0 : Date.now() - waitingSince;
        if (idle >= idleTimeout) stall.abort();
        else timer = setTimeout(check, idleTimeout - idle);
      };
      const stalled = () =>
        modelFailure('model_error', `the stream from ${baseURL} stalled: no event for ${idleTimeout} ms`, {
          errorPhase: 'response_body',
          deliveryState: 'accepted_no_semantic_output',
          semanticOutput: decoder.semantic,
          retryable: !decoder.semantic,
        });
      let opened = false;
      let emitted = false;
      try {
        const opening = await open(request, AbortSignal.any([signal, stall.signal]));
        opened = true;
        if ('whole' in opening) {
          const whole = opening.whole as { error?: unknown } | null;
          // A JSON error object answered with 200 is the provider's failure, classified by its code.
          if (whole && typeof whole === 'object' && whole.error && typeof whole.error === 'object') {
            throw providerFailure(errorBodyOf(whole.error, 'the provider answered with an error'), false, 'response_decode');
          }
          for (const event of decoder.complete(whole)) {
            emitted = true;
            yield event;
          }
          for (const event of decoder.finish()) yield event;
          return;
        }
        const events = opening.events;
        waitingSince = Date.now();
        timer = setTimeout(check, idleTimeout);
        let received = 0;
        for await (const raw of events) {
          // Only the wait for the provider counts, not the time the consumer takes.
          waitingSince = null;
          received += 1;
          if (received > maxStreamEvents) throw protocolError(`the provider's response carried more than ${maxStreamEvents} stream events`, decoder.semantic);
          for (const event of decoder.push(raw)) {
            emitted = true;
            yield event;
          }
          waitingSince = Date.now();
        }
        clearTimeout(timer);
        // The client ends a stream quietly when its request is aborted.
        if (signal.aborted) throw signal.reason;
        if (stall.signal.aborted) throw stalled();
        for (const event of decoder.finish()) yield event;
        return;
      } catch (error) {
        clearTimeout(timer);
        if (signal.aborted) throw signal.reason;
        const failure = stall.signal.aborted ? stalled() : classify(error, opened, decoder.semantic);
        // Only a failure before any output is retried: the consumer has seen nothing to take back.
        if (!failure.retryable || emitted || attempt > maxRetries) throw failure;
        const delayMs = backoff(failure, attempt);
        // The wait is announced first, so that a host can say "retry in N s" while it lasts.
        yield { type: 'retry', attempt: attempt + 1, reason: failure.message, delayMs };
        await abortable(delayMs, signal);
      } finally {
        clearTimeout(timer);
      }
    }
  }

  return {
    id: `${provider}/${options.model}`,
    providerId: provider,
    model: options.model,
    api,
    baseURL,
    ...(options.contextWindow !== undefined ? { contextWindow: options.contextWindow } : {}),
    ...(options.maxOutputTokens !== undefined ? { maxOutputTokens: options.maxOutputTokens } : {}),
    stream,
    rateLimits: () => latestRateLimits,
  };
}
