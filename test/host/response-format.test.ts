/**
 * Issue 16.3: `outputSchema` reaches the provider on the real wire. The real `openai` client against
 * the fake OpenAI server: Chat Completions gets `response_format: { type: 'json_schema' }` and the
 * Responses API gets `text.format`, with the zod schema as JSON Schema; the answer is parsed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore } from '../../src/core.js';
import { openaiModel } from '../../src/services/model/openai.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { startFakeOpenAI, type FakeOpenAIServer } from '../support/fake-openai-server.js';
import { usePglite } from '../support/databases.js';

describe.each(['chat', 'responses'] as const)('outputSchema on the %s wire', (api) => {
  let storage: SqlSessionStorage;
  let server: FakeOpenAIServer;
  usePglite((s) => (storage = s));
  beforeAll(async () => {
    server = await startFakeOpenAI();
  });
  afterAll(async () => {
    await server.close();
  });

  it('sends the JSON schema and returns the typed answer', async () => {
    server.script({ text: '{"city":"Lyon","celsius":21}' }, { text: 'free text' });
    const model = openaiModel({ model: 'fake-model', api, baseURL: server.url, apiKey: 'sk-test', retryBaseDelayMs: 1, retryMaxDelayMs: 20 });
    const core = await createCore({ storage, model, closeStorageOnShutdown: false, worldState: false });
    try {
      const session = await core.createSession();
      const Weather = z.object({ city: z.string(), celsius: z.number() });
      const result = await session.run('weather?', { outputSchema: Weather });
      expect(result.output).toEqual({ city: 'Lyon', celsius: 21 });
      const body = server.requests[0]!.body;
      const schema = { type: 'object', properties: { city: { type: 'string' }, celsius: { type: 'number' } }, required: ['city', 'celsius'] };
      if (api === 'chat') {
        expect(body.response_format).toMatchObject({ type: 'json_schema', json_schema: { name: 'final_answer', strict: false, schema } });
      } else {
        expect(body.text).toMatchObject({ format: { type: 'json_schema', name: 'final_answer', strict: false, schema } });
      }
      // A turn without a schema sends none.
      await session.run('anything');
      expect(server.requests[1]!.body.response_format).toBeUndefined();
      expect(server.requests[1]!.body.text).toBeUndefined();
    } finally {
      await core.shutdown();
    }
  });
});
