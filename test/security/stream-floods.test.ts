/**
 * A hostile provider floods the OpenAI adapters while they stream (attack round 3, point 1), played
 * through the public API: `createCore` with `openaiModel` (the real `openai` client) against a
 * loopback server that writes the real wire formats lazily. 500 MB of argument deltas for one tool
 * call, one stream event of 200 MB, an endless stream of empty deltas and one of one-character
 * deltas: each must end the model call as `model_protocol_error` while it streams, after reading a
 * bounded part of the body, with the heap bounded and nothing of the flood stored.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../src/core.js';
import { MAX_BODY_LINE_BYTES } from '../../src/services/model/bounded-body.js';
import { openaiModel, type OpenAIModelOptions } from '../../src/services/model/openai.js';
import { MAX_RESPONSE_CHARS } from '../../src/services/model/stream-events.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { echoTool } from '../../src/testing/tools.js';
import { usePglite } from '../support/databases.js';
import { startHostileStream, type HostileStreamServer } from '../support/hostile-stream-server.js';
import { heapAfterGc } from '../support/heap.js';

const MIB = 1024 * 1024;

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));
const open: Array<Core | HostileStreamServer> = [];
afterEach(async () => {
  while (open.length > 0) {
    const item = open.pop()!;
    if ('shutdown' in item) await item.shutdown();
    else await item.close();
  }
});

const sse = (data: unknown, event?: string) => `${event ? `event: ${event}\n` : ''}data: ${JSON.stringify(data)}\n\n`;

/** `unit` repeated `count` times (or without end), batched into buffers of about 256 KiB. */
function* repeated(unit: string, count = Infinity): Generator<Buffer> {
  const per = Math.max(1, Math.floor((256 * 1024) / Buffer.byteLength(unit)));
  const batch = Buffer.from(unit.repeat(per));
  for (let sent = 0; sent < count; sent += per) yield batch;
}

interface FloodRun {
  outcome: Awaited<ReturnType<Awaited<ReturnType<Core['createSession']>>['waitForTurn']>>;
  server: HostileStreamServer;
  ms: number;
  heapGrowth: number;
  peakGrowth: number;
  storedChars: number;
}

async function flood(
  api: 'responses' | 'chat',
  body: (api: 'responses' | 'chat') => Iterable<string | Uint8Array>,
  bounds: Pick<OpenAIModelOptions, 'maxStreamEvents' | 'maxResponseBytes'> = {},
): Promise<FloodRun> {
  const server = await startHostileStream(body);
  open.push(server);
  const core = await createCore({
    storage,
    model: openaiModel({ model: 'fake-model', api, baseURL: server.url, apiKey: 'sk-test', maxRetries: 0, ...bounds }),
    tools: [echoTool],
    closeStorageOnShutdown: false,
    worldState: false,
  });
  open.push(core);
  const session = await core.createSession({ workingDirectory: process.cwd() });
  const before = heapAfterGc();
  let peak = before;
  const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().heapUsed)), 20);
  const started = Date.now();
  const { turnId } = await session.startTurn({ clientRequestId: `flood-${Math.random()}`, input: [{ type: 'text', text: 'go' }] });
  const outcome = await session.waitForTurn(turnId);
  const ms = Date.now() - started;
  clearInterval(sampler);
  const after = heapAfterGc();
  const storedChars = JSON.stringify(await storage.listMessages(session.sessionId)).length;
  console.info(`[stream-floods] ${api}: ${ms} ms, ${(server.bytesWritten / MIB).toFixed(1)} MiB read, heap +${((after - before) / MIB).toFixed(1)} MiB after GC, peak +${((peak - before) / MIB).toFixed(1)} MiB`);
  return { outcome, server, ms, heapGrowth: after - before, peakGrowth: peak - before, storedChars };
}

const chatChunk = (delta: unknown) => sse({ id: 'c1', object: 'chat.completion.chunk', model: 'm', choices: [{ index: 0, delta, finish_reason: null }] });

describe('a hostile provider floods the adapters while they stream', () => {
  it.each(['chat', 'responses'] as const)('%s: 500 MB of argument deltas for one tool call end as model_protocol_error after a bounded read', async (api) => {
    const piece = 'a'.repeat(MIB);
    const run = await flood(api, function* () {
      if (api === 'chat') {
        yield chatChunk({ role: 'assistant', tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'echo', arguments: '{"text":"' } }] });
        yield* repeated(chatChunk({ tool_calls: [{ index: 0, function: { arguments: piece } }] }), 500);
      } else {
        yield sse({ type: 'response.created', response: { id: 'r1', model: 'm', status: 'in_progress', output: [] } }, 'response.created');
        yield sse({ type: 'response.output_item.added', item: { id: 'fc_1', type: 'function_call', call_id: 'call_1', name: 'echo', arguments: '' } }, 'response.output_item.added');
        yield* repeated(sse({ type: 'response.function_call_arguments.delta', item_id: 'fc_1', delta: piece }, 'response.function_call_arguments.delta'), 500);
      }
    });
    expect(run.outcome).toMatchObject({ status: 'failed', code: 'model_protocol_error' });
    expect(run.outcome.status === 'failed' && run.outcome.message).toContain(`more than ${MAX_RESPONSE_CHARS} characters`);
    // Cut at 16 Mi characters, not after 500 MB (socket buffers add a few MiB).
    expect(run.server.bytesWritten).toBeLessThan(64 * MIB);
    expect(run.heapGrowth).toBeLessThan(32 * MIB);
    expect(run.storedChars).toBeLessThan(100_000);
  }, 60_000);

  it.each(['chat', 'responses'] as const)('%s: one stream event of 200 MB ends as model_protocol_error at the line bound, in linear time', async (api) => {
    const run = await flood(api, function* () {
      yield api === 'chat' ? 'data: {"choices":[{"index":0,"delta":{"content":"' : 'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"m1","delta":"';
      yield* repeated('b'.repeat(1024), 200 * 1024);
    });
    expect(run.outcome).toMatchObject({ status: 'failed', code: 'model_protocol_error' });
    expect(run.outcome.status === 'failed' && run.outcome.message).toContain(`longer than ${MAX_BODY_LINE_BYTES} bytes`);
    expect(run.server.bytesWritten).toBeLessThan(MAX_BODY_LINE_BYTES + 16 * MIB);
    expect(run.storedChars).toBeLessThan(100_000);
  }, 60_000);

  // The body and event bounds are lowered for these two so that the test takes seconds: at the
  // defaults (256 MiB, 512 Ki events) the same floods end after about 20 s and 70 s on a quiet
  // machine (a one-character text delta costs the runtime about 0.14 ms).
  it('chat: an endless stream of empty deltas ends as model_protocol_error at the body bound', async () => {
    const run = await flood('chat', () => repeated(chatChunk({})), { maxResponseBytes: 4 * MIB });
    expect(run.outcome).toMatchObject({ status: 'failed', code: 'model_protocol_error' });
    expect(run.outcome.status === 'failed' && run.outcome.message).toContain(`longer than ${4 * MIB} bytes`);
    expect(run.server.bytesWritten).toBeLessThan(16 * MIB);
  }, 60_000);

  it.each(['chat', 'responses'] as const)('%s: an endless stream of one-character text deltas ends as model_protocol_error at the event bound', async (api) => {
    const unit = api === 'chat' ? 'data: {"choices":[{"delta":{"content":"x"}}]}\n\n' : sse({ type: 'response.output_text.delta', item_id: 'm1', delta: 'x' });
    const run = await flood(api, () => repeated(unit), { maxStreamEvents: 5_000 });
    expect(run.outcome).toMatchObject({ status: 'failed', code: 'model_protocol_error' });
    expect(run.outcome.status === 'failed' && run.outcome.message).toContain('more than 5000 stream events');
    expect(run.server.bytesWritten).toBeLessThan(16 * MIB);
  }, 60_000);
});
