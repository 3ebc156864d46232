/**
 * Whole turns of the runtime on `openaiModel` against the fake OpenAI server: a tool-using turn end
 * to end, the turn outcome code of every failure case, the trace's attempts, and the rate limits
 * kept in the session state.
 */
import { validSummary } from '../../support/summaries.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createCore, type Core, type CoreOptions } from '../../../src/core.js';
import type { SessionUpdateEnvelope, TurnOutcome } from '../../../src/protocol/updates.js';
import type { SessionHandle } from '../../../src/session-handle.js';
import { openaiModel, type OpenAIModelOptions } from '../../../src/services/model/openai.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { approvalTool, echoTool } from '../../../src/testing/tools.js';
import { CONTEXT_LENGTH_ERROR, closedPort, startFakeOpenAI, type FakeOpenAIServer, type RecordedRequest } from '../../support/fake-openai-server.js';
import { assertStoredInvariants } from '../../support/invariants.js';
import { loadWireFixtures, rawReply } from '../../support/wire-fixtures.js';
import { UpdateRenderer } from '../../../src/cli/render.js';
import { PLAIN_STYLE } from '../../support/cli-in-process.js';
import { usePglite } from '../../support/databases.js';

let server: FakeOpenAIServer;
let storage: SqlSessionStorage;
const cores: Core[] = [];

usePglite((s) => (storage = s));
beforeAll(async () => {
  server = await startFakeOpenAI();
});
afterEach(async () => {
  while (cores.length > 0) await cores.pop()!.shutdown();
  expect(server.unexpected).toEqual([]);
  expect(server.remaining).toBe(0);
  server.requests.length = 0;
});
afterAll(async () => {
  await server.close();
});

interface Run {
  core: Core;
  session: SessionHandle;
  updates: SessionUpdateEnvelope[];
  turn(text: string): Promise<{ turnId: string; outcome: TurnOutcome }>;
}

async function setup(api: 'responses' | 'chat', model: Partial<OpenAIModelOptions> = {}, core: Partial<CoreOptions> = {}): Promise<Run> {
  const instance = await createCore({ plan: true, conversationHistory: true, agents: true,
    storage,
    model: openaiModel({ model: 'fake-model', api, baseURL: server.url, apiKey: 'sk-test', retryBaseDelayMs: 1, retryMaxDelayMs: 20, ...model }),
    tools: [echoTool, approvalTool],
    closeStorageOnShutdown: false,
    // World State has its own suite; these tests assert exact wire requests.
    worldState: false,
    compaction: { retryDelayMs: 1 },
    ...core,
  });
  cores.push(instance);
  const session = await instance.createSession({ workingDirectory: process.cwd() });
  const updates: SessionUpdateEnvelope[] = [];
  session.updates$.subscribe((e) => updates.push(e));
  let n = 0;
  return {
    core: instance,
    session,
    updates,
    async turn(text) {
      n += 1;
      const { turnId } = await session.startTurn({ clientRequestId: `req-${n}`, input: [{ type: 'text', text }] });
      return { turnId, outcome: await session.waitForTurn(turnId) };
    },
  };
}

async function modelSpans(core: Core, turnId: string) {
  await core.flushTrace();
  return (await core.storage.listTraceSpans({ turnId })).filter((s) => s.kind === 'model_call');
}

/** The tool result the model was sent, in either wire format. */
function sentResult(request: RecordedRequest, callId: string): unknown {
  if (request.api === 'responses') {
    return (request.body.input as Array<Record<string, unknown>>).find((i) => i.type === 'function_call_output' && i.call_id === callId)?.output;
  }
  return (request.body.messages as Array<Record<string, unknown>>).find((m) => m.role === 'tool' && m.tool_call_id === callId)?.content;
}

describe.each(['responses', 'chat'] as const)('turns on openaiModel over %s', (api) => {
  it('a full tool-using turn: tool call → result → final answer, stored and sent back', async () => {
    const run = await setup(api, { reasoningEffort: 'low' });
    server.script(
      { reasoning: 'I should echo.', encryptedReasoning: 'enc-1', text: 'Let me echo.', toolCalls: [{ name: 'echo', arguments: { text: 'ping' }, callId: 'call_1' }], argsChunk: 2 },
      (request) => {
        expect(sentResult(request, 'call_1')).toBe('ping');
        if (api === 'responses') {
          // The encrypted reasoning item of the first response goes back with the history.
          expect(request.body.input).toContainEqual({ type: 'reasoning', summary: [{ type: 'summary_text', text: 'I should echo.' }], encrypted_content: 'enc-1' });
        }
        return { text: 'The tool said ping.', usage: { inputTokens: 40, outputTokens: 6 } };
      },
    );
    const { turnId, outcome } = await run.turn('Echo ping, please.');
    expect(outcome).toEqual({ status: 'completed', finalText: 'The tool said ping.' });
    expect(server.requests).toHaveLength(2);

    const messages = await run.session.messages();
    expect(messages.map((m) => [m.role, m.content.map((b) => b.type)])).toEqual([
      ['user', ['text']],
      ['assistant', api === 'responses' ? ['reasoning', 'text', 'provider_opaque', 'tool_call'] : ['reasoning', 'text', 'tool_call']],
      ['tool', ['tool_result']],
      ['assistant', ['text']],
    ]);
    expect(messages[1]!.content.find((b) => b.type === 'tool_call')).toEqual({ type: 'tool_call', callId: 'call_1', name: 'echo', arguments: '{"text":"ping"}' });
    expect(messages[2]!.content[0]).toMatchObject({ type: 'tool_result', callId: 'call_1', status: 'succeeded', text: 'ping' });
    const types = run.updates.map((u) => u.update.type);
    expect(types).toContain('reasoning_delta');
    expect(types).toContain('tool_call_started');
    expect(types.at(-1)).toBe('turn_finished');
    const turn = await storage.getTurn(turnId);
    expect(turn).toMatchObject({ status: 'completed', modelCallCount: 2, toolCallCount: 1 });
    const spans = await modelSpans(run.core, turnId);
    expect(spans.map((s) => [s.status, s.attemptCount, s.attributes.finishReason])).toEqual([
      ['succeeded', 1, 'tool_use'],
      ['succeeded', 1, 'stop'],
    ]);
    expect(spans[1]).toMatchObject({ inputTokens: 40, outputTokens: 6, attributes: { actualModel: 'fake-model', deliveryState: 'semantic_output_emitted' } });
    await assertStoredInvariants(storage, run.session.sessionId);
  });

  it('an approval card on the way: allowed once, the tool runs, the turn completes', async () => {
    const run = await setup(api);
    server.script({ toolCalls: [{ name: 'guarded', arguments: { action: 'deploy' }, callId: 'g1' }] }, (request) => {
      expect(sentResult(request, 'g1')).toBe('did deploy');
      return { text: 'Deployed.' };
    });
    run.updates.length = 0;
    const pending = run.turn('Deploy.');
    await expect.poll(() => run.updates.find((u) => u.update.type === 'permission_requested')).toBeTruthy();
    const card = run.updates.find((u) => u.update.type === 'permission_requested')!;
    if (card.update.type !== 'permission_requested') throw new Error('unreachable');
    await run.session.resolvePermission(card.turnId!, card.update.toolCallId, 'allow_once');
    expect((await pending).outcome).toEqual({ status: 'completed', finalText: 'Deployed.' });
  });

  it('429 then success: the turn completes and its model span records two attempts', async () => {
    const run = await setup(api);
    server.script({ status: 429, headers: { 'retry-after-ms': '5' } }, { text: 'made it' });
    const { turnId, outcome } = await run.turn('hi');
    expect(outcome).toEqual({ status: 'completed', finalText: 'made it' });
    const [span] = await modelSpans(run.core, turnId);
    expect(span).toMatchObject({ status: 'succeeded', attemptCount: 2 });
  });

  it('500 every time: model_error, three attempts, the status in the trace', async () => {
    const run = await setup(api);
    server.script({ status: 500 }, { status: 500 }, { status: 500 });
    const { turnId, outcome } = await run.turn('hi');
    expect(outcome).toMatchObject({ status: 'failed', code: 'model_error' });
    const [span] = await modelSpans(run.core, turnId);
    expect(span).toMatchObject({
      status: 'failed',
      attemptCount: 3,
      errorCode: 'model_error',
      attributes: { httpStatus: 500, errorPhase: 'response_headers', deliveryState: 'accepted_no_semantic_output' },
    });
  });

  it('the connection cut mid-stream: model_error, the draft discarded, nothing stored for the response', async () => {
    const run = await setup(api);
    server.script({ text: 'a long answer that breaks', chunk: 2, cutAfterEvents: 6 });
    const { turnId, outcome } = await run.turn('hi');
    expect(outcome).toMatchObject({ status: 'failed', code: 'model_error' });
    expect(run.updates.map((u) => u.update)).toContainEqual({ type: 'draft_cleared', reason: 'discarded' });
    expect((await run.session.messages()).map((m) => m.role)).toEqual(['user']);
    const [span] = await modelSpans(run.core, turnId);
    expect(span).toMatchObject({ status: 'failed', attemptCount: 1, attributes: { errorPhase: 'response_body', deliveryState: 'semantic_output_emitted' } });
  });

  it('the stream ending without its completion: model_protocol_error', async () => {
    const run = await setup(api);
    server.script({ text: 'unfinished', omitCompletion: true });
    expect((await run.turn('hi')).outcome).toMatchObject({ status: 'failed', code: 'model_protocol_error' });
  });

  it('two completions: model_protocol_error', async () => {
    const run = await setup(api);
    server.script({ text: 'twice', doubleCompletion: true });
    expect((await run.turn('hi')).outcome).toMatchObject({ status: 'failed', code: 'model_protocol_error' });
  });

  it('a tool call without an id: model_protocol_error, no tool runs', async () => {
    const run = await setup(api);
    server.script({ toolCalls: [{ name: 'echo', arguments: { text: 'x' }, callId: null }] });
    expect((await run.turn('hi')).outcome).toMatchObject({ status: 'failed', code: 'model_protocol_error' });
    expect(run.updates.some((u) => u.update.type === 'tool_call_started')).toBe(false);
  });

  it('arguments that are not JSON: the tool gets an invalid-arguments result and the turn goes on', async () => {
    const run = await setup(api);
    server.script({ toolCalls: [{ name: 'echo', arguments: '{"text": ', callId: 'bad' }] }, (request) => {
      expect(String(sentResult(request, 'bad'))).toMatch(/^\[error\] /);
      return { text: 'Sorry.' };
    });
    expect((await run.turn('hi')).outcome).toEqual({ status: 'completed', finalText: 'Sorry.' });
  });

  it('a context-length error with automatic compaction off: model_error', async () => {
    const run = await setup(api, {}, { compaction: false });
    server.script(CONTEXT_LENGTH_ERROR);
    const { outcome } = await run.turn('hi');
    expect(outcome).toMatchObject({ status: 'failed', code: 'model_error' });
    expect((outcome as { message: string }).message).toContain('maximum context length');
  });

  it('a context-length error: compacted once (a real summary over the wire), resubmitted, completed', async () => {
    const run = await setup(api);
    server.script(CONTEXT_LENGTH_ERROR, { text: validSummary('the greeting') }, { text: 'fits now' });
    const { turnId, outcome } = await run.turn('hi');
    expect(outcome).toEqual({ status: 'completed', finalText: 'fits now' });
    expect((await run.session.checkpoints()).map((c) => c.kind)).toEqual(['overflow']);
    expect(run.updates.map((u) => u.update)).toContainEqual({ type: 'phase_changed', phase: 'compacting' });
    const turn = await storage.getTurn(turnId);
    expect(turn).toMatchObject({ modelCallCount: 1, modelSubmissionCount: 2 });
  });

  it('a second context-length error after compaction: model_error', async () => {
    const run = await setup(api);
    server.script(CONTEXT_LENGTH_ERROR, { text: validSummary('the greeting') }, CONTEXT_LENGTH_ERROR);
    expect((await run.turn('hi')).outcome).toMatchObject({ status: 'failed', code: 'model_error' });
  });

  it('cancel mid-stream: the turn is cancelled, the request aborted, the span cancelled', async () => {
    const run = await setup(api);
    server.script({ text: 'this goes on and on', chunk: 1, hangAfterEvents: 6 });
    const abortsBefore = server.clientAborts;
    const { turnId } = await run.session.startTurn({ clientRequestId: 'cancel-me', input: [{ type: 'text', text: 'hi' }] });
    await expect.poll(() => run.updates.some((u) => u.update.type === 'text_delta')).toBe(true);
    await run.session.cancelTurn(turnId);
    expect(await run.session.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
    await expect.poll(() => server.clientAborts).toBeGreaterThan(abortsBefore);
    const [span] = await modelSpans(run.core, turnId);
    expect(span).toMatchObject({ status: 'cancelled', attributes: { errorPhase: 'cancelled', deliveryState: 'semantic_output_emitted' } });
  });

  it('an unreachable server: model_error that names the address', async () => {
    const port = await closedPort();
    const run = await setup(api, { baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 1 });
    const { outcome } = await run.turn('hi');
    expect(outcome).toEqual({ status: 'failed', code: 'model_error', message: `cannot reach http://127.0.0.1:${port}/v1 (ECONNREFUSED)` });
  });
});

describe('recorded wire shapes in whole turns (issue 18)', () => {
  const fixture = (name: string) => rawReply(loadWireFixtures().find((f) => f.name === name)!);

  it('two output messages (commentary, then the answer): two text blocks stored with their phase, sent back as two messages, shown as two paragraphs', async () => {
    const run = await setup('responses', { reasoningEffort: 'medium' });
    server.script(fixture('responses-openai-commentary-then-answer'), (request) => {
      const input = request.body.input as Array<Record<string, unknown>>;
      expect(input.filter((i) => i.role === 'assistant')).toEqual([
        { role: 'assistant', content: "I'll answer with links.", phase: 'commentary' },
        { role: 'assistant', content: 'Here are a few good sources.', phase: 'final_answer' },
      ]);
      return { text: 'Done.' };
    });
    const answer = "I'll answer with links.\n\nHere are a few good sources.";
    expect((await run.turn('Find sources.')).outcome).toEqual({ status: 'completed', finalText: answer });
    const [, assistant] = await run.session.messages();
    expect(assistant!.content.filter((b) => b.type === 'text')).toEqual([
      { type: 'text', text: "I'll answer with links.", phase: 'commentary' },
      { type: 'text', text: 'Here are a few good sources.', phase: 'final_answer' },
    ]);
    // The live text is the stored text as shown: the second message starts a paragraph.
    const deltas = run.updates.flatMap((u) => (u.update.type === 'text_delta' ? [u.update.delta] : []));
    expect(deltas.join('')).toBe(answer);
    const written: string[] = [];
    const plain = PLAIN_STYLE;
    const renderer = new UpdateRenderer({ write: (chunk: string) => written.push(chunk) } as unknown as NodeJS.WritableStream, plain);
    for (const envelope of run.updates) if (envelope.update.type === 'text_delta') renderer.render(envelope);
    expect(written.join('')).toBe(answer);
    expect((await run.turn('And then?')).outcome).toEqual({ status: 'completed', finalText: 'Done.' });
    await assertStoredInvariants(storage, run.session.sessionId);
  });

  it('a tool search item with object arguments is ignored: the function call after it runs and the turn goes on', async () => {
    const run = await setup('responses');
    server.script(fixture('responses-openai-tool-search'), (request) => {
      expect(String(sentResult(request, 'call_Qm3vX8pL2nR7tY1w'))).toMatch(/^\[error\] /);
      return { text: 'No weather tool here.' };
    });
    expect((await run.turn('Weather in Paris?')).outcome).toEqual({ status: 'completed', finalText: 'No weather tool here.' });
    expect(run.updates.map((u) => u.update)).toContainEqual(expect.objectContaining({ type: 'tool_call_started', toolName: 'get_weather' }));
  });

  it.each([
    ['responses', 'responses-openai-error-nested'],
    ['chat', 'chat-error-chunk'],
  ] as const)('an in-stream error before any output (%s, %s): retried, the turn completes, two attempts in the trace', async (api, name) => {
    const run = await setup(api);
    server.script(fixture(name), { text: 'second attempt' });
    const { turnId, outcome } = await run.turn('hi');
    expect(outcome).toEqual({ status: 'completed', finalText: 'second attempt' });
    const [span] = await modelSpans(run.core, turnId);
    expect(span).toMatchObject({ status: 'succeeded', attemptCount: 2 });
  });
});

describe('rate limits in the session state', () => {
  it('are merged by seed 004 §2: a newer snapshot without credits or plan keeps them; no limit id is the default bucket', async () => {
    const run = await setup('chat');
    expect(run.session.snapshot().rateLimits).toBeNull();
    server.script(
      {
        text: 'one',
        headers: {
          'x-codex-primary-used-percent': '12.5',
          'x-codex-primary-window-minutes': '300',
          'x-codex-primary-reset-at': '1900000000',
          'x-codex-credits-has-credits': 'true',
          'x-codex-credits-unlimited': 'false',
          'x-codex-credits-balance': '5.39',
          'x-codex-plan-type': 'pro',
        },
      },
      {
        text: 'two',
        headers: {
          'x-ratelimit-limit-requests': '100',
          'x-ratelimit-remaining-requests': '75',
          'x-ratelimit-reset-requests': '6m0s',
          'x-ratelimit-limit-tokens': '10000',
          'x-ratelimit-remaining-tokens': '9000',
          'x-ratelimit-reset-tokens': '1s',
        },
      },
    );
    await run.turn('first');
    expect(run.session.snapshot().rateLimits).toEqual({
      limitId: 'codex',
      primary: { usedPercent: 12.5, windowMinutes: 300, resetsAt: new Date(1_900_000_000_000).toISOString() },
      secondary: null,
      credits: { hasCredits: true, unlimited: false, balance: '5.39' },
      plan: 'pro',
    });
    await run.turn('second');
    expect(run.session.snapshot().rateLimits).toEqual({
      limitId: 'default',
      primary: { limit: 100, remaining: 75, usedPercent: 25, resetsAt: expect.any(String) },
      secondary: { limit: 10000, remaining: 9000, usedPercent: 10, resetsAt: expect.any(String) },
      credits: { hasCredits: true, unlimited: false, balance: '5.39' },
      plan: 'pro',
    });
  });

  it('a 429 answer updates them too', async () => {
    const run = await setup('responses', { maxRetries: 0 });
    server.script({ status: 429, headers: { 'x-ratelimit-limit-tokens': '1000', 'x-ratelimit-remaining-tokens': '0', 'x-ratelimit-reset-tokens': '20s' } });
    expect((await run.turn('hi')).outcome).toMatchObject({ status: 'failed', code: 'model_error' });
    expect(run.session.snapshot().rateLimits).toMatchObject({ limitId: 'default', primary: null, secondary: { limit: 1000, remaining: 0, usedPercent: 100 } });
  });
});
