/**
 * Hostile MCP servers over HTTP (Streamable HTTP and the older HTTP+SSE): a real loopback server,
 * written here on `node:http` so it can break the wire format, against `mcpTools` and a real turn.
 * Each tool of the server answers its call badly in one way; every call must end promptly as a
 * typed failure (the SDK alone dropped the bad answer and left the call to its 10-minute timeout,
 * or read an endless body whole), the host must not read without bound, and the server must stay
 * usable. See docs/security.md, "Attack round 5".
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { SessionUpdate } from '../../src/protocol/updates.js';
import { MCP_MAX_STRAY_MESSAGES } from '../../src/services/mcp/http-answers.js';
import { mcpTools, type McpTools } from '../../src/services/mcp/tools.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { harness } from '../support/harness.js';

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));

type ToolResultEnvelope = Extract<SessionUpdate, { type: 'tool_call_finished' }>;
const servers: McpTools[] = [];
const https: Server[] = [];
afterEach(async () => {
  while (servers.length > 0) await servers.pop()!.close();
  while (https.length > 0) {
    const server = https.pop()!;
    server.closeAllConnections();
    await new Promise((done) => server.close(done));
  }
});

type Rpc = { jsonrpc: '2.0'; id?: string | number; method?: string; params?: Record<string, unknown> };
const MB = 1024 * 1024;
/**
 * The no-progress timeout the servers get: an answer the host dropped would hold its call this long.
 * A turn of a few bad calls must end well inside `PROMPT_MS` (a bound for a loaded 2-core machine:
 * the calls take well under a second each when it is idle).
 */
const CALL_TIMEOUT_MS = 300_000;
const PROMPT_MS = 40_000;
/** What the server saw: bytes it wrote on bad bodies, and when each call's response closed. */
interface Seen {
  written: number;
  closedAt: Map<string, number>;
  posts: number;
}

const TOOLS = [
  'not_json',
  'not_jsonrpc',
  'wrong_id',
  'no_result',
  'garbage_after',
  'endless_body',
  'sse_malformed',
  'sse_not_jsonrpc',
  'sse_wrong_id',
  'sse_ends',
  'sse_huge_event',
  'sse_keepalive',
  'sse_answer_then_garbage',
  'sse_requests',
  'sse_notifications',
  'redirect_away',
  'redirect_loop',
  'fine',
];

const json = (res: ServerResponse, body: unknown) => {
  res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 's1' });
  res.end(typeof body === 'string' ? body : JSON.stringify(body));
};
const answer = (id: Rpc['id'], text = 'ok') => ({ jsonrpc: '2.0', id, result: { content: [{ type: 'text', text }] } });

/** Writes `piece` again and again, as fast as the reader takes it, up to `limit` bytes. */
function endless(res: ServerResponse, piece: string, seen: Seen, limit = 200 * MB): void {
  const buffer = Buffer.from(piece.repeat(Math.ceil(65_536 / piece.length)));
  const more = () => {
    while (seen.written < limit && !res.destroyed) {
      seen.written += buffer.length;
      if (!res.write(buffer)) return void res.once('drain', more);
    }
    res.end();
  };
  more();
}

function sse(res: ServerResponse): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'mcp-session-id': 's1' });
  res.flushHeaders();
}

/** Keeps an event stream open with a comment every 20 ms, as a keepalive; the returned function stops it. */
function keepalive(res: ServerResponse): () => void {
  const timer = setInterval(() => res.write(': keepalive\n\n'), 20);
  res.on('close', () => clearInterval(timer));
  return () => clearInterval(timer);
}

function floodEvents(res: ServerResponse, event: (n: number) => unknown): void {
  let n = 0;
  const more = () => {
    while (!res.destroyed && n < 1_000_000) {
      n += 1;
      if (!res.write(`data: ${JSON.stringify(event(n))}\n\n`)) return void res.once('drain', more);
    }
  };
  more();
}

function call(req: IncomingMessage, res: ServerResponse, message: Rpc, seen: Seen, port: number): void {
  const id = message.id;
  const tool = String(message.params?.name);
  res.on('close', () => seen.closedAt.set(tool, Date.now()));
  switch (tool) {
    case 'not_json':
      return json(res, 'this is not json');
    case 'not_jsonrpc':
      return json(res, { hello: 'world' });
    case 'wrong_id':
      return json(res, answer(typeof id === 'number' ? id + 1000 : `${id}-other`));
    case 'no_result':
      return json(res, { jsonrpc: '2.0', id });
    case 'garbage_after':
      return json(res, `${JSON.stringify(answer(id))}\n<html>garbage</html>`);
    case 'endless_body':
      res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 's1' });
      return endless(res, '[                                                              ', seen);
    case 'sse_malformed':
      sse(res);
      res.write(`data: ${JSON.stringify({ jsonrpc: '2.0', id, error: { code: 'E_BAD' } })}\n\n`);
      return void keepalive(res);
    case 'sse_not_jsonrpc':
      sse(res);
      res.write('data: <html>hello</html>\n\n');
      return void keepalive(res);
    case 'sse_wrong_id':
      sse(res);
      res.write(`data: ${JSON.stringify(answer(typeof id === 'number' ? id + 1000 : `${id}-other`))}\n\n`);
      return void keepalive(res);
    case 'sse_ends':
      sse(res);
      res.write(`data: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'bye' } })}\n\n`);
      return void res.end();
    case 'sse_huge_event':
      sse(res);
      res.write('data: "');
      return endless(res, 'x', seen);
    case 'sse_keepalive':
      sse(res);
      return void keepalive(res);
    case 'sse_answer_then_garbage':
      sse(res);
      res.write(`data: ${JSON.stringify(answer(id, 'answered'))}\n\n`);
      return floodEvents(res, () => 'garbage');
    case 'sse_requests':
      sse(res);
      return floodEvents(res, (n) => ({ jsonrpc: '2.0', id: `ping-${n}`, method: 'ping' }));
    case 'sse_notifications':
      sse(res);
      return floodEvents(res, (n) => ({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: n } }));
    case 'redirect_away':
      res.writeHead(307, { location: `http://localhost:${port}/elsewhere` });
      return void res.end();
    case 'redirect_loop':
      res.writeHead(307, { location: req.url ?? '/mcp' });
      return void res.end();
    default:
      return json(res, answer(id, 'fine'));
  }
}

/** A Streamable HTTP MCP server whose tools each break the protocol in their own way. */
async function hostileHttpServer(): Promise<{ url: string; seen: Seen }> {
  const seen: Seen = { written: 0, closedAt: new Map(), posts: 0 };
  const server = createServer((req, res) => {
    if (req.method !== 'POST') return void res.writeHead(405).end();
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => {
      seen.posts += 1;
      const message = JSON.parse(body) as Rpc;
      if (message.id === undefined || message.method === undefined) return void res.writeHead(202).end();
      switch (message.method) {
        case 'initialize':
          return json(res, { jsonrpc: '2.0', id: message.id, result: { protocolVersion: message.params?.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'hostile-http', version: '1' } } });
        case 'tools/list':
          return json(res, { jsonrpc: '2.0', id: message.id, result: { tools: TOOLS.map((name) => ({ name, inputSchema: { type: 'object' } })) } });
        case 'tools/call':
          return call(req, res, message, seen, (server.address() as AddressInfo).port);
        default:
          return json(res, { jsonrpc: '2.0', id: message.id, result: {} });
      }
    });
  });
  https.push(server);
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, seen };
}

async function connect(url: string, extra: Record<string, unknown> = {}): Promise<McpTools> {
  const server = await mcpTools({ name: 'bad', url, trust: 'trusted', ...extra });
  servers.push(server);
  return server;
}

/** Runs one turn calling `tools` in order and returns each call's result, with how long the turn took. */
async function callAll(server: McpTools, tools: string[]): Promise<{ results: ToolResultEnvelope[]; ms: number }> {
  const h = await harness(storage, [{ toolCalls: tools.map((name) => ({ name: `bad__${name}`, arguments: {} })) }, { text: 'done' }], { tools: [server] });
  const started = Date.now();
  const { outcome } = await h.run('go');
  expect(outcome).toEqual({ status: 'completed', finalText: 'done' });
  const results = h.updates.flatMap((e) => (e.update.type === 'tool_call_finished' ? [e.update] : []));
  return { results, ms: Date.now() - started };
}

const failure = (r: ToolResultEnvelope) => [r.status, r.error?.code];

describe('a hostile Streamable HTTP MCP server', { timeout: 90_000 }, () => {
  it('JSON answers that are not JSON, not JSON-RPC, answer another id, lack result and error, or trail garbage end their calls at once as mcp_protocol_error', async () => {
    const { url } = await hostileHttpServer();
    const server = await connect(url, { callTimeoutMs: CALL_TIMEOUT_MS });
    const { results, ms } = await callAll(server, ['not_json', 'not_jsonrpc', 'wrong_id', 'no_result', 'garbage_after', 'fine']);
    expect(results.map(failure)).toEqual([
      ['failed', 'mcp_protocol_error'],
      ['failed', 'mcp_protocol_error'],
      ['failed', 'mcp_protocol_error'],
      ['failed', 'mcp_protocol_error'],
      ['failed', 'mcp_protocol_error'],
      ['succeeded', undefined],
    ]);
    expect(results[0]!.text).toContain('not JSON: this is not json');
    expect(ms).toBeLessThan(PROMPT_MS);
  });

  it('an endless JSON body is read no further than the answer bound, and the call ends as mcp_protocol_error', async () => {
    const { url, seen } = await hostileHttpServer();
    const server = await connect(url, { callTimeoutMs: CALL_TIMEOUT_MS });
    const { results, ms } = await callAll(server, ['endless_body', 'fine']);
    expect(results.map(failure)).toEqual([
      ['failed', 'mcp_protocol_error'],
      ['succeeded', undefined],
    ]);
    expect(results[0]!.text).toContain('more than 10485760 bytes');
    // The server writes ahead into socket buffers, but nowhere near its 200 MB.
    expect(seen.written).toBeLessThan(32 * MB);
    expect(ms).toBeLessThan(PROMPT_MS);
  });

  it('event streams with a malformed answer, a non-message event, an answer to another id, or no answer before they end: mcp_protocol_error at once', async () => {
    const { url, seen } = await hostileHttpServer();
    const server = await connect(url, { callTimeoutMs: CALL_TIMEOUT_MS });
    const { results, ms } = await callAll(server, ['sse_malformed', 'sse_not_jsonrpc', 'sse_wrong_id', 'sse_ends', 'fine']);
    expect(results.map(failure)).toEqual([
      ['failed', 'mcp_protocol_error'],
      ['failed', 'mcp_protocol_error'],
      ['failed', 'mcp_protocol_error'],
      ['failed', 'mcp_protocol_error'],
      ['succeeded', undefined],
    ]);
    expect(ms).toBeLessThan(PROMPT_MS);
    // The streams kept open by keepalives were closed by the client, not left open.
    for (const tool of ['sse_malformed', 'sse_not_jsonrpc', 'sse_wrong_id']) expect(seen.closedAt.has(tool)).toBe(true);
  });

  it('one endless event is cut at the answer bound; the call ends as mcp_protocol_error', async () => {
    const { url, seen } = await hostileHttpServer();
    const server = await connect(url, { callTimeoutMs: CALL_TIMEOUT_MS });
    const { results, ms } = await callAll(server, ['sse_huge_event', 'fine']);
    expect(results.map(failure)).toEqual([
      ['failed', 'mcp_protocol_error'],
      ['succeeded', undefined],
    ]);
    expect(results[0]!.text).toContain('an event of more than 10485760 bytes');
    expect(seen.written).toBeLessThan(32 * MB);
    expect(ms).toBeLessThan(PROMPT_MS);
  });

  it('a flood of server requests or of notifications on a call stream ends the call as mcp_protocol_error', async () => {
    const { url, seen } = await hostileHttpServer();
    const server = await connect(url, { callTimeoutMs: CALL_TIMEOUT_MS });
    const { results, ms } = await callAll(server, ['sse_requests', 'sse_notifications', 'fine']);
    expect(results.map(failure)).toEqual([
      ['failed', 'mcp_protocol_error'],
      ['failed', 'mcp_protocol_error'],
      ['succeeded', undefined],
    ]);
    expect(results[0]!.text).toContain('more than 100 requests');
    expect(results[1]!.text).toContain('more than 10000 notifications');
    // The client answered at most the 100 pings it took (plus the turn's own posts), not the flood.
    expect(seen.posts).toBeLessThan(150);
    expect(ms).toBeLessThan(PROMPT_MS);
  });

  it('an answer followed by endless garbage: the call succeeds and the client closes the stream', async () => {
    const { url, seen } = await hostileHttpServer();
    const server = await connect(url, { callTimeoutMs: CALL_TIMEOUT_MS });
    const { results } = await callAll(server, ['sse_answer_then_garbage']);
    expect(results.map((r) => [r.status, r.text])).toEqual([['succeeded', 'answered']]);
    await expect.poll(() => seen.closedAt.has('sse_answer_then_garbage'), { timeout: 15_000 }).toBe(true);
  });

  it('keepalive comments are not progress: the call ends as timeout after callTimeoutMs, and its stream is closed', async () => {
    const { url, seen } = await hostileHttpServer();
    const server = await connect(url, { callTimeoutMs: 800 });
    const { results, ms } = await callAll(server, ['sse_keepalive']);
    expect(results.map(failure)).toEqual([['failed', 'timeout']]);
    expect(ms).toBeLessThan(20_000);
    await expect.poll(() => seen.closedAt.has('sse_keepalive'), { timeout: 15_000 }).toBe(true);
  });

  it('a redirect to another origin or a redirect loop ends the call at once with a typed error', async () => {
    const { url } = await hostileHttpServer();
    const server = await connect(url, { callTimeoutMs: CALL_TIMEOUT_MS });
    const { results, ms } = await callAll(server, ['redirect_away', 'redirect_loop', 'fine']);
    expect(results.map(failure)).toEqual([
      ['failed', 'mcp_protocol_error'],
      ['failed', 'mcp_protocol_error'],
      ['succeeded', undefined],
    ]);
    expect(ms).toBeLessThan(PROMPT_MS);
  });
});

/** An MCP server on the older HTTP+SSE transport: answers on its GET stream, some of them bad. */
async function hostileSseServer(): Promise<{ url: string; seen: Seen }> {
  const seen: Seen = { written: 0, closedAt: new Map(), posts: 0 };
  let stream: ServerResponse | null = null;
  let quiet = () => {};
  const send = (message: unknown) => stream?.write(`event: message\ndata: ${JSON.stringify(message)}\n\n`);
  const server = createServer((req, res) => {
    if (req.method === 'GET') {
      sse(res);
      stream = res;
      res.write('event: endpoint\ndata: /messages?session=1\n\n');
      quiet = keepalive(res);
      return;
    }
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => {
      seen.posts += 1;
      res.writeHead(202).end('Accepted');
      const message = JSON.parse(body) as Rpc;
      if (message.id === undefined) return;
      const id = message.id;
      switch (message.method) {
        case 'initialize':
          return send({ jsonrpc: '2.0', id, result: { protocolVersion: message.params?.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'hostile-sse', version: '1' } } });
        case 'tools/list':
          return send({ jsonrpc: '2.0', id, result: { tools: ['sse_malformed', 'sse_huge_event', 'sse_strays', 'sse_few_strays', 'fine'].map((name) => ({ name, inputSchema: { type: 'object' } })) } });
        case 'tools/call':
          switch (String(message.params?.name)) {
            case 'sse_malformed':
              return send({ jsonrpc: '2.0', id, error: { code: 'E_BAD' } });
            case 'sse_strays':
              // Answers to requests never made (and a non-message), and never this call's answer.
              for (let n = 0; n < MCP_MAX_STRAY_MESSAGES - 1; n += 1) send(answer(`never-asked-${n}`, 'leaked'));
              return stream!.write('event: message\ndata: {"not":"json-rpc"}\n\n');
            case 'sse_few_strays':
              // Below the bound: the strays are dropped and the call gets its own answer.
              for (let n = 0; n < MCP_MAX_STRAY_MESSAGES - 2; n += 1) send(answer(`never-asked-${n}`, 'leaked'));
              return send(answer(id, 'fine'));
            case 'sse_huge_event':
              // No keepalive may break the one endless event into lines.
              quiet();
              stream!.write('event: message\ndata: "');
              return endless(stream!, 'x', seen);
            default:
              return send(answer(id, 'fine'));
          }
        default:
          return send({ jsonrpc: '2.0', id, result: {} });
      }
    });
  });
  https.push(server);
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/sse`, seen };
}

describe('a hostile HTTP+SSE MCP server', { timeout: 90_000 }, () => {
  it('a malformed answer on the event stream ends its call at once as mcp_protocol_error; the next call works', async () => {
    const { url } = await hostileSseServer();
    const server = await connect(url, { type: 'sse', callTimeoutMs: CALL_TIMEOUT_MS });
    const { results, ms } = await callAll(server, ['sse_malformed', 'fine']);
    expect(results.map(failure)).toEqual([
      ['failed', 'mcp_protocol_error'],
      ['succeeded', undefined],
    ]);
    expect(ms).toBeLessThan(PROMPT_MS);
  });

  it(`${MCP_MAX_STRAY_MESSAGES} messages answering no request in flight end the call in flight as mcp_protocol_error at once; the next call works`, async () => {
    const { url } = await hostileSseServer();
    const server = await connect(url, { type: 'sse', callTimeoutMs: CALL_TIMEOUT_MS });
    const { results, ms } = await callAll(server, ['sse_few_strays', 'sse_strays', 'fine']);
    // The few strays of the first call count too: its answer came, and the second call's strays reach the bound.
    expect(results.map(failure)).toEqual([
      ['succeeded', undefined],
      ['failed', 'mcp_protocol_error'],
      ['succeeded', undefined],
    ]);
    expect(results[1]!.text).toContain('answer no request in flight');
    expect(results[1]!.text).toContain('never-asked-0');
    // Nothing a stray carried reached a call.
    expect(JSON.stringify(results)).not.toContain('leaked');
    expect(ms).toBeLessThan(PROMPT_MS);
  });

  it('an endless event on the event stream is cut at the answer bound and ends the call in flight as mcp_protocol_error', async () => {
    const { url, seen } = await hostileSseServer();
    const server = await connect(url, { type: 'sse', callTimeoutMs: CALL_TIMEOUT_MS });
    const { results, ms } = await callAll(server, ['sse_huge_event']);
    expect(results.map(failure)).toEqual([['failed', 'mcp_protocol_error']]);
    expect(seen.written).toBeLessThan(32 * MB);
    expect(ms).toBeLessThan(PROMPT_MS);
  });
});
