import { createCore, pgliteStorage } from 'openwork-core';
import { scriptedModel } from 'openwork-core/testing';

const core = await createCore({ storage: pgliteStorage(), model: scriptedModel([{ text: 'Hello, streaming world.' }]) });
const session = await core.createSession();

let text = '';
for await (const { update } of session.stream('Say hello')) {
  if (update.type === 'text_delta') text += update.delta; // live, as the model writes
  if (update.type === 'turn_finished') console.log(update.outcome.status, text); // completed Hello, streaming world.
}
await core.shutdown();
