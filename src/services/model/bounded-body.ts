/**
 * @module services/model/bounded-body
 * A `fetch` for the `openai` client whose response bodies are bounded and handed on in whole lines.
 * The provider is untrusted: the client's SSE reader joins every network chunk onto the event it is
 * reading and searches the whole of it again (`iterSSEChunks`, `LineDecoder`), so one event of
 * hundreds of megabytes costs time quadratic in its size and all of it in memory, long before any
 * bound of the runtime sees a character. Here the body is read first: a line longer than
 * `MAX_BODY_LINE_BYTES`, or a body longer than `MAX_BODY_BYTES`, ends the read as
 * `model_protocol_error`, and the client receives each run of whole lines as one chunk, so its own
 * joins stay linear.
 */
import { ModelError } from '../../errors.js';

/**
 * The longest line of a response body, in bytes: one SSE event's `data`, or a whole JSON answer.
 * The largest legitimate line is a `response.completed` that repeats a response's whole output, at
 * most `MAX_RESPONSE_CHARS` (16 Mi) characters of it; 64 MiB leaves room for escapes and
 * multi-byte text.
 */
export const MAX_BODY_LINE_BYTES = 64 * 1024 * 1024;

/**
 * The most bytes of one response body. A stream of events that carry nothing (empty deltas, unknown
 * event types, keep-alive comments) never reaches the runtime's character bounds and never goes
 * quiet long enough for the idle timeout; this ends it. A real response of 128 Ki tokens, token by
 * token with the Responses API's envelopes, is about 40 MiB.
 */
export const MAX_BODY_BYTES = 256 * 1024 * 1024;

/**
 * The most events one streamed response may carry. Each event costs the runtime time (a parse, an
 * update through the machines) whatever it carries, so a stream of millions of one-character or
 * empty deltas ran for minutes to hours inside every other bound (about 0.14 ms per text delta).
 * A real response of 128 Ki output tokens arrives in about 128 Ki events; this allows four times
 * that. Counted in `openai.ts`, where the events come out of the client.
 */
export const MAX_STREAM_EVENTS = 512 * 1024;

/** The bounds of one body (tests and hosts may lower them; the defaults are the constants above). */
export interface BodyBounds {
  maxLineBytes: number;
  maxBodyBytes: number;
}

const NEWLINE = 0x0a;
const CARRIAGE_RETURN = 0x0d;

function overLimit(message: string): ModelError {
  return new ModelError('model_protocol_error', message, {
    details: { errorPhase: 'stream_decode', deliveryState: 'accepted_no_semantic_output' },
  });
}

/**
 * The index after the last line break of `chunk` (LF or CR), or 0 when it has none. Searched by the
 * engine (`lastIndexOf`), not byte by byte in script: a 12 MB event took 0.2-0.7 s of the host's
 * main thread in the script loop (branch trust-stall).
 */
function afterLastBreak(chunk: Uint8Array): number {
  return Math.max(chunk.lastIndexOf(NEWLINE), chunk.lastIndexOf(CARRIAGE_RETURN)) + 1;
}

/** The index of the first line break of `bytes` (LF or CR), or -1 when it has none. */
function firstBreak(bytes: Uint8Array): number {
  const lf = bytes.indexOf(NEWLINE);
  const cr = bytes.indexOf(CARRIAGE_RETURN);
  return lf < 0 ? cr : cr < 0 ? lf : Math.min(lf, cr);
}

/**
 * A transform that passes the bytes through in runs of whole lines (the unfinished line waits,
 * its pieces kept apart until its end arrives and joined once) and errors the stream as
 * `model_protocol_error` past either bound.
 */
export function boundedLines(bounds: BodyBounds): TransformStream<Uint8Array, Uint8Array> {
  let pending: Uint8Array[] = [];
  let pendingBytes = 0;
  let total = 0;
  const join = (parts: Uint8Array[], bytes: number): Uint8Array => {
    if (parts.length === 1) return parts[0]!;
    const out = new Uint8Array(bytes);
    let at = 0;
    for (const part of parts) {
      out.set(part, at);
      at += part.length;
    }
    return out;
  };
  return new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      total += chunk.length;
      if (total > bounds.maxBodyBytes) {
        controller.error(overLimit(`the provider's response was longer than ${bounds.maxBodyBytes} bytes`));
        return;
      }
      const cut = afterLastBreak(chunk);
      if (cut === 0) {
        pending.push(chunk);
        pendingBytes += chunk.length;
        if (pendingBytes > bounds.maxLineBytes) {
          pending = [];
          controller.error(overLimit(`the provider sent a line (one stream event) longer than ${bounds.maxLineBytes} bytes`));
        }
        return;
      }
      const head = chunk.subarray(0, cut);
      if (pendingBytes > 0) {
        // The line that ends here began in earlier chunks: it is measured whole.
        if (pendingBytes + firstBreak(head) > bounds.maxLineBytes) {
          pending = [];
          controller.error(overLimit(`the provider sent a line (one stream event) longer than ${bounds.maxLineBytes} bytes`));
          return;
        }
      }
      controller.enqueue(join([...pending, head], pendingBytes + head.length));
      pending = [];
      pendingBytes = 0;
      if (cut < chunk.length) {
        pending.push(chunk.subarray(cut));
        pendingBytes = chunk.length - cut;
      }
    },
    flush(controller) {
      if (pendingBytes > 0) controller.enqueue(join(pending, pendingBytes));
      pending = [];
    },
  });
}

/**
 * `inner` with every response body read through `boundedLines`. Status, headers and the rest of
 * the response are kept; a body-less response passes as it is.
 */
export function boundedFetch(inner: typeof fetch, bounds: BodyBounds): typeof fetch {
  return async (input, init) => {
    const response = await inner(input, init);
    if (response.body === null) return response;
    return new Response(response.body.pipeThrough(boundedLines(bounds)), {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
  };
}
