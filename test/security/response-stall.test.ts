/**
 * Trust-stall: one model response of about 12 MB of tool-call arguments (under the 16 Mi response
 * bound, each call under the 4 Mi argument bound) must not freeze the host. The runtime handled it
 * in one chain of promises (the stream's events, the checks, the commit, the doom-loop signature,
 * each call's validation), so no timer of any other session ran for about a second; the doom-loop
 * guard serialised each call's arguments again at every ask. Now the actors yield between slices
 * (services/host-slice) and the signature is made once per call.
 *
 * The stall is read in the process's CPU time between two ticks of a 20 ms timer
 * (`longestCpuStall`): a machine so loaded that the process waits for a core does not count, a
 * synchronous stretch of the host does.
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
import { longestCpuStall } from '../support/event-loop.js';
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

async function stallOfTurn(model: ModelPort): Promise<{ stallMs: number; wallStallMs: number; results: string[]; status: string }> {
  const core = await createCore({ storage, model, tools: [sink], agents: false, worldState: false, closeStorageOnShutdown: false });
  try {
    const session = await core.createSession({ workingDirectory: process.cwd() });
    const { value: outcome, stallMs, wallStallMs } = await longestCpuStall(async () => {
      const { turnId } = await session.startTurn({ clientRequestId: `stall-${Math.random()}`, input: [{ type: 'text', text: 'go' }] });
      return session.waitForTurn(turnId);
    });
    const messages = await storage.listMessages(session.sessionId);
    const results = messages.flatMap((m) => m.content).flatMap((b) => (b.type === 'tool_result' ? [b.text] : []));
    return { stallMs, wallStallMs, results, status: outcome.status };
  } finally {
    await core.shutdown();
  }
}

describe('a 12 MB model response does not freeze the host (trust-stall)', () => {
  it('through the scripted model: three calls of 3.9 Mi characters run, and the loop keeps ticking', async () => {
    const model = scriptedModel([{ toolCalls: bigCalls(), usage: USAGE }, { text: 'done', usage: USAGE }], { record: false });
    const { stallMs, wallStallMs, results, status } = await stallOfTurn(model);
    expect(status).toBe('completed');
    expect(results).toEqual(Array.from({ length: CALLS }, () => `got ${CHARS} characters`));
    // Measured at load 11-15: unsliced 335-338 ms of CPU (wall 1.0-1.4 s); sliced 198 ms (wall 0.5 s).
    expect(stallMs, `longest stall ${stallMs.toFixed(0)} ms of CPU (wall ${wallStallMs} ms)`).toBeLessThan(300);
  }, 60_000);

  it('through the OpenAI adapter (Chat Completions wire, local server): the same response, the loop keeps ticking', async () => {
    server.script({ toolCalls: bigCalls(), argsChunk: 64 * 1024, flushEvery: 16 }, { text: 'done' });
    const model = openaiModel({ model: 'fake-model', api: 'chat', baseURL: server.url, apiKey: 'sk-test' });
    const { stallMs, wallStallMs, results, status } = await stallOfTurn(model);
    expect(status).toBe('completed');
    expect(results).toEqual(Array.from({ length: CALLS }, () => `got ${CHARS} characters`));
    // The fake server runs in this process and renders the 12 MB too, so this bound guards against
    // a gross regression (a multi-second stall) and is not the attack's proof; a quiet clean-clone
    // rehearsal read 500 ms here, so the bound is not tight (unsliced 282 ms of CPU, sliced 245, at load 11-15).
    expect(stallMs, `longest stall ${stallMs.toFixed(0)} ms of CPU (wall ${wallStallMs} ms)`).toBeLessThan(1_500);
  }, 60_000);
});
