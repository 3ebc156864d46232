/**
 * Every provider wire shape of `test/fixtures/wire/` replayed through the fake HTTP server into
 * `openaiModel` (the real `openai` client) on each API it applies to: the port events must be the
 * fixture's, whole, and a failure the fixture's `ModelError`. A fixture whose failure is retryable
 * is replayed once more with a retry allowed: the retry must be taken and the next answer stream.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ModelError } from '../../../src/errors.js';
import { openaiModel } from '../../../src/services/model/openai.js';
import type { ModelRequest, ModelStreamEvent } from '../../../src/services/model/port.js';
import { startFakeOpenAI, type FakeOpenAIServer } from '../../support/fake-openai-server.js';
import { loadWireFixtures, rawReply } from '../../support/wire-fixtures.js';

let server: FakeOpenAIServer;
beforeAll(async () => {
  server = await startFakeOpenAI();
});
afterAll(async () => {
  await server.close();
});
beforeEach(() => {
  server.reset();
});

const request: ModelRequest = {
  system: [{ key: 'core/agent-system', content: 'You are terse.' }],
  messages: [{ role: 'user', kind: 'normal', content: [{ type: 'text', text: 'Go.' }] }],
  tools: [{ name: 'echo', description: 'Echoes.', parameters: { type: 'object', properties: { text: { type: 'string' } } } }],
};

async function replay(api: 'responses' | 'chat', maxRetries: number): Promise<{ events: ModelStreamEvent[]; error: unknown }> {
  const model = openaiModel({ model: 'fake-model', api, baseURL: server.url, apiKey: 'sk-test', maxRetries, retryBaseDelayMs: 1, retryMaxDelayMs: 5 });
  const events: ModelStreamEvent[] = [];
  try {
    for await (const event of model.stream(request, { signal: new AbortController().signal })) events.push(event);
  } catch (error) {
    return { events, error };
  }
  return { events, error: undefined };
}

const fixtures = loadWireFixtures();
const cases = fixtures.flatMap((fixture) => fixture.apis.map((api) => ({ name: `${fixture.name} (${api})`, fixture, api })));

describe('provider wire shapes replayed into openaiModel', () => {
  it('the fixtures cover both APIs, the providers of issue 18 and every failure kind', () => {
    const names = fixtures.map((f) => f.name);
    for (const shape of ['openai', 'azure', 'deepseek', 'groq', 'xai', 'mistral', 'cerebras', 'perplexity', 'glm', 'alibaba', 'lmstudio']) {
      expect(names.some((n) => n.startsWith('chat-') && n.includes(shape)), shape).toBe(true);
    }
    for (const shape of ['reasoning-encrypted', 'web-search', 'tool-search', 'mcp', 'commentary-then-answer', 'error-nested', 'error-top-level', 'json-answer']) {
      expect(names.some((n) => n.startsWith('responses-') && n.includes(shape)), shape).toBe(true);
    }
    expect(names.filter((n) => n.startsWith('http-html-'))).toHaveLength(3);
  });

  it.each(cases)('$name', async ({ fixture, api }) => {
    server.script(rawReply(fixture));
    const { events, error } = await replay(api, 0);
    expect(events).toEqual(fixture.expect.events);
    if (fixture.expect.error === undefined) {
      expect(error).toBeUndefined();
    } else {
      expect(error).toBeInstanceOf(ModelError);
      const e = error as ModelError;
      expect({ code: e.code, message: e.message, retryable: e.retryable, semanticOutput: e.semanticOutput, details: e.details }).toEqual(fixture.expect.error);
    }
    expect(server.requests).toHaveLength(1);
    expect(server.requests[0]!.body.stream).toBe(true);
  });

  const retryable = cases.filter((c) => c.fixture.expect.error?.retryable === true);
  it.each(retryable)('retried before any output: $name', async ({ fixture, api }) => {
    server.script(rawReply(fixture), { text: 'second try' });
    const { events, error } = await replay(api, 1);
    expect(error).toBeUndefined();
    expect(events[0]).toEqual({ type: 'retry', attempt: 2, reason: fixture.expect.error!.message, delayMs: expect.any(Number) });
    expect(events.slice(1).flatMap((e) => (e.type === 'text_delta' ? [e.delta] : [])).join('')).toBe('second try');
    expect(events.at(-1)).toMatchObject({ type: 'completed', finishReason: 'stop' });
    expect(server.requests).toHaveLength(2);
  });
});
