import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createCore, pgliteStorage, toSSE } from 'openwork-core';
import { scriptedModel } from 'openwork-core/testing';

const core = await createCore({ storage: pgliteStorage(), model: scriptedModel([{ text: 'Hi over HTTP.' }]) });
const session = await core.createSession();

// POST / streams one turn as Server-Sent Events; a client that disconnects cancels the turn.
// (With a web framework: `return toResponse(session.stream(text))`.)
const server = createServer(async (req, res) => {
  let text = '';
  for await (const chunk of req) text += chunk;
  await toSSE(session.stream(text), res);
});
server.listen(0);
await new Promise((resolve) => server.once('listening', resolve));

const response = await fetch(`http://localhost:${(server.address() as AddressInfo).port}/`, { method: 'POST', body: 'hello' });
const events = (await response.text()).split('\n\n').filter(Boolean);
const last = JSON.parse(events.at(-1)!.split('\n').find((l) => l.startsWith('data: '))!.slice(6));
console.log(response.headers.get('content-type'), last.update.type); // text/event-stream; charset=utf-8 turn_finished
server.close();
await core.shutdown();
