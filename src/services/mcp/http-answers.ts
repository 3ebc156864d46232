/**
 * @module services/mcp/http-answers
 * The `fetch` that an HTTP MCP connection (Streamable HTTP or the older HTTP+SSE) makes its
 * requests through, so that what the server sends back is read within bounds and a bad answer ends
 * its call instead of being dropped. The SDK parses the bodies itself and drops, telling only
 * `onerror`, a body or an event that is not JSON or not JSON-RPC, an answer to an id it does not know,
 * and a stream that ends without the answer; each left the call to wait for its whole no-progress
 * timeout (10 minutes by default). Its readers also held any body or event whole, without bound.
 * Here, for a POST that sends requests:
 * - an `application/json` answer is read up to `MCP_MAX_ANSWER_BYTES`; one that is longer, not JSON
 *   (an answer followed by garbage is not JSON), or that answers none of the POST's requests
 *   becomes a JSON-RPC error for each request it did not answer;
 * - an event stream is read event by event: an event longer than `MCP_MAX_ANSWER_BYTES`, an event
 *   that is not a JSON-RPC message, an answer to another id, more than `MCP_MAX_SERVER_REQUESTS`
 *   requests from the server or more than `MCP_MAX_STREAM_NOTIFICATIONS` notifications end the
 *   POST's unanswered requests with such an error, and the stream is closed; a stream that ends
 *   without the answer (and named no event id to resume from) does the same. Comments (keepalives)
 *   are dropped here and never count as progress, so a server that only sends them meets the call's
 *   no-progress timeout. Once every request of the POST is answered, the stream is closed.
 * On the long-lived event stream of the HTTP+SSE transport, where all answers arrive, a malformed
 * answer naming a request in flight becomes that request's error and an event over the bound ends
 * every request in flight and the stream (the connection is then made again). A late answer to a
 * request already answered or given up is dropped; `MCP_MAX_STRAY_MESSAGES` messages that answer
 * nothing this connection asked (or are not JSON-RPC) end the stream the same way. The errors use the
 * SDK's `InternalError` code, which `mcpTools` reports as `mcp_protocol_error`.
 */
import { ErrorCode, JSONRPCMessageSchema, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { answeredId, malformedAnswer } from './answer-lines.js';

/** The longest answer body or event stream event taken from an HTTP server, as the stdio read buffer. */
export const MCP_MAX_ANSWER_BYTES = 10 * 1024 * 1024;
/** Server-to-client requests (each is answered with a POST) one call's event stream may carry. */
export const MCP_MAX_SERVER_REQUESTS = 100;
/** Notifications (progress included) one call's event stream may carry before its answer. */
export const MCP_MAX_STREAM_NOTIFICATIONS = 10_000;
/**
 * Messages on a GET event stream that answer no request this connection sent, or are not JSON-RPC
 * (branch trust-typed): at this many the server is taken to be confused about whom it answers, and
 * the stream ends with a protocol error for each call in flight (the connection is made again).
 */
export const MCP_MAX_STRAY_MESSAGES = 8;
/** Ids of requests already answered or given up that a late answer may still name without counting as stray. */
const RECENT_IDS = 1024;

type Fetch = (url: string | URL, init?: RequestInit) => Promise<Response>;
type Id = string | number;
const key = (id: Id) => `${typeof id}:${String(id)}`;

/** A JSON-RPC error for request `id`: the server broke the protocol (`text` says how). */
function protocolError(id: Id, text: string): JSONRPCMessage {
  return { jsonrpc: '2.0', id, error: { code: ErrorCode.InternalError, message: text } };
}

function quote(text: string): string {
  return text.length > 300 ? `${text.slice(0, 300)}… (${text.length} characters)` : text;
}

/** The ids of the requests in a POST body (a message or a batch), with the request id a cancellation names. */
function sentMessages(body: unknown): { requests: Id[]; cancelled: Id[] } {
  const requests: Id[] = [];
  const cancelled: Id[] = [];
  if (typeof body !== 'string') return { requests, cancelled };
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return { requests, cancelled };
  }
  for (const message of Array.isArray(value) ? value : [value]) {
    if (typeof message !== 'object' || message === null) continue;
    const { id, method, params } = message as { id?: unknown; method?: unknown; params?: { requestId?: unknown } };
    if (typeof method !== 'string') continue;
    if (typeof id === 'string' || typeof id === 'number') requests.push(id);
    const requestId = params?.requestId;
    if (method === 'notifications/cancelled' && (typeof requestId === 'string' || typeof requestId === 'number')) cancelled.push(requestId);
  }
  return { requests, cancelled };
}

/** Reads a body up to `max` bytes; null when it is longer (the rest is cancelled, not read). */
async function readBounded(body: ReadableStream<Uint8Array>, max: number): Promise<Buffer | null> {
  const reader = body.getReader();
  const chunks: Buffer[] = [];
  let size = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return Buffer.concat(chunks, size);
    size += value.byteLength;
    if (size > max) {
      await reader.cancel().catch(() => undefined);
      return null;
    }
    chunks.push(Buffer.from(value.buffer, value.byteOffset, value.byteLength));
  }
}

function copyHeaders(response: Response): Headers {
  const headers = new Headers(response.headers);
  // The body handed on is a new one, already decoded.
  headers.delete('content-length');
  headers.delete('content-encoding');
  return headers;
}

/** What the guard of one connection keeps: the requests in flight, and how to end a POST's stream. */
class InFlight {
  readonly pending = new Map<string, Id>();
  readonly streams = new Map<string, () => void>();
  /** The latest ids no longer in flight (answered or given up), oldest first. */
  private readonly recent = new Set<string>();

  /** `id` is answered or given up: a late answer naming it is dropped, not counted as stray. */
  done(id: Id): void {
    const k = key(id);
    this.pending.delete(k);
    this.recent.delete(k);
    this.recent.add(k);
    if (this.recent.size > RECENT_IDS) this.recent.delete(this.recent.values().next().value as string);
  }

  /** True when `id` was sent on this connection and is no longer in flight. */
  wasDone(id: Id): boolean {
    return this.recent.has(key(id));
  }
}

/**
 * The answers of an `application/json` body to a POST that sent `sent`: its valid messages that
 * answer those requests, a protocol error for a malformed answer to one of them, and one for each
 * request it left unanswered.
 */
function guardJson(text: string | null, sent: readonly Id[]): JSONRPCMessage[] {
  const own = new Map(sent.map((id) => [key(id), id]));
  const errors = (why: string) => [...own.values()].map((id) => protocolError(id, why));
  if (text === null) return errors(`the server answered with a body of more than ${MCP_MAX_ANSWER_BYTES} bytes`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return errors(`the server answered with a body that is not JSON: ${quote(text)}`);
  }
  const out: JSONRPCMessage[] = [];
  const others: string[] = [];
  for (const item of Array.isArray(value) ? value : [value]) {
    const parsed = JSONRPCMessageSchema.safeParse(item);
    const id = answeredId(item);
    if (id === undefined || !own.has(key(id))) {
      // Requests and notifications may ride along; an answer to another id is the server's mistake.
      if (parsed.success && !('id' in parsed.data && !('method' in parsed.data))) out.push(parsed.data);
      else others.push(quote(JSON.stringify(item) ?? String(item)));
      continue;
    }
    own.delete(key(id));
    out.push(parsed.success ? parsed.data : malformedAnswer(id, JSON.stringify(item)));
  }
  const said = others.length > 0 ? `: ${others.slice(0, 3).join(', ')}` : '';
  return [...out, ...errors(`the server's answer did not answer this request${said}`)];
}

interface StreamOptions {
  /** The requests of the POST this stream answers; null for a GET stream (answers may name any request in flight). */
  sent: readonly Id[] | null;
  flight: InFlight;
}

/**
 * The event stream of one response, read event by event within the bounds and written on as
 * clean events; see the module comment for what ends the POST's requests.
 */
function guardStream(body: ReadableStream<Uint8Array>, { sent, flight }: StreamOptions): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  const own = new Map((sent ?? []).map((id) => [key(id), id]));
  let parts: Buffer[] = [];
  let partBytes = 0;
  let eventBytes = 0;
  let data: string[] = [];
  let fields: string[] = [];
  let resumable = false;
  let afterCr = false;
  let requests = 0;
  let notifications = 0;
  let ended = false;
  let out!: TransformStreamDefaultController<Uint8Array>;

  const write = (message: JSONRPCMessage) => out.enqueue(encoder.encode(`event: message\ndata: ${JSON.stringify(message)}\n\n`));
  const settle = (id: Id) => {
    own.delete(key(id));
    flight.done(id);
    flight.streams.delete(key(id));
  };
  /** What the GET stream carried that answered nothing in flight (the first few, quoted). */
  let strays = 0;
  const strayQuotes: string[] = [];
  /** Ends the requests this stream owes (all in flight, on a GET stream) with `why`, and the stream. */
  const fail = (why: string) => {
    if (ended) return;
    const owed = sent === null ? [...flight.pending.values()] : [...own.values()];
    for (const id of owed) {
      write(protocolError(id, why));
      settle(id);
    }
    close();
  };
  const close = () => {
    if (ended) return;
    ended = true;
    for (const k of own.keys()) flight.streams.delete(k);
    out.terminate();
  };

  const dispatch = () => {
    const text = data.join('\n');
    const head = fields;
    data = [];
    fields = [];
    eventBytes = 0;
    if (head.length > 0 && text === '') {
      out.enqueue(encoder.encode(`${head.join('\n')}\n\n`));
      return;
    }
    if (text === '') return;
    const named = head.find((f) => f.startsWith('event:'));
    if (named && named.slice(6).trim() !== 'message') {
      // Other event types (the old transport's `endpoint`) go on as they came.
      out.enqueue(encoder.encode(`${head.join('\n')}\n${text.split('\n').map((l) => `data: ${l}`).join('\n')}\n\n`));
      return;
    }
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      value = undefined;
    }
    const parsed = JSONRPCMessageSchema.safeParse(value);
    const id = answeredId(value);
    const prefix = head.length > 0 ? `${head.join('\n')}\n` : '';
    if (id !== undefined && (sent === null ? flight.pending.has(key(id)) : own.has(key(id)))) {
      const message = parsed.success ? parsed.data : malformedAnswer(id, text);
      out.enqueue(encoder.encode(`${prefix}data: ${JSON.stringify(message)}\n\n`));
      settle(id);
      if (sent !== null && own.size === 0) close();
      return;
    }
    if (!parsed.success || (id !== undefined && !('method' in parsed.data))) {
      // Not a message, or an answer to nothing this stream owes: the POST's requests end.
      if (sent !== null) return fail(id !== undefined ? `the server answered another request (${quote(JSON.stringify(id))}) instead of this one` : `the server sent an event that is not a JSON-RPC message: ${quote(text)}`);
      // On a GET stream a late answer to a call already answered or given up (a timeout's
      // cancellation crosses the answer on the wire) is dropped. Anything else answers a request this
      // connection never sent, or is no message at all: it cannot be given to any call, and a server
      // that keeps sending such is confused about whom it answers (another client's answers on this
      // stream?). Counted; at the bound, every call in flight ends and the stream with them.
      if (id !== undefined && flight.wasDone(id)) return;
      strays += 1;
      if (strayQuotes.length < 3) strayQuotes.push(quote(id !== undefined ? `an answer to ${JSON.stringify(id)}` : text));
      if (strays >= MCP_MAX_STRAY_MESSAGES) {
        fail(`the server sent ${strays} messages on its event stream that answer no request in flight (${strayQuotes.join('; ')}), so its answers cannot be trusted`);
      }
      return;
    }
    if ('method' in parsed.data && 'id' in parsed.data) requests += 1;
    else notifications += 1;
    if (sent !== null && requests > MCP_MAX_SERVER_REQUESTS) return fail(`the server sent more than ${MCP_MAX_SERVER_REQUESTS} requests of its own during the call`);
    if (sent !== null && notifications > MCP_MAX_STREAM_NOTIFICATIONS) return fail(`the server sent more than ${MCP_MAX_STREAM_NOTIFICATIONS} notifications during the call`);
    out.enqueue(encoder.encode(`${prefix}data: ${JSON.stringify(parsed.data)}\n\n`));
  };

  const line = (text: string) => {
    if (text === '') return dispatch();
    if (text.startsWith(':')) return; // A comment: a keepalive, never progress.
    const colon = text.indexOf(':');
    const field = colon === -1 ? text : text.slice(0, colon);
    const raw = colon === -1 ? '' : text.slice(colon + 1);
    const value = raw.startsWith(' ') ? raw.slice(1) : raw;
    if (field === 'data') data.push(value);
    else if (field === 'event' || field === 'id' || field === 'retry') {
      if (field === 'id' && value !== '') resumable = true;
      fields.push(`${field}: ${value}`);
    }
  };

  const transform = new TransformStream<Uint8Array, Uint8Array>({
    start(controller) {
      out = controller;
      for (const k of own.keys()) flight.streams.set(k, close);
    },
    transform(chunk) {
      if (ended) return;
      const buffer = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
      let at = 0;
      // "\r\n" split between two chunks is one line break.
      if (afterCr && buffer[0] === 0x0a) at = 1;
      afterCr = false;
      // Found once per chunk and then only past each line, so a chunk is scanned in linear time.
      let lf = buffer.indexOf(0x0a, at);
      let cr = buffer.indexOf(0x0d, at);
      while (lf !== -1 || cr !== -1) {
        const index = lf === -1 ? cr : cr === -1 ? lf : Math.min(lf, cr);
        const piece = buffer.subarray(at, index);
        const whole = parts.length > 0 ? Buffer.concat([...parts, piece]) : piece;
        parts = [];
        partBytes = 0;
        eventBytes += whole.length;
        at = index + 1;
        if (buffer[index] === 0x0d) {
          if (at === buffer.length) afterCr = true;
          else if (buffer[at] === 0x0a) at += 1;
        }
        if (eventBytes > MCP_MAX_ANSWER_BYTES) return fail(`the server sent an event of more than ${MCP_MAX_ANSWER_BYTES} bytes`);
        line(whole.toString('utf8'));
        if (ended) return;
        if (lf !== -1 && lf < at) lf = buffer.indexOf(0x0a, at);
        if (cr !== -1 && cr < at) cr = buffer.indexOf(0x0d, at);
      }
      if (at < buffer.length) {
        parts.push(Buffer.from(buffer.subarray(at)));
        partBytes += buffer.length - at;
        if (eventBytes + partBytes > MCP_MAX_ANSWER_BYTES) return fail(`the server sent an event of more than ${MCP_MAX_ANSWER_BYTES} bytes`);
      }
    },
    flush() {
      if (ended) return;
      // A POST's stream that ends unanswered and cannot be resumed would leave its calls waiting.
      if (sent !== null && own.size > 0 && !resumable) fail('the server ended the response stream without answering');
    },
  });
  return body.pipeThrough(transform);
}

/**
 * The guarded `fetch` of one HTTP MCP connection (`mode` is its transport). A new connection takes
 * a new one, so nothing carries over from a broken one.
 */
export function guardedFetch(mode: 'streamable-http' | 'sse', base: Fetch = fetch): Fetch {
  const flight = new InFlight();
  return async (url, init) => {
    const { requests, cancelled } = init?.method === 'POST' ? sentMessages(init.body) : { requests: [], cancelled: [] };
    // A request that was given up (timeout, turn cancelled): its stream is closed, not read on.
    for (const id of cancelled) {
      flight.streams.get(key(id))?.();
      flight.done(id);
    }
    for (const id of requests) flight.pending.set(key(id), id);
    const response = await base(url, init);
    if (!response.ok || !response.body) return response;
    const type = (response.headers.get('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
    const init_ = { status: response.status, statusText: response.statusText, headers: copyHeaders(response) };
    if (type === 'text/event-stream') {
      const sent = init?.method === 'POST' ? requests : null;
      // The old transport answers on its GET stream only; a POST's body there says nothing.
      if (mode === 'sse' && sent !== null) return response;
      return new Response(guardStream(response.body, { sent, flight }), init_);
    }
    if (mode === 'streamable-http' && type === 'application/json' && requests.length > 0) {
      const bytes = await readBounded(response.body, MCP_MAX_ANSWER_BYTES);
      const answers = guardJson(bytes === null ? null : bytes.toString('utf8'), requests);
      for (const id of requests) flight.done(id);
      return new Response(JSON.stringify(answers), init_);
    }
    return response;
  };
}
