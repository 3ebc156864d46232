/**
 * @module host/http
 * A turn over HTTP as Server-Sent Events, for a web host: `toResponse(stream)` for handlers that
 * return a web `Response` (Hono, Next.js route handlers, Bun, Deno, Node's fetch-style servers), and
 * `toSSE(stream, res)` for a Node `ServerResponse` (node:http, Express, Fastify's raw reply).
 *
 * The wire format: each update is one `message` event whose `id` is the update's sequence and whose
 * `data` is the JSON `SessionUpdateEnvelope`; the last is the turn's `turn_finished`. When the turn
 * cannot start or the session closes mid-turn, one `error` event carries `{ code, message }`. When
 * the client goes away the stream is left, which cancels the turn (unless it was opened with
 * `detachOnBreak`).
 *
 * A client that reads slower than the turn produces (or stops reading) does not make the server
 * hold more for it than the stream's 512 updates (seed 000 §7): once it falls further behind, the
 * oldest are dropped for it and, when it reads again, one `lagged` event (no `id`) carries
 * `{ code: 'updates_lagged', message, skipped, resumeAfterSequence, nextSequence }` before the
 * updates go on from `nextSequence`. The client recovers what it missed as reference §8.5 has it:
 * `replayUpdates(resumeAfterSequence)`, else the snapshot. The turn itself is unaffected.
 */
import type { ServerResponse } from 'node:http';
import { errorMessage, isOpenworkError, UpdatesLaggedError } from '../errors.js';
import type { SessionUpdateEnvelope } from '../protocol/updates.js';
import type { TurnStream } from './run.js';

export const SSE_HEADERS: Readonly<Record<string, string>> = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  // Proxies such as nginx would otherwise hold the events back.
  'x-accel-buffering': 'no',
};

/** One update as an SSE event (JSON never holds a raw newline, so one `data:` line suffices). */
export function sseEvent(envelope: SessionUpdateEnvelope): string {
  return `id: ${envelope.sequence}\ndata: ${JSON.stringify(envelope)}\n\n`;
}

/** The terminal error event: the code a host can act on, and the message. */
export function sseError(error: unknown): string {
  const code = isOpenworkError(error) ? error.code : 'internal_error';
  return `event: error\ndata: ${JSON.stringify({ code, message: errorMessage(error) })}\n\n`;
}

/** The event that tells a client it fell behind and what was dropped for it (see the module note). */
export function sseLagged(lag: UpdatesLaggedError): string {
  const data = { code: lag.code, message: lag.message, skipped: lag.skipped, resumeAfterSequence: lag.resumeAfterSequence, nextSequence: lag.nextSequence };
  return `event: lagged\ndata: ${JSON.stringify(data)}\n\n`;
}

/**
 * The turn as a web `Response` with an SSE body. The turn was already started by `session.stream`;
 * reading the body paces nothing (up to 512 updates wait to be read, then the client is told it
 * lagged) and cancelling the body leaves the stream.
 *
 * @example
 * app.post('/chat', async (c) => toResponse(session.stream((await c.req.json()).text)));
 */
export function toResponse(stream: TurnStream<unknown>, init: { headers?: Record<string, string> } = {}): Response {
  const encoder = new TextEncoder();
  const iterator = stream[Symbol.asyncIterator]();
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const next = await iterator.next();
        if (next.done) controller.close();
        else controller.enqueue(encoder.encode(sseEvent(next.value)));
      } catch (error) {
        if (error instanceof UpdatesLaggedError) {
          // The stream goes on after a lag; the client is told, and `pull` is called again.
          controller.enqueue(encoder.encode(sseLagged(error)));
          return;
        }
        controller.enqueue(encoder.encode(sseError(error)));
        controller.close();
      }
    },
    async cancel() {
      await iterator.return?.();
    },
  });
  return new Response(body, { status: 200, headers: { ...SSE_HEADERS, ...init.headers } });
}

/**
 * Writes the turn to a Node `ServerResponse` as SSE and resolves once the response has ended. A
 * client that disconnects leaves the stream (see the module note). Writes respect back-pressure;
 * a client that falls 512 updates behind gets a `lagged` event.
 *
 * @example
 * createServer(async (req, res) => { await toSSE(session.stream('hello'), res); });
 */
export async function toSSE(stream: TurnStream<unknown>, res: ServerResponse): Promise<void> {
  if (!res.headersSent) res.writeHead(200, { ...SSE_HEADERS, connection: 'keep-alive' });
  const iterator = stream[Symbol.asyncIterator]();
  let gone = false;
  const onClose = () => {
    gone = true;
    void iterator.return?.();
  };
  res.on('close', onClose);
  try {
    for (;;) {
      let frame: string;
      try {
        const next = await iterator.next();
        if (next.done || gone) break;
        frame = sseEvent(next.value);
      } catch (error) {
        if (!(error instanceof UpdatesLaggedError) || gone) throw error;
        frame = sseLagged(error);
      }
      if (!res.write(frame)) {
        await new Promise<void>((resolve) => {
          const go = () => {
            res.off('drain', go);
            res.off('close', go);
            resolve();
          };
          res.on('drain', go);
          res.on('close', go);
        });
      }
    }
  } catch (error) {
    if (!gone) res.write(sseError(error));
  } finally {
    res.off('close', onClose);
    if (!res.writableEnded) res.end();
  }
}
