/**
 * `openaiModel` on the wire: every case goes through the real `openai` client to a local server that
 * speaks the real SSE formats of the Responses API and Chat Completions.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { InputError, ModelError } from '../../../src/errors.js';
import { INTERRUPTED_RESULT_TEXT } from '../../../src/services/context/assemble.js';
import { openaiModel, type OpenAIModelOptions } from '../../../src/services/model/openai.js';
import { RESPONSES_OPAQUE_PROVIDER } from '../../../src/services/model/openai-responses.js';
import type { ModelRequest, ModelStreamEvent } from '../../../src/services/model/port.js';
import { CONTEXT_LENGTH_ERROR, closedPort, startFakeOpenAI, type FakeOpenAIServer } from '../../support/fake-openai-server.js';

let server: FakeOpenAIServer;
beforeAll(async () => {
  server = await startFakeOpenAI();
});
afterAll(async () => {
  await server.close();
});
beforeEach(() => {
  server.requests.length = 0;
  server.unexpected.length = 0;
  expect(server.remaining).toBe(0);
});

const request: ModelRequest = {
  system: [{ key: 'core/agent-system', content: 'You are terse.' }],
  messages: [{ role: 'user', kind: 'normal', content: [{ type: 'text', text: 'Say hello.' }] }],
  tools: [{ name: 'echo', description: 'Echoes.', parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] } }],
};

function model(api: 'responses' | 'chat', extra: Partial<OpenAIModelOptions> = {}) {
  return openaiModel({ model: 'fake-model', api, baseURL: server.url, apiKey: 'sk-test', retryBaseDelayMs: 1, retryMaxDelayMs: 50, ...extra });
}

async function collect(stream: AsyncIterable<ModelStreamEvent>): Promise<ModelStreamEvent[]> {
  const events: ModelStreamEvent[] = [];
  for await (const event of stream) events.push(event);
  return events;
}

async function failure(stream: AsyncIterable<ModelStreamEvent>): Promise<{ error: unknown; events: ModelStreamEvent[] }> {
  const events: ModelStreamEvent[] = [];
  try {
    for await (const event of stream) events.push(event);
  } catch (error) {
    return { error, events };
  }
  throw new Error(`the stream did not fail; events: ${JSON.stringify(events)}`);
}

function run(api: 'responses' | 'chat', extra: Partial<OpenAIModelOptions> = {}, req: ModelRequest = request) {
  return model(api, extra).stream(req, { signal: new AbortController().signal });
}

const text = (events: ModelStreamEvent[]) => events.flatMap((e) => (e.type === 'text_delta' ? [e.delta] : [])).join('');
const kinds = (events: ModelStreamEvent[]) => [...new Set(events.map((e) => e.type))];

describe.each(['responses', 'chat'] as const)('openaiModel over %s', (api) => {
  it('text only: streams text deltas, then one completion with usage, id and model', async () => {
    server.script({ text: 'Hello, world. How are you?', chunk: 3 });
    const events = await collect(run(api));
    expect(events.filter((e) => e.type === 'text_delta').length).toBe(9);
    expect(text(events)).toBe('Hello, world. How are you?');
    const last = events.at(-1)!;
    expect(last).toEqual({
      type: 'completed',
      usage: { inputTokens: 11, outputTokens: 7, cachedInputTokens: 0, reasoningTokens: 0 },
      finishReason: 'stop',
      responseId: expect.stringMatching(api === 'responses' ? /^resp_/ : /^chatcmpl-/),
      actualModel: 'fake-model',
    });
    expect(events.filter((e) => e.type === 'completed')).toHaveLength(1);
    const [sent] = server.requests;
    expect(sent!.path).toBe(api === 'responses' ? '/v1/responses' : '/v1/chat/completions');
    expect(sent!.headers.authorization).toBe('Bearer sk-test');
    expect(sent!.body.stream).toBe(true);
    if (api === 'responses') {
      expect(sent!.body).toMatchObject({
        model: 'fake-model',
        instructions: 'You are terse.',
        store: false,
        input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Say hello.' }] }],
        tools: [{ type: 'function', name: 'echo', description: 'Echoes.', parameters: request.tools[0]!.parameters, strict: false }],
        tool_choice: 'auto',
      });
    } else {
      expect(sent!.body).toMatchObject({
        model: 'fake-model',
        messages: [
          { role: 'system', content: 'You are terse.' },
          { role: 'user', content: 'Say hello.' },
        ],
        tools: [{ type: 'function', function: { name: 'echo', description: 'Echoes.', parameters: request.tools[0]!.parameters } }],
        stream_options: { include_usage: true },
      });
    }
  });

  it('a tool call split over many deltas: emitted once, complete, after the text', async () => {
    const args = { text: 'a long argument that arrives one character at a time', n: 42 };
    server.script({ text: 'Calling.', toolCalls: [{ name: 'echo', arguments: args, callId: 'call_abc' }], argsChunk: 1 });
    const events = await collect(run(api));
    const calls = events.filter((e) => e.type === 'tool_call');
    expect(calls).toEqual([{ type: 'tool_call', callId: 'call_abc', name: 'echo', arguments: JSON.stringify(args) }]);
    expect(events.findIndex((e) => e.type === 'tool_call')).toBeGreaterThan(events.findLastIndex((e) => e.type === 'text_delta'));
    expect(events.at(-1)).toMatchObject({ type: 'completed', finishReason: 'tool_use' });
  });

  it('several tool calls in one response: each complete, in provider order', async () => {
    server.script({
      toolCalls: [
        { name: 'echo', arguments: { text: 'one' }, callId: 'c1' },
        { name: 'echo', arguments: { text: 'two' }, callId: 'c2' },
        { name: 'list', arguments: {}, callId: 'c3' },
      ],
      argsChunk: 3,
    });
    const events = await collect(run(api));
    expect(events.filter((e) => e.type === 'tool_call')).toEqual([
      { type: 'tool_call', callId: 'c1', name: 'echo', arguments: '{"text":"one"}' },
      { type: 'tool_call', callId: 'c2', name: 'echo', arguments: '{"text":"two"}' },
      { type: 'tool_call', callId: 'c3', name: 'list', arguments: '{}' },
    ]);
  });

  it('reasoning: streamed as reasoning deltas before the answer', async () => {
    server.script({ reasoning: ['First I think.', 'Then I answer.'], text: 'Answer.', encryptedReasoning: 'gAAAA-secret', usage: { reasoningTokens: 5 } });
    const events = await collect(run(api, { reasoningEffort: 'low' }));
    const reasoning = events.flatMap((e) => (e.type === 'reasoning_delta' ? [e.delta] : [])).join('');
    expect(reasoning).toBe('First I think.\n\nThen I answer.');
    expect(events.findLastIndex((e) => e.type === 'reasoning_delta')).toBeLessThan(events.findIndex((e) => e.type === 'text_delta'));
    expect(events.at(-1)).toMatchObject({ type: 'completed', usage: { reasoningTokens: 5 } });
    const sent = server.requests[0]!.body;
    if (api === 'responses') {
      expect(sent.reasoning).toEqual({ effort: 'low', summary: 'auto' });
      expect(sent.include).toEqual(['reasoning.encrypted_content']);
      expect(events.filter((e) => e.type === 'provider_opaque')).toEqual([
        {
          type: 'provider_opaque',
          provider: RESPONSES_OPAQUE_PROVIDER,
          data: {
            item: {
              id: expect.stringMatching(/^rs_/),
              type: 'reasoning',
              summary: [
                { type: 'summary_text', text: 'First I think.' },
                { type: 'summary_text', text: 'Then I answer.' },
              ],
              encrypted_content: 'gAAAA-secret',
            },
          },
        },
      ]);
    } else {
      expect(sent.reasoning_effort).toBe('low');
      expect(events.some((e) => e.type === 'provider_opaque')).toBe(false);
    }
  });

  it('usage: input, output, cached input and reasoning tokens', async () => {
    server.script({ text: 'ok', usage: { inputTokens: 1200, outputTokens: 340, cachedInputTokens: 1024, reasoningTokens: 128 } });
    const events = await collect(run(api));
    expect(events.at(-1)).toMatchObject({ type: 'completed', usage: { inputTokens: 1200, outputTokens: 340, cachedInputTokens: 1024, reasoningTokens: 128 } });
  });

  it('429 then success: retried after retry-after, the attempt is reported, the answer streams', async () => {
    server.script(
      {
        status: 429,
        headers: { 'retry-after-ms': '30', 'x-ratelimit-limit-requests': '500', 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '1s' },
        body: { error: { message: 'Rate limit reached for requests', type: 'requests', code: 'rate_limit_exceeded' } },
      },
      { text: 'after the wait', headers: { 'x-ratelimit-limit-requests': '500', 'x-ratelimit-remaining-requests': '499', 'x-ratelimit-reset-requests': '120ms' } },
    );
    const m = model(api, { retryMaxDelayMs: 1_000 });
    const started = Date.now();
    const events = await collect(m.stream(request, { signal: new AbortController().signal }));
    expect(Date.now() - started).toBeGreaterThanOrEqual(25);
    // The wait the provider asked for is announced with the retry (a host shows "retry in N s").
    expect(events[0]).toEqual({ type: 'retry', attempt: 2, reason: expect.stringContaining('429'), delayMs: 30 });
    expect(text(events)).toBe('after the wait');
    expect(server.requests).toHaveLength(2);
    expect(server.requests[1]!.body).toEqual(server.requests[0]!.body);
    expect(m.rateLimits()).toMatchObject({ limitId: null, primary: { limit: 500, remaining: 499, usedPercent: 0.2 } });
  });

  it('500: retried a bounded number of times, then model_error with the status', async () => {
    server.script({ status: 500 }, { status: 502 }, { status: 503 });
    const { error, events } = await failure(run(api, { maxRetries: 2 }));
    expect(events).toEqual([
      { type: 'retry', attempt: 2, reason: expect.stringContaining('500'), delayMs: expect.any(Number) },
      { type: 'retry', attempt: 3, reason: expect.stringContaining('502'), delayMs: expect.any(Number) },
    ]);
    expect(error).toBeInstanceOf(ModelError);
    expect(error).toMatchObject({ code: 'model_error', semanticOutput: false, details: { httpStatus: 503, errorPhase: 'response_headers' } });
    expect(server.requests).toHaveLength(3);
  });

  it('a client error (401) is not retried', async () => {
    server.script({ status: 401, body: { error: { message: 'Incorrect API key provided', type: 'invalid_request_error', code: 'invalid_api_key' } } });
    const { error, events } = await failure(run(api));
    expect(events).toEqual([]);
    expect(error).toMatchObject({ code: 'model_error', details: { httpStatus: 401, providerCode: 'invalid_api_key' } });
    expect(server.requests).toHaveLength(1);
  });

  it('the connection cut mid-stream: model_error after semantic output, not retried', async () => {
    server.script({ text: 'This answer will be cut off', chunk: 2, cutAfterEvents: 6 });
    const { error, events } = await failure(run(api));
    expect(text(events).length).toBeGreaterThan(0);
    expect(events.some((e) => e.type === 'completed')).toBe(false);
    expect(error).toBeInstanceOf(ModelError);
    expect(error).toMatchObject({ code: 'model_error', semanticOutput: true, details: { errorPhase: 'response_body', deliveryState: 'semantic_output_emitted' } });
    expect(server.requests).toHaveLength(1);
  });

  it('the connection reset before any output: retried', async () => {
    server.script({ text: 'never seen', cutAfterEvents: 1 }, { text: 'second try' });
    const events = await collect(run(api));
    expect(events[0]).toMatchObject({ type: 'retry', attempt: 2 });
    expect(text(events)).toBe('second try');
    expect(server.requests).toHaveLength(2);
  });

  it('the stream ending without its completion: model_protocol_error', async () => {
    server.script({ text: 'no end', omitCompletion: true });
    const { error, events } = await failure(run(api));
    expect(text(events)).toBe('no end');
    expect(error).toMatchObject({ code: 'model_protocol_error', semanticOutput: true });
    expect((error as Error).message).toContain('without a completed response');
  });

  it('two completions: model_protocol_error, and no completion is emitted', async () => {
    server.script({ text: 'twice', doubleCompletion: true });
    const { error, events } = await failure(run(api));
    expect(events.some((e) => e.type === 'completed')).toBe(false);
    expect(error).toMatchObject({ code: 'model_protocol_error' });
    expect((error as Error).message).toMatch(/twice/);
  });

  it('a context-length error: context_overflow without semantic output, not retried', async () => {
    server.script(CONTEXT_LENGTH_ERROR);
    const { error, events } = await failure(run(api));
    expect(events).toEqual([]);
    expect(error).toBeInstanceOf(ModelError);
    expect(error).toMatchObject({ code: 'context_overflow', semanticOutput: false, retryable: false, details: { httpStatus: 400, providerCode: 'context_length_exceeded' } });
    expect(server.requests).toHaveLength(1);
  });

  it('a context-length failure inside the stream after output: context_overflow with semantic output', async () => {
    server.script({ text: 'partial', failWith: { code: 'context_length_exceeded', message: 'Your input exceeds the context window of this model.' } });
    const { error, events } = await failure(run(api));
    expect(text(events)).toBe('partial');
    expect(error).toMatchObject({ code: 'context_overflow', semanticOutput: true });
  });

  it('an abort mid-stream: ends with the signal reason, not a ModelError', async () => {
    server.script({ text: 'streaming forever', chunk: 2, hangAfterEvents: 5 });
    const abortsBefore = server.clientAborts;
    const controller = new AbortController();
    const reason = new Error('cancelled by the user');
    const events: ModelStreamEvent[] = [];
    let caught: unknown;
    try {
      for await (const event of model(api).stream(request, { signal: controller.signal })) {
        events.push(event);
        if (events.length === 1) setTimeout(() => controller.abort(reason), 10);
      }
    } catch (error) {
      caught = error;
    }
    expect(caught).toBe(reason);
    expect(text(events).length).toBeGreaterThan(0);
    await expect.poll(() => server.clientAborts).toBeGreaterThan(abortsBefore);
  });

  it('a stream that stalls: model_error once the idle timeout passes (retried only before output)', async () => {
    server.script({ text: 'and then nothing', chunk: 4, hangAfterEvents: api === 'responses' ? 6 : 3 });
    const abortsBefore = server.clientAborts;
    const { error, events } = await failure(run(api, { streamIdleTimeoutMs: 150 }));
    expect(text(events).length).toBeGreaterThan(0);
    expect(error).toMatchObject({ code: 'model_error', semanticOutput: true, details: { errorPhase: 'response_body' } });
    expect((error as Error).message).toMatch(/stalled: no event for 150 ms/);
    await expect.poll(() => server.clientAborts).toBeGreaterThan(abortsBefore);
  });

  it('an abort during the retry backoff ends with the signal reason', async () => {
    server.script({ status: 429, headers: { 'retry-after': '30' } });
    const controller = new AbortController();
    const reason = new Error('stop waiting');
    const events: ModelStreamEvent[] = [];
    let caught: unknown;
    try {
      for await (const event of model(api, { retryMaxDelayMs: 60_000 }).stream(request, { signal: controller.signal })) {
        events.push(event);
        controller.abort(reason);
      }
    } catch (error) {
      caught = error;
    }
    expect(events).toEqual([{ type: 'retry', attempt: 2, reason: expect.stringContaining('429'), delayMs: expect.any(Number) }]);
    expect(caught).toBe(reason);
  });

  it('a tool call without an id is a protocol error; arguments that are not JSON are passed through', async () => {
    server.script({ toolCalls: [{ name: 'echo', arguments: '{"text": "unterminated', callId: 'c9' }] });
    const events = await collect(run(api));
    expect(events.filter((e) => e.type === 'tool_call')).toEqual([{ type: 'tool_call', callId: 'c9', name: 'echo', arguments: '{"text": "unterminated' }]);
    server.script({ toolCalls: [{ name: 'echo', arguments: {}, callId: null }] });
    const { error } = await failure(run(api));
    expect(error).toMatchObject({ code: 'model_protocol_error' });
    expect((error as Error).message).toMatch(/id/);
  });

  it('builds the conversation: contextual user messages, assistant calls, every result status, the synthesized interrupted result', async () => {
    const conversation: ModelRequest = {
      system: [
        { key: 'a', content: 'Part A.' },
        { key: 'b', content: 'Part B.' },
      ],
      messages: [
        { role: 'user', kind: 'world_state', content: [{ type: 'text', text: '<world>cwd=/tmp</world>' }] },
        { role: 'user', kind: 'normal', content: [{ type: 'text', text: 'Do four things.' }] },
        {
          role: 'assistant',
          content: [
            { type: 'reasoning', text: 'thinking' },
            { type: 'text', text: 'On it.' },
            { type: 'provider_opaque', provider: RESPONSES_OPAQUE_PROVIDER, data: { item: { id: 'rs_9', type: 'reasoning', summary: [], encrypted_content: 'enc', status: 'completed' } } },
            { type: 'provider_opaque', provider: 'another.provider', data: { anything: true } },
            // A second output message (its own text block, with the Responses API's phase).
            { type: 'text', text: 'Second.', phase: 'final_answer' },
            // Without encrypted content (no `include`), an unstored item cannot be sent back.
            { type: 'provider_opaque', provider: RESPONSES_OPAQUE_PROVIDER, data: { item: { id: 'rs_10', type: 'reasoning', summary: [] } } },
            { type: 'tool_call', callId: 'c1', name: 'echo', arguments: '{"text":"1"}' },
            { type: 'tool_call', callId: 'c2', name: 'echo', arguments: '{"text":"2"}' },
            { type: 'tool_call', callId: 'c3', name: 'echo', arguments: '{"text":"3"}' },
            { type: 'tool_call', callId: 'c4', name: 'echo', arguments: '{"text":"4"}' },
          ],
        },
        { role: 'tool', callId: 'c1', toolName: 'echo', status: 'success', text: '1' },
        { role: 'tool', callId: 'c2', toolName: 'echo', status: 'error', text: 'boom' },
        { role: 'tool', callId: 'c3', toolName: 'echo', status: 'denied', text: 'the user refused' },
        { role: 'tool', callId: 'c4', toolName: 'echo', status: 'interrupted', text: INTERRUPTED_RESULT_TEXT, synthetic: true },
        { role: 'user', kind: 'agent_message', content: [{ type: 'text', text: '<agent_message>done</agent_message>' }] },
      ],
      tools: [],
      maxOutputTokens: 256,
    };
    server.script({ text: 'ok' });
    await collect(run(api, {}, conversation));
    const body = server.requests[0]!.body;
    expect(body.tools).toBeUndefined();
    if (api === 'responses') {
      expect(body.instructions).toBe('Part A.\n\nPart B.');
      expect(body.max_output_tokens).toBe(256);
      expect(body.input).toEqual([
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: '<world>cwd=/tmp</world>' }] },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Do four things.' }] },
        { type: 'reasoning', summary: [], encrypted_content: 'enc' },
        { role: 'assistant', content: 'On it.' },
        { role: 'assistant', content: 'Second.', phase: 'final_answer' },
        { type: 'function_call', call_id: 'c1', name: 'echo', arguments: '{"text":"1"}' },
        { type: 'function_call', call_id: 'c2', name: 'echo', arguments: '{"text":"2"}' },
        { type: 'function_call', call_id: 'c3', name: 'echo', arguments: '{"text":"3"}' },
        { type: 'function_call', call_id: 'c4', name: 'echo', arguments: '{"text":"4"}' },
        { type: 'function_call_output', call_id: 'c1', output: '1' },
        { type: 'function_call_output', call_id: 'c2', output: '[error] boom' },
        { type: 'function_call_output', call_id: 'c3', output: '[denied] the user refused' },
        { type: 'function_call_output', call_id: 'c4', output: `[interrupted] ${INTERRUPTED_RESULT_TEXT}` },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: '<agent_message>done</agent_message>' }] },
      ]);
    } else {
      expect(body.max_tokens).toBe(256);
      expect(body.messages).toEqual([
        { role: 'system', content: 'Part A.\n\nPart B.' },
        { role: 'user', content: '<world>cwd=/tmp</world>' },
        { role: 'user', content: 'Do four things.' },
        {
          role: 'assistant',
          content: 'On it.\n\nSecond.',
          tool_calls: ['1', '2', '3', '4'].map((n) => ({ id: `c${n}`, type: 'function', function: { name: 'echo', arguments: `{"text":"${n}"}` } })),
        },
        { role: 'tool', tool_call_id: 'c1', content: '1' },
        { role: 'tool', tool_call_id: 'c2', content: '[error] boom' },
        { role: 'tool', tool_call_id: 'c3', content: '[denied] the user refused' },
        { role: 'tool', tool_call_id: 'c4', content: `[interrupted] ${INTERRUPTED_RESULT_TEXT}` },
        { role: 'user', content: '<agent_message>done</agent_message>' },
      ]);
    }
  });
});

describe('openaiModel specifics', () => {
  it('Responses: a length-limited response completes with finishReason length', async () => {
    server.script({ text: 'cut short', incomplete: 'max_output_tokens' });
    const events = await collect(run('responses'));
    expect(events.at(-1)).toMatchObject({ type: 'completed', finishReason: 'length' });
  });

  it('Responses with store: reasoning items go back by id', async () => {
    const history: ModelRequest = {
      ...request,
      messages: [
        ...request.messages,
        { role: 'assistant', content: [{ type: 'provider_opaque', provider: RESPONSES_OPAQUE_PROVIDER, data: { item: { id: 'rs_1', type: 'reasoning', summary: [], status: 'completed' } } }, { type: 'text', text: 'hi' }] },
        { role: 'user', kind: 'normal', content: [{ type: 'text', text: 'again' }] },
      ],
    };
    server.script({ text: 'ok' });
    await collect(run('responses', { store: true }, history));
    const body = server.requests[0]!.body;
    expect(body.store).toBe(true);
    expect((body.input as unknown[]).slice(1, 3)).toEqual([{ id: 'rs_1', type: 'reasoning', summary: [] }, { role: 'assistant', content: 'hi' }]);
  });

  it('Responses: a server_error failure before output is retried', async () => {
    server.script({ failWith: { code: 'server_error', message: 'The server had an error.' } }, { text: 'fine' });
    const events = await collect(run('responses'));
    expect(kinds(events)).toEqual(['retry', 'text_delta', 'completed']);
  });

  it('Chat: reasoning arrives as reasoning_content deltas of a compatible server', async () => {
    server.script({ reasoning: 'hmm', text: 'yes' });
    const events = await collect(run('chat'));
    expect(events.filter((e) => e.type === 'reasoning_delta')).toEqual([{ type: 'reasoning_delta', delta: 'hmm' }]);
  });

  it('Chat: OpenAI takes max_completion_tokens', async () => {
    let sent: Record<string, unknown> = {};
    const m = openaiModel({
      model: 'gpt-x',
      api: 'chat',
      apiKey: 'sk',
      maxOutputTokens: 99,
      fetch: async (url, init) => {
        sent = JSON.parse(String(init?.body));
        return fetch(String(url).replace('https://api.openai.com/v1', server.url), init);
      },
    });
    server.script({ text: 'ok' });
    await collect(m.stream(request, { signal: new AbortController().signal }));
    expect(sent.max_completion_tokens).toBe(99);
    expect(sent.max_tokens).toBeUndefined();
    expect(m.id).toBe('openai/gpt-x');
  });

  it('an unreachable server: model_error naming the address, after bounded retries', async () => {
    const port = await closedPort();
    const m = openaiModel({ model: 'm', api: 'chat', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 1, retryBaseDelayMs: 1 });
    const { error, events } = await failure(m.stream(request, { signal: new AbortController().signal }));
    expect(events).toEqual([{ type: 'retry', attempt: 2, reason: expect.stringContaining('cannot reach'), delayMs: expect.any(Number) }]);
    expect(error).toMatchObject({ code: 'model_error', details: { errorPhase: 'connect', deliveryState: 'not_sent' } });
    expect((error as Error).message).toBe(`cannot reach http://127.0.0.1:${port}/v1 (ECONNREFUSED)`);
  });

  describe('environment defaults', () => {
    const saved: Record<string, string | undefined> = {};
    beforeEach(() => {
      for (const key of ['OPENAI_API_KEY', 'OPENAI_BASE_URL']) saved[key] = process.env[key];
    });
    afterEach(() => {
      for (const [key, value] of Object.entries(saved)) {
        if (value === undefined) delete process.env[key];
        else process.env[key] = value;
      }
    });

    it.each(['responses', 'chat'] as const)('apiKey and baseURL default to OPENAI_API_KEY and OPENAI_BASE_URL (%s)', async (api) => {
      process.env.OPENAI_API_KEY = ' sk-from-env ';
      process.env.OPENAI_BASE_URL = `${server.url}/`;
      const m = openaiModel({ model: 'fake-model', api, retryBaseDelayMs: 1 });
      expect(m.baseURL).toBe(server.url);
      server.script({ text: 'from the environment' });
      const events = await collect(m.stream(request, { signal: new AbortController().signal }));
      expect(text(events)).toBe('from the environment');
      expect(server.requests).toHaveLength(1);
      expect(server.requests[0]!.path).toBe(api === 'responses' ? '/v1/responses' : '/v1/chat/completions');
      expect(server.requests[0]!.headers.authorization).toBe('Bearer sk-from-env');
    });

    it('explicit options win over the environment', async () => {
      const port = await closedPort();
      process.env.OPENAI_API_KEY = 'sk-from-env';
      process.env.OPENAI_BASE_URL = `http://127.0.0.1:${port}/v1`;
      const m = openaiModel({ model: 'fake-model', api: 'chat', apiKey: 'sk-explicit', baseURL: server.url });
      server.script({ text: 'explicit' });
      expect(text(await collect(m.stream(request, { signal: new AbortController().signal })))).toBe('explicit');
      expect(server.requests[0]!.headers.authorization).toBe('Bearer sk-explicit');
    });

    it('blank variables count as unset: OpenAI itself then needs a key, and the default endpoint is OpenAI', () => {
      process.env.OPENAI_API_KEY = '   ';
      process.env.OPENAI_BASE_URL = ' ';
      expect(() => openaiModel({ model: 'gpt-x' })).toThrow(expect.objectContaining({ code: 'invalid_request' }));
      process.env.OPENAI_API_KEY = 'sk-real';
      expect(openaiModel({ model: 'gpt-x' }).baseURL).toBe('https://api.openai.com/v1');
    });
  });

  it('no key for OpenAI itself: invalid_request at construction; a custom endpoint needs none', () => {
    const saved = process.env.OPENAI_API_KEY;
    delete process.env.OPENAI_API_KEY;
    try {
      expect(() => openaiModel({ model: 'gpt-x', baseURL: 'https://api.openai.com/v1' })).toThrow(InputError);
      expect(() => openaiModel({ model: 'gpt-x', baseURL: 'https://api.openai.com/v1' })).toThrow(/OPENAI_API_KEY/);
      expect(openaiModel({ model: 'llama', baseURL: server.url, api: 'chat', provider: 'ollama' }).id).toBe('ollama/llama');
      expect(() => openaiModel({ model: '' })).toThrow(InputError);
    } finally {
      if (saved !== undefined) process.env.OPENAI_API_KEY = saved;
    }
  });
});
