/**
 * Issue 13, point 3: the model port is a trust boundary. A `ModelPort` written by a host may yield
 * anything; each bad event below (a completion without usage or with NaN usage, a tool call with no
 * call id or an empty name, text after the completion, a null event) ends the call as
 * `model_protocol_error` before any tool runs, writes no assistant message, and leaves the session
 * ready for its next turn. The compaction summary call checks its stream the same way.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore, type Core } from '../../../src/core.js';
import { OpenworkError } from '../../../src/errors.js';
import type { ModelPort, ModelRequest, ModelStreamEvent } from '../../../src/services/model/port.js';
import { defineTool } from '../../../src/services/tools/define.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { usePglite } from '../../support/databases.js';
import { isSummaryRequest, validSummary } from '../../support/summaries.js';

let storage: SqlSessionStorage;
const cores: Core[] = usePglite((s) => {
  storage = s;
});

const USAGE = { inputTokens: 5, outputTokens: 3, cachedInputTokens: 0, reasoningTokens: 0 };

/** Every run of the spy tool, per session. */
const runs = new Map<string, number>();
const spyTool = defineTool({
  name: 'spy',
  description: 'Records that it ran.',
  parameters: z.object({}),
  execute: (_args, ctx) => {
    runs.set(ctx.sessionId, (runs.get(ctx.sessionId) ?? 0) + 1);
    return 'ran';
  },
});

/**
 * A hand-written port, as a host might write one: the first turn request plays `first` as is
 * (typed `unknown[]`, so anything can be yielded); every later request answers `fine`.
 */
function hostilePort(first: unknown[], summary?: unknown[]): ModelPort & { requests: ModelRequest[] } {
  const requests: ModelRequest[] = [];
  let turnCalls = 0;
  return {
    id: 'hostile/test',
    providerId: 'hostile',
    model: 'test',
    contextWindow: 100_000,
    requests,
    async *stream(request) {
      requests.push(request);
      if (isSummaryRequest(request)) {
        for (const event of summary ?? []) yield event as ModelStreamEvent;
        return;
      }
      turnCalls += 1;
      const events: unknown[] = turnCalls === 1 ? first : [{ type: 'text_delta', delta: 'fine' }, { type: 'completed', usage: USAGE }];
      for (const event of events) yield event as ModelStreamEvent;
    },
  };
}

const spyCall = { type: 'tool_call', callId: 'call_1', name: 'spy', arguments: '{}' };

const cases: Array<{ name: string; events: unknown[] }> = [
  { name: 'a completion without usage', events: [spyCall, { type: 'completed' }] },
  { name: 'a completion with NaN usage', events: [spyCall, { type: 'completed', usage: { ...USAGE, outputTokens: Number.NaN } }] },
  { name: 'a tool call with no call id', events: [{ type: 'tool_call', name: 'spy', arguments: '{}' }, { type: 'completed', usage: USAGE }] },
  { name: 'a tool call with an empty call id', events: [{ ...spyCall, callId: '' }, { type: 'completed', usage: USAGE }] },
  { name: 'a tool call with an empty name', events: [spyCall, { ...spyCall, callId: 'call_2', name: '' }, { type: 'completed', usage: USAGE }] },
  { name: 'text after the completion', events: [spyCall, { type: 'completed', usage: USAGE }, { type: 'text_delta', delta: 'late' }] },
  { name: 'a null event', events: [spyCall, null, { type: 'completed', usage: USAGE }] },
  { name: 'an event of an unknown type', events: [spyCall, { type: 'surprise' }, { type: 'completed', usage: USAGE }] },
];

async function coreWith(model: ModelPort): Promise<Core> {
  const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, tools: [spyTool], closeStorageOnShutdown: false, worldState: false, compaction: { attempts: 1, retryDelayMs: 0 } });
  cores.push(core);
  return core;
}

describe('every event from a ModelPort is checked before the runtime uses it', () => {
  it.each(cases)('$name ends the call as model_protocol_error before any tool runs', async ({ events }) => {
    const model = hostilePort(events);
    const core = await coreWith(model);
    const session = await core.createSession({ workingDirectory: process.cwd() });
    const { turnId } = await session.startTurn({ clientRequestId: 'bad', input: [{ type: 'text', text: 'go' }] });
    const outcome = await session.waitForTurn(turnId);
    expect(outcome).toMatchObject({ status: 'failed', code: 'model_protocol_error' });
    expect(runs.get(session.sessionId) ?? 0).toBe(0);
    expect((await storage.getTurn(turnId))?.errorCode).toBe('model_protocol_error');
    expect((await storage.listMessages(session.sessionId)).map((m) => m.role)).toEqual(['user']);
    // The session goes on.
    const next = await session.startTurn({ clientRequestId: 'next', input: [{ type: 'text', text: 'again' }] });
    expect(await session.waitForTurn(next.turnId)).toEqual({ status: 'completed', finalText: 'fine' });
  });

  it('the compaction summary call refuses a bad completion: no checkpoint, compaction_error naming model_protocol_error', async () => {
    const model = hostilePort([{ type: 'text_delta', delta: 'hello' }, { type: 'completed', usage: USAGE }], [
      { type: 'text_delta', delta: validSummary() },
      { type: 'completed', usage: { ...USAGE, inputTokens: Number.NaN }, finishReason: 'stop' },
    ]);
    const core = await coreWith(model);
    const session = await core.createSession({ workingDirectory: process.cwd() });
    const { turnId } = await session.startTurn({ clientRequestId: 'first', input: [{ type: 'text', text: 'go' }] });
    expect(await session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'hello' });
    const failure = await session.compactConversation().then(
      () => null,
      (error: unknown) => error,
    );
    expect(failure).toBeInstanceOf(OpenworkError);
    expect(failure).toMatchObject({ code: 'compaction_error' });
    expect((failure as Error).message).toContain('model_protocol_error');
    expect(await storage.listCheckpoints(session.sessionId)).toEqual([]);
    expect(model.requests.filter(isSummaryRequest)).toHaveLength(1);
  });
});
