/**
 * Fuzzed model streams (issue 6, item 3): random event sequences for a turn's first model call —
 * text split anywhere, events duplicated, responses truncated, tool-call arguments cut off or
 * malformed, completions doubled, the stream failing (or refusing the request as too long) at any
 * point. Whatever arrives, the turn ends with the outcome an independent oracle predicts (seed 000
 * §3, §4, §6; an overflow before semantic output is compacted with a real summary and resubmitted
 * once, reference §3.1), no tool runs unless its call came in a completed response with valid
 * arguments, the stored rows keep the invariants, the live conversation equals the one a reload
 * rebuilds from the stored rows and checkpoints, and the session takes the next turn.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore, DEFAULT_SYSTEM_PROMPT, type Core } from '../../src/core.js';
import type { TurnOutcome } from '../../src/protocol/updates.js';
import { assembleRequest, buildSystemContext } from '../../src/services/context/assemble.js';
import type { ModelRequest, ModelStreamEvent } from '../../src/services/model/port.js';
import { scriptedModel, type ScriptedStep } from '../../src/services/model/scripted.js';
import { ModelError } from '../../src/errors.js';
import { defineTool } from '../../src/services/tools/define.js';
import { Toolset } from '../../src/services/tools/registry.js';
import { updatePlanControlTool } from '../../src/services/plan/update-plan.js';
import { canonicalJson, type SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { fuzzParameters, fuzzTimeout } from '../support/fuzz.js';
import { assertAllRequests, assertSequences, assertStoredInvariants } from '../support/invariants.js';
import { isSummaryRequest, validSummary } from '../support/summaries.js';
import { startFakeOpenAI, type FakeOpenAIServer } from '../support/fake-openai-server.js';
import { loadWireFixtures, rawReply } from '../support/wire-fixtures.js';
import { openaiModel } from '../../src/services/model/openai.js';
import { usePglite } from '../support/databases.js';

const USAGE = { inputTokens: 5, outputTokens: 3, cachedInputTokens: 0, reasoningTokens: 0 };

/** Every execution of the spy tool, per session: the arguments it ran with. */
const executions = new Map<string, unknown[]>();

const spyTool = defineTool({
  name: 'spy',
  description: 'Records that it ran.',
  parameters: z.object({ n: z.number().int() }),
  execute: (args, ctx) => {
    executions.set(ctx.sessionId, [...(executions.get(ctx.sessionId) ?? []), args]);
    return `ran ${args.n}`;
  },
});

type Termination = 'end' | 'error' | 'overflow';

interface StreamCase {
  events: ModelStreamEvent[];
  termination: Termination;
  /** What the summary request of an overflow compaction answers (every attempt). */
  summary: 'valid' | 'invalid';
}

/** Summary attempts of the fuzzed runtime (reference §3.5 allows configuring them). */
const SUMMARY_ATTEMPTS = 2;

const validArgs = fc.integer({ min: 0, max: 1 }).map((n) => JSON.stringify({ n }));
const argsArb = fc.oneof(
  { weight: 4, arbitrary: validArgs },
  // Cut off anywhere: what a truncated stream would have left of the arguments.
  { weight: 2, arbitrary: validArgs.chain((v) => fc.integer({ min: 0, max: v.length - 1 }).map((k) => v.slice(0, k))) },
  { weight: 2, arbitrary: fc.constantFrom('{n:1}', '[', 'null', '{"n":"1"}', '{"n":1,}', '', '{"n":1}{"n":2}', '{"n":1.5}') },
);
const toolCallArb = fc.record({
  type: fc.constant('tool_call' as const),
  callId: fc.constantFrom('call_a', 'call_b', 'call_c'),
  name: fc.constantFrom('spy', 'spy', 'spy', 'nope'),
  arguments: argsArb,
});
// A delta may open another output message (issue 18: each is its own text block, with a phase).
const textArb: fc.Arbitrary<Extract<ModelStreamEvent, { type: 'text_delta' }>> = fc
  .record({ delta: fc.string({ maxLength: 6 }), newBlock: fc.constantFrom(false, false, false, true), phase: fc.constantFrom(undefined, undefined, 'commentary', 'final_answer') })
  .map(({ delta, newBlock, phase }) => ({ type: 'text_delta' as const, delta, ...(newBlock ? { newBlock: true as const } : {}), ...(phase ? { phase } : {}) }));
const eventArb: fc.Arbitrary<ModelStreamEvent> = fc.oneof(
  { weight: 3, arbitrary: textArb },
  { weight: 1, arbitrary: fc.string({ maxLength: 4 }).map((delta) => ({ type: 'reasoning_delta' as const, delta })) },
  { weight: 3, arbitrary: toolCallArb },
  { weight: 1, arbitrary: fc.constant({ type: 'provider_opaque' as const, provider: 'fuzz', data: { k: 1 } }) },
  { weight: 2, arbitrary: fc.constant({ type: 'completed' as const, usage: USAGE, finishReason: 'stop' as const }) },
  { weight: 1, arbitrary: fc.constant({ type: 'retry' as const, attempt: 2, reason: 'reset' }) },
);

/** A well-formed response (text split anywhere, calls, one completion), then mutated. */
const mutatedArb: fc.Arbitrary<StreamCase> = fc
  .record({
    text: fc.array(textArb, { maxLength: 4 }),
    calls: fc.array(toolCallArb, { maxLength: 4 }),
    mutation: fc.constantFrom('none', 'none', 'duplicate', 'double_completion', 'truncate', 'fail_at'),
    at: fc.nat(),
    summary: fc.constantFrom('valid' as const, 'valid' as const, 'invalid' as const),
  })
  .map(({ text, calls, mutation, at, summary }) => {
    const events: ModelStreamEvent[] = [...text, ...calls, { type: 'completed', usage: USAGE, finishReason: 'tool_use' }];
    const i = at % events.length;
    switch (mutation) {
      case 'duplicate':
        events.splice(i, 0, events[i]!);
        return { events, termination: 'end' as const, summary };
      case 'double_completion':
        events.splice(i, 0, { type: 'completed', usage: USAGE });
        return { events, termination: 'end' as const, summary };
      case 'truncate':
        return { events: events.slice(0, i), termination: 'end' as const, summary };
      case 'fail_at':
        return { events: events.slice(0, i), termination: at % 3 === 0 ? ('overflow' as const) : ('error' as const), summary };
      default:
        return { events, termination: 'end' as const, summary };
    }
  });

const caseArb: fc.Arbitrary<StreamCase> = fc.oneof(
  mutatedArb,
  fc.record({
    events: fc.array(eventArb, { maxLength: 10 }),
    termination: fc.constantFrom<Termination>('end', 'end', 'end', 'error', 'overflow'),
    summary: fc.constantFrom('valid' as const, 'invalid' as const),
  }),
);

interface Expected {
  outcome: { status: 'completed'; finalText: string } | { status: 'failed'; code: string };
  /** Arguments of the calls that must run, in order. */
  executed: unknown[];
  /** Requests of the turn itself (the first call, a resubmission, the call after the tools). */
  modelCalls: number;
  /** Summary requests of an overflow compaction. */
  summaryCalls: number;
}

function parseSpyArgs(call: Extract<ModelStreamEvent, { type: 'tool_call' }>): { n: number } | null {
  if (call.name !== 'spy') return null;
  let value: unknown;
  try {
    value = call.arguments.trim() === '' ? {} : JSON.parse(call.arguments);
  } catch {
    return null;
  }
  const parsed = spyTool.parameters.safeParse(value);
  return parsed.success ? parsed.data : null;
}

/** What seed 000 says must happen, computed without the runtime. */
function oracle({ events, termination, summary }: StreamCase): Expected {
  let semantic = false;
  let completions = 0;
  const failed = (code: string, extra: Partial<Expected> = {}): Expected => ({ outcome: { status: 'failed', code }, executed: [], modelCalls: 1, summaryCalls: 0, ...extra });
  for (const event of events) {
    // The completion is the last event of a stream; anything after it is a protocol error (issue 13.3).
    if (completions > 0) return failed('model_protocol_error');
    if (event.type === 'text_delta' || event.type === 'reasoning_delta' || event.type === 'tool_call') semantic = true;
    if (event.type === 'completed') completions += 1;
  }
  if (termination === 'error') return failed('model_error');
  if (termination === 'overflow') {
    // After semantic output an overflow is an ordinary model failure; before it, the conversation
    // is compacted (a summary checkpoint: nothing here is long enough to prune) and the request
    // resubmitted once, which then answers.
    if (semantic) return failed('model_error');
    if (summary === 'invalid') return failed('compaction_error', { summaryCalls: SUMMARY_ATTEMPTS });
    return { outcome: { status: 'completed', finalText: 'final' }, executed: [], modelCalls: 2, summaryCalls: 1 };
  }
  if (completions === 0) return failed('model_protocol_error');
  const calls = events.filter((e): e is Extract<ModelStreamEvent, { type: 'tool_call' }> => e.type === 'tool_call');
  if (new Set(calls.map((c) => c.callId)).size !== calls.length) return failed('chat_state_error');
  if (calls.length === 0) {
    // Output messages are paragraphs of the final text; an empty delta opens nothing.
    const blocks: string[] = [];
    for (const e of events) {
      if (e.type !== 'text_delta' || e.delta === '') continue;
      if (blocks.length === 0 || (e.newBlock && blocks.at(-1) !== '')) blocks.push(e.delta);
      else blocks[blocks.length - 1] += e.delta;
    }
    return { outcome: { status: 'completed', finalText: blocks.join('\n\n') }, executed: [], modelCalls: 1, summaryCalls: 0 };
  }
  const executed: unknown[] = [];
  let doom = { signature: '', count: 0 };
  for (const call of calls) {
    const args = parseSpyArgs(call);
    if (!args) continue;
    const signature = `${call.name}\u0000${canonicalJson(args)}`;
    doom = { signature, count: doom.signature === signature ? doom.count + 1 : 1 };
    if (doom.count >= 3) return { outcome: { status: 'failed', code: 'doom_loop' }, executed, modelCalls: 1, summaryCalls: 0 };
    executed.push(args);
  }
  return { outcome: { status: 'completed', finalText: 'final' }, executed, modelCalls: 2, summaryCalls: 0 };
}

function outcomeShape(outcome: TurnOutcome): Expected['outcome'] {
  return outcome.status === 'failed' ? { status: 'failed', code: outcome.code } : outcome.status === 'completed' ? outcome : { status: 'failed', code: 'cancelled' };
}

describe('fuzzed model streams', () => {
  let storage: SqlSessionStorage;
  let core: Core;
  const systemContext = buildSystemContext(DEFAULT_SYSTEM_PROMPT, new Toolset([spyTool], [updatePlanControlTool]).systemPromptRules);

  usePglite((s) => (storage = s));
  beforeAll(async () => {
    core = await createCore({ plan: true, conversationHistory: true, agents: true,
      storage,
      model: scriptedModel([]),
      tools: [spyTool],
      closeStorageOnShutdown: false,
      compaction: { attempts: SUMMARY_ATTEMPTS, retryDelayMs: 0 },
      onActorError: (id, error) => {
        throw new Error(`actor of ${id} failed: ${String(error)}`);
      },
    });
  });

  afterAll(async () => {
    await core.shutdown();
  });

  it('every stream ends as the oracle says and never runs an incomplete tool call', async () => {
    let n = 0;
    await fc.assert(
      fc.asyncProperty(caseArb, async (streamCase) => {
        n += 1;
        const expected = oracle(streamCase);
        const first: ScriptedStep =
          streamCase.termination === 'end'
            ? { events: streamCase.events }
            : { error: new ModelError(streamCase.termination === 'overflow' ? 'context_overflow' : 'model_error', 'fuzzed failure'), afterEvents: streamCase.events };
        const turnRequests: ModelRequest[] = [];
        const summaryRequests: ModelRequest[] = [];
        const model = scriptedModel((request) => {
          if (isSummaryRequest(request)) {
            summaryRequests.push(request);
            return streamCase.summary === 'valid' ? { text: validSummary('the fuzzed request') } : { text: 'no summary here' };
          }
          turnRequests.push(request);
          if (turnRequests.length === 1) return first;
          const last = request.messages.filter((m) => m.role === 'user' && m.kind === 'normal').at(-1);
          return last?.role === 'user' && last.content.some((b) => b.type === 'text' && b.text === 'again') ? { text: 'next turn' } : { text: 'final' };
        });
        const session = await core.createSession({ workingDirectory: process.cwd(), model, id: `ses_fuzz_stream_${n}` });
        const updates: Parameters<typeof assertSequences>[0][number][] = [];
        session.updates$.subscribe((e) => updates.push(e));
        const { turnId } = await session.startTurn({ clientRequestId: 'fuzz', input: [{ type: 'text', text: 'go' }] });
        const outcome = await session.waitForTurn(turnId);

        expect(outcomeShape(outcome)).toEqual(expected.outcome);
        expect(executions.get(session.sessionId) ?? []).toEqual(expected.executed);
        expect(turnRequests).toHaveLength(expected.modelCalls);
        expect(summaryRequests).toHaveLength(expected.summaryCalls);
        const firstTurnRequests = turnRequests.length;
        // The second call of the turn comes only after every result of the first response is written.
        if (expected.modelCalls === 2) expect(turnRequests[1]!.messages.some((m) => m.role === 'tool' && m.synthetic)).toBe(false);
        const turn = await storage.getTurn(turnId);
        expect(turn?.status).toBe(expected.outcome.status);
        if (expected.outcome.status === 'failed') expect(turn?.errorCode).toBe(expected.outcome.code);
        // A checkpoint exactly when the overflow was compacted.
        expect((await storage.listCheckpoints(session.sessionId)).map((c) => c.kind)).toEqual(expected.summaryCalls === 1 ? ['overflow'] : []);
        // A response that was not completed leaves no assistant message behind (World State messages aside).
        const stored = await assertStoredInvariants(storage, session.sessionId);
        if (expected.outcome.status === 'failed' && ['model_error', 'model_protocol_error', 'compaction_error'].includes(expected.outcome.code)) {
          expect(stored.messages.filter((m) => m.kind !== 'world_state').map((m) => m.role)).toEqual(['user']);
        }

        // The session takes the next turn, and its request is exactly what a reload would assemble
        // from the stored rows and checkpoints.
        const next = await session.startTurn({ clientRequestId: 'after', input: [{ type: 'text', text: 'again' }] });
        expect(await session.waitForTurn(next.turnId)).toEqual({ status: 'completed', finalText: 'next turn' });
        const rows = await storage.listMessages(session.sessionId);
        const beforeAnswer = rows.filter((m) => m.role !== 'assistant' || m.turnId !== next.turnId).at(-1)!;
        const fromRows = assembleRequest({
          system: systemContext,
          conversation: await session.replayConversation({ throughMessageSequence: beforeAnswer.sequence }),
          tools: turnRequests.at(-1)!.tools,
        });
        expect(turnRequests.at(-1)!.messages, 'live conversation = stored conversation').toEqual(fromRows.request.messages);
        expect(turnRequests).toHaveLength(firstTurnRequests + 1);
        assertAllRequests(model.requests);
        assertSequences(updates, { fromOne: true });
        await session.shutdown();
      }),
      fuzzParameters(120),
    );
  }, fuzzTimeout(120));
});

/**
 * The recorded wire shapes of issue 18 cut into arbitrary pieces: a provider's bytes reach the
 * client in whatever TCP segments the network makes (an event split inside a UTF-8 character, a
 * line end split from its line, CRLF line ends as some proxies write them). Whatever the cuts, the
 * port events and the failure are the fixture's.
 */
describe('fuzzed transport of the recorded wire shapes', () => {
  let server: FakeOpenAIServer;
  beforeAll(async () => {
    server = await startFakeOpenAI();
  });
  afterAll(async () => {
    await server.close();
  });

  const cases = loadWireFixtures().flatMap((fixture) => fixture.apis.map((api) => ({ fixture, api })));

  it('every fixture, cut anywhere and with either line end, gives the same events', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...cases),
        fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 12 }),
        fc.boolean(),
        async ({ fixture, api }, cutPoints, crlf) => {
          server.reset();
          const whole = Buffer.from(rawReply(fixture).raw.chunks.join('').replace(/\n/g, crlf && fixture.sse ? '\r\n' : '\n'), 'utf8');
          const cuts = [...new Set(cutPoints.map((p) => Math.floor(p * whole.length)))].sort((a, b) => a - b);
          const pieces = [0, ...cuts].map((start, i) => whole.subarray(start, [...cuts, whole.length][i]).toString('latin1')).filter((p) => p !== '');
          const reply = rawReply(fixture);
          server.script({ raw: { ...reply.raw, chunks: pieces, binary: true } });
          const model = openaiModel({ model: 'fake-model', api, baseURL: server.url, apiKey: 'sk-test', maxRetries: 0 });
          const events: ModelStreamEvent[] = [];
          let error: unknown;
          try {
            for await (const event of model.stream({ system: [], messages: [{ role: 'user', kind: 'normal', content: [{ type: 'text', text: 'go' }] }], tools: [] }, { signal: new AbortController().signal })) events.push(event);
          } catch (caught) {
            error = caught;
          }
          expect(events).toEqual(fixture.expect.events);
          if (fixture.expect.error === undefined) expect(error).toBeUndefined();
          else expect(error).toMatchObject({ code: fixture.expect.error.code, message: fixture.expect.error.message, retryable: fixture.expect.error.retryable });
        },
      ),
      fuzzParameters(40),
    );
  }, fuzzTimeout(40));
});
