import { createCore, defineTool, pgliteStorage } from 'openwork-core';
import { scriptedModel } from 'openwork-core/testing';
import { z } from 'zod';

const weather = defineTool({
  name: 'weather',
  description: 'The weather in a city.',
  parameters: z.object({ city: z.string() }),
  execute: ({ city }) => `sunny in ${city}`,
});

const core = await createCore({
  storage: pgliteStorage(), // in memory; pgliteStorage({ dataDir }) or postgresStorage() to keep it
  model: scriptedModel([{ toolCalls: [{ name: 'weather', arguments: { city: 'Lyon' } }] }, { text: 'Sunny in Lyon.' }]),
  tools: [weather], // the model is offered exactly this tool
});
const session = await core.createSession(); // no file tools, so no working directory needed

const { outcome, text, usage } = await session.run('Weather in Lyon?');
console.log(outcome.status, text, usage.inputTokens > 0); // completed Sunny in Lyon. true
console.log(session.snapshot().usage.outputTokens === usage.outputTokens); // true
await core.shutdown();
