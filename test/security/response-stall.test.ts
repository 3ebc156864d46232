/**
 * Trust-stall: one model response of about 12 MB of tool-call arguments (under the 16 Mi response
 * bound, each call under the 4 Mi argument bound) must not freeze the host. The runtime handled it
 * in one chain of promises (the stream's events, the checks, the commit, the doom-loop signature,
 * each call's validation), so no timer of any other session ran for about a second; the doom-loop
 * guard serialised each call's arguments again at every ask. Now the actors yield between slices
 * (services/host-slice) and the signature is made once per call.
 *
 * The stall is measured against a unit taken on the same machine around the turn: one pass over
 * the response (its arguments serialised and measured as UTF-8, what one commit or one request does
 * with it). Load slows both alike; the sliced turn still holds the loop for a pass or two at a time
 * (the commit's one statement, the next request's body), the unsliced one for about five.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore } from '../../src/core.js';
import { defineTool } from '../../src/services/tools/define.js';
import { openaiModel } from '../../src/services/model/openai.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import type { ModelPort } from '../../src/services/model/port.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { backends, useBackend } from '../support/databases.js';
import { longestStall } from '../support/event-loop.js';
import { startFakeOpenAI, type FakeOpenAIServer } from '../support/fake-openai-server.js';

let storage: SqlSessionStorage;
useBackend(backends.find((b) => b.name === 'postgres')!, (s) => (storage = s));

let server: FakeOpenAIServer;
beforeAll(async () => {
  server = await startFakeOpenAI();
});
afterAll(async () => {
  await server.close();
});

const CALLS = 3;
const CHARS = 3_900_000;
const bigCalls = () => Array.from({ length: CALLS }, (_, i) => ({ name: 'sink', arguments: { data: String.fromCharCode(97 + i).repeat(CHARS) } }));

/** Given, so that the scripted model does not estimate a 12 MB request itself (a cost of the fake). */
const USAGE = { inputTokens: 10, outputTokens: 10 };

const sink = defineTool({
  name: 'sink',
  description: 'Takes data.',
  parameters: z.object({ data: z.string() }),
  execute: ({ data }) => `got ${data.length} characters`,
});

/**
 * One pass over the response on this machine, now: its arguments serialised and measured as UTF-8
 * (what a commit or a request does with it once), the least of three.
 */
function unitMs(): number {
  const calls = bigCalls();
  let best = Infinity;
  for (let i = 0; i < 3; i += 1) {
    const start = performance.now();
    Buffer.byteLength(JSON.stringify(calls));
    best = Math.min(best, performance.now() - start);
  }
  return best;
}

async function stallOfTurn(model: ModelPort): Promise<{ stallMs: number; unit: number; results: string[]; status: string }> {
  const core = await createCore({ storage, model, tools: [sink], agents: false, worldState: false, closeStorageOnShutdown: false });
  try {
    const session = await core.createSession({ workingDirectory: process.cwd() });
    const before = unitMs();
    const { value: outcome, stallMs } = await longestStall(async () => {
      const { turnId } = await session.startTurn({ clientRequestId: `stall-${Math.random()}`, input: [{ type: 'text', text: 'go' }] });
      return session.waitForTurn(turnId);
    });
    const unit = Math.min(before, unitMs());
    const messages = await storage.listMessages(session.sessionId);
    const results = messages.flatMap((m) => m.content).flatMap((b) => (b.type === 'tool_result' ? [b.text] : []));
    return { stallMs, unit, results, status: outcome.status };
  } finally {
    await core.shutdown();
  }
}

describe('a 12 MB model response does not freeze the host (trust-stall)', () => {
  it('through the scripted model: three calls of 3.9 Mi characters run, and the loop keeps ticking', async () => {
    const model = scriptedModel([{ toolCalls: bigCalls(), usage: USAGE }, { text: 'done', usage: USAGE }], { record: false });
    const { stallMs, unit, results, status } = await stallOfTurn(model);
    expect(status).toBe('completed');
    expect(results).toEqual(Array.from({ length: CALLS }, () => `got ${CHARS} characters`));
    // Measured at load 11-14: unsliced 1,047-1,388 ms (4.9 units); sliced 522-530 ms (1.8 units).
    expect(stallMs, `longest stall ${stallMs} ms, unit ${unit.toFixed(1)} ms`).toBeLessThan(Math.max(250, 4 * unit));
  }, 60_000);

  it('through the OpenAI adapter (Chat Completions wire, local server): the same response, the loop keeps ticking', async () => {
    server.script({ toolCalls: bigCalls(), argsChunk: 64 * 1024, flushEvery: 16 }, { text: 'done' });
    const model = openaiModel({ model: 'fake-model', api: 'chat', baseURL: server.url, apiKey: 'sk-test' });
    const { stallMs, unit, results, status } = await stallOfTurn(model);
    expect(status).toBe('completed');
    expect(results).toEqual(Array.from({ length: CALLS }, () => `got ${CHARS} characters`));
    // The fake server runs in this process and renders the 12 MB too, so this bound is a guard
    // against a regression, not the attack's proof (unsliced 6.6 units, sliced 3.8, at load 11-14).
    expect(stallMs, `longest stall ${stallMs} ms, unit ${unit.toFixed(1)} ms`).toBeLessThan(Math.max(250, 8 * unit));
  }, 60_000);
});
