/**
 * A local HTTP server that speaks OpenAI's streaming wire formats (the Responses API's typed SSE
 * events and Chat Completions' `chat.completion.chunk`s with `[DONE]`), scripted per request and
 * recording every request. One scripted reply describes a response independently of the API; the
 * server renders it in the format of the endpoint that was called.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';

export interface FakeToolCall {
  name: string | null;
  /** A string is sent as is (to send malformed JSON); anything else as JSON. */
  arguments?: unknown;
  /** Defaults to `call_<n>`; null sends a call without an id. */
  callId?: string | null;
}

export interface FakeUsage {
  inputTokens?: number;
  outputTokens?: number;
  cachedInputTokens?: number;
  reasoningTokens?: number;
}

/** A streamed response. */
export interface FakeStream {
  reasoning?: string | string[];
  text?: string;
  toolCalls?: FakeToolCall[];
  usage?: FakeUsage;
  /** Characters per text / reasoning delta (default 4). */
  chunk?: number;
  /** Characters per tool-call arguments delta (default 5). */
  argsChunk?: number;
  /** Milliseconds between events (default 0). */
  delayMs?: number;
  /** Without `delayMs`: let the socket flush after every this many events (benchmarks), as a provider does token by token. */
  flushEvery?: number;
  /** Extra response headers (rate limits, for instance). */
  headers?: Record<string, string>;
  /** Responses API: attach this encrypted content to the reasoning item. */
  encryptedReasoning?: string;
  /** Chat: finish reason to send (default `stop`, or `tool_calls` with calls). */
  finishReason?: string;
  /** Responses API: end with `response.incomplete` for this reason instead of `response.completed`. */
  incomplete?: 'max_output_tokens' | 'content_filter';
  /** Send this many events, then destroy the connection. */
  cutAfterEvents?: number;
  /** Send this many events, then keep the connection open until the client goes away. */
  hangAfterEvents?: number;
  /** Leave out the completion (Responses `response.completed`; Chat the `finish_reason` chunk). */
  omitCompletion?: boolean;
  /** Send the completion twice. */
  doubleCompletion?: boolean;
  /** End with a failure instead of completing: Responses `response.failed`, Chat an `error` chunk. */
  failWith?: { code: string; message: string };
  model?: string;
}

/** A non-streamed HTTP error answer. */
export interface FakeHttpError {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

/**
 * A reply sent byte for byte: the recorded wire shapes of `test/fixtures/wire/` (any status, any
 * content type, the body in the chunks given, each written as its own socket write).
 */
export interface FakeRawReply {
  /** `binary`: each chunk is a latin1 string of raw bytes (to cut a UTF-8 character in two). */
  raw: { status: number; headers: Record<string, string>; chunks: string[]; binary?: boolean };
}

export type FakeReply = FakeStream | FakeHttpError | FakeRawReply;
export type FakeScript = FakeReply | ((request: RecordedRequest) => FakeReply);

export interface RecordedRequest {
  method: string;
  path: string;
  api: 'responses' | 'chat' | 'other';
  headers: Record<string, string | string[] | undefined>;
  body: Record<string, unknown>;
}

export interface FakeOpenAIServer {
  /** Base URL to give the client, ending in `/v1`. */
  readonly url: string;
  readonly requests: RecordedRequest[];
  /** Requests that found no scripted reply (answered 500). */
  readonly unexpected: RecordedRequest[];
  /** Adds replies, used in order. */
  script(...replies: FakeScript[]): void;
  /** Drops unused replies and forgets every request (between tests). */
  reset(): void;
  readonly remaining: number;
  /** Connections the server has seen closed by the client before the response ended. */
  readonly clientAborts: number;
  close(): Promise<void>;
}

/** The usual context-length refusal of OpenAI's API. */
export const CONTEXT_LENGTH_ERROR: FakeHttpError = {
  status: 400,
  body: {
    error: {
      message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens. Please reduce the length of the messages.",
      type: 'invalid_request_error',
      param: 'messages',
      code: 'context_length_exceeded',
    },
  },
};

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function pieces(text: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += Math.max(1, size)) out.push(text.slice(i, i + Math.max(1, size)));
  return out;
}

function argsText(call: FakeToolCall): string {
  return typeof call.arguments === 'string' ? call.arguments : JSON.stringify(call.arguments ?? {});
}

let responseCounter = 0;

/** The SSE event texts of a reply on the Responses API, and the index of the completion event(s). */
function responsesEvents(reply: FakeStream, request: RecordedRequest): { events: string[]; completion: number[] } {
  responseCounter += 1;
  const id = `resp_${responseCounter}`;
  const model = reply.model ?? String(request.body.model ?? 'fake-model');
  const created = Math.floor(Date.now() / 1000);
  let seq = 0;
  const events: string[] = [];
  const completion: number[] = [];
  const emit = (type: string, data: Record<string, unknown>) => {
    events.push(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...data })}\n\n`);
  };
  const base = { id, object: 'response', created_at: created, model, parallel_tool_calls: true, tool_choice: 'auto', tools: [] };
  emit('response.created', { response: { ...base, status: 'in_progress', output: [], usage: null } });
  emit('response.in_progress', { response: { ...base, status: 'in_progress', output: [], usage: null } });
  const output: Array<Record<string, unknown>> = [];
  const chunk = reply.chunk ?? 4;
  const reasoningParts = reply.reasoning === undefined ? [] : Array.isArray(reply.reasoning) ? reply.reasoning : [reply.reasoning];
  if (reasoningParts.length > 0 || reply.encryptedReasoning) {
    const itemId = `rs_${responseCounter}`;
    const output_index = output.length;
    emit('response.output_item.added', { output_index, item: { id: itemId, type: 'reasoning', summary: [] } });
    reasoningParts.forEach((part, summary_index) => {
      emit('response.reasoning_summary_part.added', { item_id: itemId, output_index, summary_index, part: { type: 'summary_text', text: '' } });
      for (const delta of pieces(part, chunk)) emit('response.reasoning_summary_text.delta', { item_id: itemId, output_index, summary_index, delta });
      emit('response.reasoning_summary_text.done', { item_id: itemId, output_index, summary_index, text: part });
      emit('response.reasoning_summary_part.done', { item_id: itemId, output_index, summary_index, part: { type: 'summary_text', text: part } });
    });
    const item = {
      id: itemId,
      type: 'reasoning',
      summary: reasoningParts.map((text) => ({ type: 'summary_text', text })),
      ...(reply.encryptedReasoning ? { encrypted_content: reply.encryptedReasoning } : {}),
    };
    emit('response.output_item.done', { output_index, item });
    output.push(item);
  }
  if (reply.text !== undefined) {
    const itemId = `msg_${responseCounter}`;
    const output_index = output.length;
    emit('response.output_item.added', { output_index, item: { id: itemId, type: 'message', status: 'in_progress', role: 'assistant', content: [] } });
    emit('response.content_part.added', { item_id: itemId, output_index, content_index: 0, part: { type: 'output_text', text: '', annotations: [] } });
    for (const delta of pieces(reply.text, chunk)) emit('response.output_text.delta', { item_id: itemId, output_index, content_index: 0, delta, logprobs: [] });
    emit('response.output_text.done', { item_id: itemId, output_index, content_index: 0, text: reply.text, logprobs: [] });
    const part = { type: 'output_text', text: reply.text, annotations: [] };
    emit('response.content_part.done', { item_id: itemId, output_index, content_index: 0, part });
    const item = { id: itemId, type: 'message', status: 'completed', role: 'assistant', content: [part] };
    emit('response.output_item.done', { output_index, item });
    output.push(item);
  }
  (reply.toolCalls ?? []).forEach((call, i) => {
    const itemId = `fc_${responseCounter}_${i}`;
    const output_index = output.length;
    const callId = call.callId === undefined ? `call_${responseCounter}_${i}` : call.callId;
    const args = argsText(call);
    const head: Record<string, unknown> = { id: itemId, type: 'function_call', status: 'in_progress', arguments: '' };
    if (callId !== null) head.call_id = callId;
    if (call.name !== null) head.name = call.name;
    emit('response.output_item.added', { output_index, item: head });
    for (const delta of pieces(args, reply.argsChunk ?? 5)) emit('response.function_call_arguments.delta', { item_id: itemId, output_index, delta });
    emit('response.function_call_arguments.done', { item_id: itemId, output_index, arguments: args });
    const item = { ...head, status: 'completed', arguments: args };
    emit('response.output_item.done', { output_index, item });
    output.push(item);
  });
  const u = reply.usage ?? {};
  const usage = {
    input_tokens: u.inputTokens ?? 11,
    input_tokens_details: { cached_tokens: u.cachedInputTokens ?? 0 },
    output_tokens: u.outputTokens ?? 7,
    output_tokens_details: { reasoning_tokens: u.reasoningTokens ?? 0 },
    total_tokens: (u.inputTokens ?? 11) + (u.outputTokens ?? 7),
  };
  if (reply.failWith) {
    emit('response.failed', { response: { ...base, status: 'failed', output, usage, error: reply.failWith } });
    return { events, completion };
  }
  if (!reply.omitCompletion) {
    const type = reply.incomplete ? 'response.incomplete' : 'response.completed';
    const response = {
      ...base,
      status: reply.incomplete ? 'incomplete' : 'completed',
      incomplete_details: reply.incomplete ? { reason: reply.incomplete } : null,
      output,
      usage,
    };
    completion.push(events.length);
    emit(type, { response });
    if (reply.doubleCompletion) {
      completion.push(events.length);
      emit(type, { response });
    }
  }
  return { events, completion };
}

/** The SSE data lines of a reply on Chat Completions. */
function chatEvents(reply: FakeStream, request: RecordedRequest): { events: string[]; completion: number[] } {
  responseCounter += 1;
  const id = `chatcmpl-${responseCounter}`;
  const model = reply.model ?? String(request.body.model ?? 'fake-model');
  const created = Math.floor(Date.now() / 1000);
  const events: string[] = [];
  const completion: number[] = [];
  const chunkOf = (delta: Record<string, unknown>, finish: string | null = null) =>
    `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, system_fingerprint: 'fp_fake', choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
  events.push(chunkOf({ role: 'assistant', content: '', refusal: null }));
  const chunk = reply.chunk ?? 4;
  const reasoning = reply.reasoning === undefined ? '' : Array.isArray(reply.reasoning) ? reply.reasoning.join('\n\n') : reply.reasoning;
  for (const delta of pieces(reasoning, chunk)) events.push(chunkOf({ reasoning_content: delta }));
  for (const delta of pieces(reply.text ?? '', chunk)) events.push(chunkOf({ content: delta }));
  (reply.toolCalls ?? []).forEach((call, index) => {
    const callId = call.callId === undefined ? `call_${responseCounter}_${index}` : call.callId;
    const head: Record<string, unknown> = { index, type: 'function', function: { ...(call.name !== null ? { name: call.name } : {}), arguments: '' } };
    if (callId !== null) head.id = callId;
    events.push(chunkOf({ tool_calls: [head] }));
    for (const piece of pieces(argsText(call), reply.argsChunk ?? 5)) events.push(chunkOf({ tool_calls: [{ index, function: { arguments: piece } }] }));
  });
  if (reply.failWith) {
    // Compatible servers report a failure inside the stream as a chunk with an `error` object.
    events.push(`data: ${JSON.stringify({ error: { ...reply.failWith, type: 'invalid_request_error', param: null } })}\n\n`);
    return { events, completion };
  }
  const finish = reply.finishReason ?? ((reply.toolCalls?.length ?? 0) > 0 ? 'tool_calls' : 'stop');
  if (!reply.omitCompletion) {
    completion.push(events.length);
    events.push(chunkOf({}, finish));
    if (reply.doubleCompletion) {
      completion.push(events.length);
      events.push(chunkOf({}, finish));
    }
  }
  const streamOptions = request.body.stream_options as { include_usage?: boolean } | undefined;
  if (streamOptions?.include_usage) {
    const u = reply.usage ?? {};
    const usage = {
      prompt_tokens: u.inputTokens ?? 11,
      completion_tokens: u.outputTokens ?? 7,
      total_tokens: (u.inputTokens ?? 11) + (u.outputTokens ?? 7),
      prompt_tokens_details: { cached_tokens: u.cachedInputTokens ?? 0 },
      completion_tokens_details: { reasoning_tokens: u.reasoningTokens ?? 0 },
    };
    events.push(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices: [], usage })}\n\n`);
  }
  events.push('data: [DONE]\n\n');
  return { events, completion };
}

async function readBody(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  if (text === '') return {};
  try {
    return JSON.parse(text) as Record<string, unknown>;
  } catch {
    return { unparsable: text };
  }
}

function isHttpError(reply: FakeReply): reply is FakeHttpError {
  return 'status' in reply;
}

function isRaw(reply: FakeReply): reply is FakeRawReply {
  return 'raw' in reply;
}

/**
 * Starts the server on a free loopback port.
 *
 * @example
 * const server = await startFakeOpenAI();
 * server.script({ text: 'Hello.' });
 * const model = openaiModel({ model: 'm', baseURL: server.url, apiKey: 'k', api: 'chat' });
 */
export async function startFakeOpenAI(): Promise<FakeOpenAIServer> {
  const queue: FakeScript[] = [];
  const requests: RecordedRequest[] = [];
  const unexpected: RecordedRequest[] = [];
  const sockets = new Set<import('node:net').Socket>();
  let clientAborts = 0;

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const body = await readBody(req);
    const path = (req.url ?? '/').split('?')[0]!;
    const api = path.endsWith('/responses') ? 'responses' : path.endsWith('/chat/completions') ? 'chat' : 'other';
    const recorded: RecordedRequest = { method: req.method ?? 'GET', path, api, headers: { ...req.headers }, body };
    requests.push(recorded);
    const next = queue.shift();
    if (next === undefined || api === 'other') {
      unexpected.push(recorded);
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: `fake server: no scripted reply for ${req.method} ${path}`, type: 'server_error', code: 'server_error' } }));
      return;
    }
    const reply = typeof next === 'function' ? next(recorded) : next;
    if (isHttpError(reply)) {
      res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers });
      res.end(JSON.stringify(reply.body ?? { error: { message: `fake error ${reply.status}`, type: 'server_error', code: null } }));
      return;
    }
    if (isRaw(reply)) {
      res.writeHead(reply.raw.status, reply.raw.headers);
      for (const chunk of reply.raw.chunks) {
        res.write(reply.raw.binary ? Buffer.from(chunk, 'latin1') : chunk);
        // Each chunk its own read on the client, as a provider flushes event by event.
        await new Promise((r) => setImmediate(r));
      }
      res.end();
      return;
    }
    const { events } = api === 'responses' ? responsesEvents(reply, recorded) : chatEvents(reply, recorded);
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-request-id': `req_${requests.length}`, ...reply.headers });
    let closed = false;
    let cut = false;
    res.on('close', () => {
      if (!res.writableFinished && !cut) {
        closed = true;
        clientAborts += 1;
      }
    });
    for (const [i, event] of events.entries()) {
      if (closed) return;
      if (reply.cutAfterEvents !== undefined && i >= reply.cutAfterEvents) {
        // Let what was written reach the client first, so that the cut comes after it.
        await sleep(20);
        cut = true;
        res.socket?.destroy();
        return;
      }
      if (reply.hangAfterEvents !== undefined && i >= reply.hangAfterEvents) {
        await once(res, 'close');
        return;
      }
      if (reply.delayMs) await sleep(reply.delayMs);
      else if (reply.flushEvery && i > 0 && i % reply.flushEvery === 0) await new Promise((r) => setImmediate(r));
      res.write(event);
    }
    res.end();
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      res.destroy(error instanceof Error ? error : new Error(String(error)));
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    unexpected,
    script(...replies) {
      queue.push(...replies);
    },
    reset() {
      queue.length = 0;
      requests.length = 0;
      unexpected.length = 0;
    },
    get remaining() {
      return queue.length;
    },
    get clientAborts() {
      return clientAborts;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A loopback port nothing listens on (for "server unreachable" cases). */
export async function closedPort(): Promise<number> {
  const probe = createNetServer().listen(0, '127.0.0.1');
  await once(probe, 'listening');
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}
