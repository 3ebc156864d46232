/**
 * The Turn machine alone, its effects stubs (issue 19 point 7): the model call's events, the calls
 * it runs itself (validate, authorize, execute, record), the call it hands to a tool-call machine (a
 * stub here), compaction, steering, cancel and stop, and every storage failure's outcome. It runs
 * under recording parents, as under its Session. No storage, model or tool runs; the composed
 * machines on the real runtime are test/machines/statecharts.test.ts.
 *
 * The model call (`callModel`) samples World State itself and reports `model.sampled` before it
 * assembles its request, and `runToolCall` validates a direct call and authorises, runs and records
 * it when the chart asks; both run as slots of the Turn's one effects actor (`effects`, branch
 * perf-turn), built here from the two stubs by `runTurn`. A chart change that renames or folds one
 * adjusts `actors()` below and the inputs the tests read.
 */
import { describe, expect, it } from 'vitest';
import { fromCallback, SimulatedClock, type AnyEventObject } from 'xstate';
import { cancelGraceDelays, DEFAULT_TOOL_CANCEL_GRACE_MS } from '../../src/machines/tool-call/cancel-grace.js';
import { directCallStatusOf } from '../../src/machines/turn/context.js';
import { UNCONFIRMED_STOP_TEXT } from '../../src/protocol/model-texts.js';
import { CommandError, ModelError, OpenworkError, StorageError } from '../../src/errors.js';
import { ModelCallSetupFailure } from '../../src/machines/turn/ports.js';
import { hostTurnEffects } from '../../src/machines/turn/effects.js';
import { AssemblyError } from '../../src/services/context/assemble.js';
import { WorldStateError } from '../../src/services/context/world-state.js';
import { ReloadRequiredError } from '../../src/services/compaction/compaction.js';
import { CompactionError } from '../../src/services/compaction/runtime-state.js';
import { REMAINING_CALL_TEXT, turnMachine } from '../../src/machines/turn.js';
import { NON_INTERACTIVE_REFUSAL_TEXT } from '../../src/machines/tool-call.js';
import type { AuthorizationOutput, ToolCallOutput, ValidatedCall } from '../../src/machines/types.js';
import type { TurnEvent, TurnInput, TurnOutput } from '../../src/machines/turn/ports.js';
import type { SessionUpdate } from '../../src/protocol/updates.js';
import type { ToolResult } from '../../src/services/tools/define.js';
import { CARD, deferred, flush, rejecting, stubChild, stubPromise, stubRunToolCall, underParents } from '../support/machine-stubs.js';

const USAGE = { inputTokens: 3, outputTokens: 2, cachedInputTokens: 0, reasoningTokens: 0 };
const OK: ToolResult = { status: 'succeeded', text: 'done' };

function turnInput(overrides: Partial<TurnInput> = {}): TurnInput {
  return {
    sessionId: 'ses_1',
    turnId: 'turn_1',
    clientRequestId: 'req_1',
    messages: [{ id: 'm1', role: 'user', kind: 'normal', content: [{ type: 'text', text: 'hi' }] }],
    systemContext: [],
    limits: { maxModelCalls: 5, doomLoopThreshold: 3 },
    permissionMode: 'auto',
    permissionModeOrigin: 'session_default',
    nonInteractive: false,
    sessionGrants: {},
    tokenBaseline: USAGE,
    mailbox: [],
    pendingInput: [],
    compactAtTokens: 0,
    compactionEnabled: true,
    disabledSkillNames: [],
    ...overrides,
  };
}

/** The events of one model call that answers `text`. */
const answer = (text: string): TurnEvent[] => [
  { type: 'model.call_recorded', estimatedInputTokens: 10 },
  { type: 'model.text_delta', delta: text },
  { type: 'model.completed', usage: USAGE },
];
/** The events of one model call that asks for tools. */
const toolCalls = (...names: string[]): TurnEvent[] => [
  { type: 'model.call_recorded', estimatedInputTokens: 10 },
  ...names.map((name, i) => ({ type: 'model.tool_call' as const, callId: `call_${i + 1}`, name, arguments: '{}' })),
  { type: 'model.completed', usage: USAGE },
];

type ModelStep = TurnEvent[] | { events: TurnEvent[]; error: unknown } | 'hang' | 'sampling';

/** What the model actor's commit answers: the `persistAssistantMessage` stub of `actors()` (a promise stub, run by `callModel`). */
type PersistStub = ReturnType<typeof stubPromise<{ messageId: string; outputProblem?: string }>>;

/**
 * The model call as a stub of the callback actor: each invocation that writes its own counters
 * reports World State sampled (`model.sampled`, as the real actor does before it assembles the
 * request; a call the fact before reserved, `counted`, does not) and plays the next
 * step's events to the Turn, or fails with the step's error as `model.failed` (a `stage: 'sample'`
 * error fails before anything is sampled). Like the real actor it stores the answer only when the
 * Turn sends `model.persist`: the answer comes from `persist()` (the `persistAssistantMessage` stub,
 * whose `inputs` record each commit's input), reported as `model.persisted` or
 * `model.persist_failed`. `hang` is recorded, streams a little and never ends; `sampling` stays in
 * its sampling and the test goes on with `model.live` (its `sendBack`).
 */
function scriptedCallModel(steps: ModelStep[], persist: () => PersistStub) {
  const inputs: any[] = [];
  const live: { subscriber: { next(event: TurnEvent): void } | null; stops: number } = { subscriber: null, stops: 0 };
  const logic = fromCallback<AnyEventObject, any>(({ input, sendBack, receive }) => {
    inputs.push(input);
    receive((command) => {
      if (command.type !== 'model.persist') return;
      const stub = persist();
      // The promise stub's own function (`fromPromise`'s config): it records the input and answers.
      const run = (stub as unknown as { config: (args: { input: unknown }) => Promise<{ messageId: string; outputProblem?: string }> }).config;
      run({ input: { sessionId: input.sessionId, turnId: input.turnId, modelCallIndex: input.modelCallIndex, spanId: input.spanId, draft: command.draft, end: command.end } }).then(
        (stored) => sendBack({ type: 'model.persisted', ...stored }),
        (error: unknown) => sendBack({ type: 'model.persist_failed', error }),
      );
    });
    const step = steps.shift();
    {
      if (step === undefined) return sendBack({ type: 'model.failed', error: new Error('the test scripted no more model calls') });
      if (step === 'sampling') {
        live.subscriber = { next: (event) => sendBack(event) };
        return;
      }
      if (step === 'hang') {
        // The call was recorded and the model is answering: the stream stays open until stopped.
        if (!input.counted) sendBack({ type: 'model.sampled' });
        sendBack({ type: 'model.call_recorded', estimatedInputTokens: 1 });
        sendBack({ type: 'model.text_delta', delta: 'partial' });
        live.subscriber = { next: (event) => sendBack(event) };
        // Its stop is the abort of the request in flight.
        return () => {
          live.stops += 1;
        };
      }
      const { events, error } = Array.isArray(step) ? { events: step, error: undefined } : step;
      // Like the real actor, only a call that writes its own counters reports its sampling apart: a
      // call the fact before reserved (`counted`) reports it with its request's outcome.
      if (!input.counted && !(error instanceof ModelCallSetupFailure && error.stage === 'sample')) sendBack({ type: 'model.sampled' });
      for (const event of events) sendBack(event);
      if (error !== undefined) sendBack({ type: 'model.failed', error });
    }
  });
  return Object.assign(logic, { inputs, live });
}

const REGISTERED: ValidatedCall = { kind: 'registered', args: {} };
const EXECUTE: AuthorizationOutput = { kind: 'execute' };

/**
 * The `runToolCall` stub: validation answers `validate` (registered by default), authorisation
 * `authorize` (execute), the record `record` (the result as given); the tool runs until the test
 * reports its end (`send`).
 */
function run(
  answers: {
    validate?: ValidatedCall | ((input: any) => ValidatedCall | Promise<ValidatedCall>);
    authorize?: AuthorizationOutput | ((args: unknown) => AuthorizationOutput | Promise<AuthorizationOutput>);
    record?: (input: { result: ToolResult }) => ToolResult | Promise<ToolResult>;
  } = {},
) {
  return stubRunToolCall<ValidatedCall, AuthorizationOutput>({ validate: answers.validate ?? REGISTERED, authorize: answers.authorize ?? EXECUTE, ...(answers.record ? { record: answers.record } : {}) });
}

function actors(model: ModelStep[], overrides: Record<string, unknown> = {}) {
  const toolCallLog: Array<{ input: any; events: AnyEventObject[] }> = [];
  const stubs = {
    beginTurn: stubPromise(undefined),
    drainInbox: stubPromise((i: { mailbox: Array<{ id: string }>; pendingInput: Array<{ id: string }> }) => ({
      mailboxIds: i.mailbox.map((m) => m.id),
      inputIds: i.pendingInput.map((m) => m.id),
    })),
    callModel: scriptedCallModel(model, (): PersistStub => stubs.persistAssistantMessage as PersistStub),
    persistAssistantMessage: stubPromise({ messageId: 'msg_a' }),
    compactConversation: stubPromise({ summarized: true, checkpointId: 'cp_1', conversationTokensBefore: 900, conversationTokensAfter: 100 }),
    runToolCall: run(),
    toolCall: stubChild<ToolCallOutput>(toolCallLog),
    recordCancelledCalls: stubPromise(undefined),
    finishTurn: stubPromise(true),
    ...overrides,
  };
  return { stubs, toolCallLog };
}

/** A callback stub's own function (`fromCallback`'s config): what a slot of the Turn's effects actor runs. */
const callbackOf = (logic: unknown) => (logic as { config: never }).config;

function runTurn(model: ModelStep[], options: { input?: Partial<TurnInput>; actors?: Record<string, unknown>; clock?: SimulatedClock; graceMs?: number } = {}) {
  const { stubs, toolCallLog } = actors(model, options.actors);
  const delays = options.graceMs !== undefined ? { delays: cancelGraceDelays(options.graceMs) } : {};
  // The model call and the direct call's run are the slots of one effects actor (machines/turn/effects.ts).
  const { callModel, runToolCall, ...invoked } = stubs;
  const turnEffects = hostTurnEffects({ callModel: callbackOf(callModel), runToolCall: callbackOf(runToolCall) });
  const running = underParents(turnMachine.provide({ actors: { ...invoked, turnEffects } as never, ...delays }), turnInput(options.input), options.clock);
  const published = () => running.sent('parent', 'session.publish').flatMap((e) => e.updates);
  return {
    ...running,
    stubs: stubs as typeof stubs & Record<string, any>,
    toolCallLog,
    published,
    phases: () => published().filter((u) => u.type === 'phase_changed').map((u) => u.phase),
    out: () => running.output() as TurnOutput,
    state: () => running.child().getSnapshot().value,
    context: () => running.child().getSnapshot().context,
  };
}

describe('Turn machine (stub actors): the model call', () => {
  it('a final answer: begins, samples, streams, persists and ends completed with the usage, publishing the phases and the text', async () => {
    const t = runTurn([answer('hello')]);
    await flush();
    expect(t.out()).toEqual({
      turnId: 'turn_1',
      outcome: { status: 'completed', finalText: 'hello' },
      plan: null,
      usage: USAGE,
      mailbox: [],
      pendingInput: [],
      endRecorded: true,
      reloadRequired: false,
    });
    expect(t.published()).toEqual([
      { type: 'phase_changed', phase: 'starting' },
      { type: 'phase_changed', phase: 'running_model' },
      { type: 'text_delta', delta: 'hello' },
      { type: 'draft_cleared', reason: 'committed' },
      { type: 'phase_changed', phase: 'completed' },
      { type: 'turn_finished', outcome: { status: 'completed', finalText: 'hello' }, usage: USAGE },
    ]);
    expect(t.stubs.beginTurn.inputs).toEqual([{ sessionId: 'ses_1', turnId: 'turn_1', clientRequestId: 'req_1', messages: turnInput().messages, reserveModelCall: true }]);
    // The model call samples World State itself; begin turn wrote its counters (`counted`).
    expect(t.stubs.callModel.inputs[0]).toMatchObject({ modelCallIndex: 1, samplingSequence: 1, permissionMode: 'auto', spanId: 'turn_1.model1', thresholdCompaction: true, counted: true });
    // The answer ends the turn: its write carries the end, and the end actor only acknowledges it.
    expect(t.stubs.persistAssistantMessage.inputs[0]).toMatchObject({ spanId: 'turn_1.model1', draft: { text: 'hello', textBlocks: [{ type: 'text', text: 'hello' }] }, end: { planUnfinishedStepCount: null } });
    expect(t.stubs.finishTurn.inputs).toEqual([
      { sessionId: 'ses_1', turnId: 'turn_1', outcome: { status: 'completed', finalText: 'hello' }, planUnfinishedStepCount: null, unmadeModelCall: 0, recorded: true },
    ]);
  });

  it('a second output message opens a text block of its own, shown after a paragraph break; rate limits go up to the session', async () => {
    const t = runTurn([
      [
        { type: 'model.call_recorded', estimatedInputTokens: 1 },
        { type: 'model.text_delta', delta: 'one', phase: 'commentary' },
        { type: 'model.text_delta', delta: 'two', newBlock: true },
        { type: 'model.rate_limits_reported', snapshot: { limitId: null } },
        { type: 'model.completed', usage: USAGE },
      ],
    ]);
    await flush();
    expect(t.stubs.persistAssistantMessage.inputs[0].draft.textBlocks).toEqual([
      { type: 'text', text: 'one', phase: 'commentary' },
      { type: 'text', text: 'two' },
    ]);
    expect(t.published().filter((u) => u.type === 'text_delta')).toEqual([
      { type: 'text_delta', delta: 'one' },
      { type: 'text_delta', delta: '\n\ntwo' },
    ]);
    expect(t.sent('parent', 'turn.rate_limits_reported')).toEqual([{ type: 'turn.rate_limits_reported', snapshot: { limitId: null } }]);
  });

  it('model failures: a stream without completion is model_protocol_error, a provider error model_error, an unassembled request its own code, an unrecorded call persistence_error', async () => {
    const recorded = [{ type: 'model.call_recorded' as const, estimatedInputTokens: 1 }];
    const cases: Array<[ModelStep, object]> = [
      // The actor itself reports a stream that ends without a completed response (there is no done event).
      [
        { events: [...recorded, { type: 'model.text_delta', delta: 'x' }], error: new ModelError('model_protocol_error', 'the model stream ended without a completed response', { semanticOutput: true }) },
        { code: 'model_protocol_error', message: 'the model stream ended without a completed response' },
      ],
      [{ events: recorded, error: new ModelError('model_error', '429', { retryable: true }) }, { code: 'model_error', message: '429' }],
      [{ events: recorded, error: new ModelError('model_protocol_error', 'bad frame') }, { code: 'model_protocol_error', message: 'bad frame' }],
      // Only ModelError's code counts: a plain object saying model_protocol_error is a provider failure.
      [{ events: recorded, error: { code: 'model_protocol_error', message: 'plain' } }, { code: 'model_error', message: 'plain' }],
      [{ events: [], error: new ModelCallSetupFailure('assemble', new WorldStateError('project_instruction_error', 'AGENTS.md unreadable')) }, { code: 'project_instruction_error', message: 'AGENTS.md unreadable' }],
      [{ events: [], error: new ModelCallSetupFailure('assemble', new OpenworkError('chat_state_error', 'orphan result')) }, { code: 'chat_state_error', message: 'orphan result' }],
      [{ events: [], error: new ModelCallSetupFailure('assemble', new AssemblyError('system part too large')) }, { code: 'model_protocol_error', message: 'request assembly failed: system part too large' }],
      [{ events: [], error: new ModelCallSetupFailure('assemble', new Error('odd')) }, { code: 'model_protocol_error', message: 'odd' }],
      [{ events: [], error: new ModelCallSetupFailure('assemble', { code: 'project_instruction_error', message: 'plain' }) }, { code: 'model_protocol_error', message: 'plain' }],
      [{ events: [], error: new ModelCallSetupFailure('record', new CommandError('ownership_lost', 'taken')) }, { code: 'ownership_lost', message: 'taken' }],
      // Only the errors.ts classes count: a plain object that merely says `ownership_lost` is a storage failure.
      [{ events: [], error: new ModelCallSetupFailure('record', { code: 'ownership_lost', message: 'plain' }) }, { code: 'persistence_error', message: 'plain' }],
      [{ events: [], error: new ModelCallSetupFailure('record', new StorageError('down')) }, { code: 'persistence_error', message: 'down' }],
      // A plain object with a stage is not a setup failure: it is a failure of the call itself.
      [{ events: [], error: { stage: 'record', message: 'x', cause: new CommandError('ownership_lost', 'taken') } }, { code: 'model_error', message: 'x' }],
    ];
    for (const [step, failure] of cases) {
      const t = runTurn([step]);
      await flush();
      expect(t.out().outcome).toEqual({ status: 'failed', ...failure });
    }
    // A discarded draft is announced as such.
    const t = runTurn([cases[0]![0]]);
    await flush();
    expect(t.published()).toContainEqual({ type: 'draft_cleared', reason: 'discarded' });
  });

  it('storage failures at the turn\'s edges, read by the errors.ts classes: begin (chat_state_error, else persistence_error), persist, and an unrecorded end keeps the outcome; ownership_lost at the end fails the turn', async () => {
    const begin = runTurn([], { actors: { beginTurn: rejecting(new OpenworkError('chat_state_error', 'two running turns')) } });
    await flush();
    expect(begin.out().outcome).toEqual({ status: 'failed', code: 'chat_state_error', message: 'two running turns' });
    // A plain object that merely carries the code string is not the conversation's refusal.
    const beginPlain = runTurn([], { actors: { beginTurn: rejecting({ code: 'chat_state_error', message: 'plain' }) } });
    await flush();
    expect(beginPlain.out().outcome).toEqual({ status: 'failed', code: 'persistence_error', message: 'plain' });
    const beginOther = runTurn([], { actors: { beginTurn: rejecting({ code: 'storage_unavailable', message: 'down' }) } });
    await flush();
    expect(beginOther.out().outcome).toEqual({ status: 'failed', code: 'persistence_error', message: 'down' });
    const persist = runTurn([answer('x')], { actors: { persistAssistantMessage: rejecting({ code: 'storage_unavailable', message: 'disk' }) } });
    await flush();
    expect(persist.out().outcome).toEqual({ status: 'failed', code: 'persistence_error', message: 'disk' });
    // A judged answer (structured output) cannot carry the turn's end: its end is written on its own.
    const judged = { answerJudged: true };
    const unrecorded = runTurn([answer('x')], { input: judged, actors: { finishTurn: stubPromise(false) } });
    await flush();
    expect(unrecorded.stubs.persistAssistantMessage.inputs[0]).toMatchObject({ end: null });
    expect(unrecorded.stubs.finishTurn.inputs[0]).toMatchObject({ recorded: false });
    expect(unrecorded.out()).toMatchObject({ outcome: { status: 'completed' }, endRecorded: false });
    const endFails = runTurn([answer('x')], { input: judged, actors: { finishTurn: rejecting({ code: 'storage_unavailable', message: 'down' }) } });
    await flush();
    expect(endFails.out()).toMatchObject({ outcome: { status: 'completed' }, endRecorded: false });
    const lost = runTurn([answer('x')], { input: judged, actors: { finishTurn: rejecting(new CommandError('ownership_lost', 'taken over')) } });
    await flush();
    expect(lost.out().outcome).toEqual({ status: 'failed', code: 'ownership_lost', message: 'taken over' });
    // Only the fence's CommandError is a lost lease: a plain object saying so is an unrecorded end.
    const lostPlain = runTurn([answer('x')], { input: judged, actors: { finishTurn: rejecting({ code: 'ownership_lost', message: 'plain' }) } });
    await flush();
    expect(lostPlain.out()).toMatchObject({ outcome: { status: 'completed' }, endRecorded: false });
  });

  it('a World State the turn cannot sample fails it with the sampler\'s code; structured output that does not fit fails it output_invalid', async () => {
    const sample = runTurn([{ events: [], error: new ModelCallSetupFailure('sample', new WorldStateError('skill_catalog_task_error', 'skills')) }]);
    await flush();
    expect(sample.out().outcome).toEqual({ status: 'failed', code: 'skill_catalog_task_error', message: 'skills' });
    // Begin turn reserved the call that was never made: the end takes it back.
    expect(sample.stubs.finishTurn.inputs[0]).toMatchObject({ unmadeModelCall: 1 });
    const storage = runTurn([{ events: [], error: new ModelCallSetupFailure('sample', new StorageError('down')) }]);
    await flush();
    expect(storage.out().outcome).toEqual({ status: 'failed', code: 'persistence_error', message: 'down' });
    const invalid = runTurn([answer('{}')], { input: { answerJudged: true }, actors: { persistAssistantMessage: stubPromise({ messageId: 'm', outputProblem: 'missing field a' }) } });
    await flush();
    expect(invalid.out()).toMatchObject({ outcome: { status: 'failed', code: 'output_invalid', message: 'missing field a' }, usage: USAGE });
  });

  it('the model call samples first: the Turn shows sampling until it hears from it; a cancel meanwhile ends the turn cancelled there, the reserved call given back', async () => {
    const t = runTurn(['sampling']);
    await flush();
    expect(t.state()).toEqual({ running_model: { streaming: 'sampling' } });
    // The first call was reserved by the turn's first fact: it has no counters to write.
    expect(t.stubs.callModel.inputs[0]).toMatchObject({ counted: true });
    t.child().send({ type: 'turn.cancel' });
    await flush();
    // The sampling in flight finishes first: the cancel is only noted.
    expect(t.state()).toEqual({ running_model: { streaming: 'sampling' } });
    // A counted call reports its sampling with its request's outcome (issue 14 point 3): the noted
    // cancel ends the turn on it, before the model is asked.
    t.stubs.callModel.live.subscriber!.next({ type: 'model.call_recorded', estimatedInputTokens: 1 });
    await flush();
    expect(t.out().outcome).toEqual({ status: 'cancelled' });
    expect(t.stubs.finishTurn.inputs[0]).toMatchObject({ outcome: { status: 'cancelled' }, unmadeModelCall: 1 });
    // Without a cancel a counted call goes from sampling straight to receiving: one macrostep.
    const c = runTurn(['sampling']);
    await flush();
    c.stubs.callModel.live.subscriber!.next({ type: 'model.call_recorded', estimatedInputTokens: 1 });
    await flush();
    expect(c.state()).toEqual({ running_model: { streaming: 'receiving' } });
    expect(c.child().getSnapshot().context).toMatchObject({ counts: { submissionCount: 1, reservedCall: 0 } });
    for (const event of answer('now').slice(1)) c.stubs.callModel.live.subscriber!.next(event);
    await flush();
    expect(c.out().outcome).toEqual({ status: 'completed', finalText: 'now' });
    // A call that writes its own counters reports the sampling apart and shows `requesting` meanwhile;
    // a cancel noted in `sampling` ends the turn as soon as it is sampled.
    const u = runTurn(['sampling']);
    await flush();
    u.child().send({ type: 'turn.cancel' });
    u.stubs.callModel.live.subscriber!.next({ type: 'model.sampled' });
    await flush();
    expect(u.out().outcome).toEqual({ status: 'cancelled' });
    const r = runTurn(['sampling']);
    await flush();
    r.stubs.callModel.live.subscriber!.next({ type: 'model.sampled' });
    await flush();
    expect(r.state()).toEqual({ running_model: { streaming: 'requesting' } });
    for (const event of answer('late')) r.stubs.callModel.live.subscriber!.next(event);
    await flush();
    expect(r.out().outcome).toEqual({ status: 'completed', finalText: 'late' });
  });

  it('stops at max_model_calls before a call over the limit', async () => {
    const t = runTurn([toolCalls('echo'), toolCalls('echo')], { input: { limits: { maxModelCalls: 2, doomLoopThreshold: 3 } } });
    t.stubs.runToolCall.state.failExecute = null;
    await flush();
    // Each call's tool runs until the test ends it.
    t.stubs.runToolCall.send({ type: 'tool.finished', result: OK });
    await flush();
    t.stubs.runToolCall.send({ type: 'tool.finished', result: OK });
    await flush();
    expect(t.out().outcome).toEqual({ status: 'failed', code: 'max_model_calls', message: 'the turn reached max_model_calls (2)' });
    expect(t.stubs.callModel.inputs).toHaveLength(2);
  });
});

describe('Turn machine (stub actors): compaction and steering', () => {
  it('an over-threshold request compacts first (once per logical call) and samples again; the compaction is published', async () => {
    const t = runTurn([[{ type: 'model.over_threshold', estimatedInputTokens: 900 }], answer('after')], { input: { compactAtTokens: 500 } });
    await flush();
    expect(t.stubs.compactConversation.inputs[0]).toMatchObject({ trigger: 'threshold', estimatedInputTokens: 900, triggerModelSpanId: null, modelCallIndex: 1 });
    expect(t.stubs.callModel.inputs.map((i: any) => i.samplingSequence)).toEqual([1, 2]);
    expect(t.stubs.callModel.inputs.map((i: any) => i.thresholdCompaction)).toEqual([true, false]);
    // The compaction came before the call was made: begin turn's reservation still counts it.
    expect(t.stubs.callModel.inputs.map((i: any) => i.counted)).toEqual([true, true]);
    expect(t.published()).toContainEqual({ type: 'conversation_compacted', compactionId: 'cp_1', kind: 'threshold', conversationTokensBefore: 900, conversationTokensAfter: 100 });
    expect(t.phases()).toEqual(['starting', 'running_model', 'compacting', 'running_model', 'completed']);
    expect(t.out().outcome).toEqual({ status: 'completed', finalText: 'after' });
  });

  it('a context overflow compacts and resubmits once; a second overflow, or one with compaction off, fails the turn model_error', async () => {
    const overflow = { events: [{ type: 'model.call_recorded' as const, estimatedInputTokens: 1 }], error: new ModelError('context_overflow', 'too long') };
    const once = runTurn([overflow, answer('ok')]);
    await flush();
    expect(once.stubs.compactConversation.inputs[0]).toMatchObject({ trigger: 'overflow', triggerModelSpanId: 'turn_1.model1' });
    expect(once.out().outcome).toEqual({ status: 'completed', finalText: 'ok' });
    const twice = runTurn([overflow, overflow], { actors: { compactConversation: stubPromise({ summarized: false, checkpointId: null, conversationTokensBefore: 1, conversationTokensAfter: 1 }) } });
    await flush();
    expect(twice.out().outcome).toEqual({ status: 'failed', code: 'model_error', message: 'too long' });
    expect(twice.published().filter((u) => u.type === 'conversation_compacted')).toEqual([]);
    const off = runTurn([overflow], { input: { compactionEnabled: false } });
    await flush();
    expect(off.out().outcome).toEqual({ status: 'failed', code: 'model_error', message: 'too long' });
    // An overflow after output of the call, or one that is not a ModelError, is not compacted.
    const late = runTurn([{ events: overflow.events, error: new ModelError('context_overflow', 'late', { semanticOutput: true }) }]);
    await flush();
    expect(late.out().outcome).toEqual({ status: 'failed', code: 'model_error', message: 'late' });
    const plain = runTurn([{ events: overflow.events, error: { code: 'context_overflow', message: 'plain' } }]);
    await flush();
    expect(plain.out().outcome).toEqual({ status: 'failed', code: 'model_error', message: 'plain' });
    expect([late, plain].flatMap((r) => r.stubs.compactConversation.inputs)).toEqual([]);
  });

  it('a failed compaction fails the turn compaction_error, and one that committed but could not install asks for a reload', async () => {
    // The scripted model takes its steps from the array it is given: a fresh one per turn.
    const threshold = () => [[{ type: 'model.over_threshold' as const, estimatedInputTokens: 900 }]];
    const t = runTurn(threshold(), { actors: { compactConversation: rejecting(new ReloadRequiredError('cp_1', new Error('installed nothing'))) } });
    await flush();
    expect(t.out()).toMatchObject({ outcome: { status: 'failed', code: 'compaction_error', message: 'checkpoint cp_1 was committed but could not be installed: installed nothing' }, reloadRequired: true });
    // Only the errors.ts class asks for a reload: a plain object saying reload_required does not.
    const plain = runTurn(threshold(), { actors: { compactConversation: rejecting({ code: 'reload_required', message: 'plain' }) } });
    await flush();
    expect(plain.out()).toMatchObject({ outcome: { status: 'failed', code: 'compaction_error', message: 'plain' }, reloadRequired: false });
    const failed = runTurn(threshold(), { actors: { compactConversation: rejecting(new CompactionError('summary invalid')) } });
    await flush();
    expect(failed.out()).toMatchObject({ outcome: { status: 'failed', code: 'compaction_error', message: 'summary invalid' }, reloadRequired: false });
  });

  it('steering input and agent mail are drained before the next model call; a final answer with input waiting takes one more round', async () => {
    const steer = { id: 'm2', role: 'user' as const, kind: 'normal' as const, content: [{ type: 'text' as const, text: 'also this' }] };
    const t = runTurn(['sampling', answer('second')], { input: { mailbox: [{ id: 'agent-msg:a', taskName: 't', kind: 'final_answer', body: 'b' }] } });
    await flush();
    expect(t.stubs.drainInbox.inputs[0]).toMatchObject({ mailbox: [{ id: 'agent-msg:a' }], pendingInput: [] });
    // Input that arrives while the model answers is waiting when the answer is stored: that answer
    // does not end the turn (its write carries no end), and the input gets one more round.
    t.child().send({ type: 'turn.steer', message: steer });
    const live = t.stubs.callModel.live.subscriber!;
    for (const event of [{ type: 'model.sampled' as const }, ...answer('first')]) live.next(event);
    await flush();
    expect(t.stubs.persistAssistantMessage.inputs[0]).toMatchObject({ end: null });
    expect(t.stubs.drainInbox.inputs[1]).toMatchObject({ mailbox: [], pendingInput: [steer] });
    expect(t.stubs.persistAssistantMessage.inputs[1]).toMatchObject({ end: { planUnfinishedStepCount: null } });
    expect(t.out()).toMatchObject({ outcome: { status: 'completed', finalText: 'second' }, usage: { inputTokens: 6, outputTokens: 4 }, pendingInput: [] });
  });

  it('a stop or steering input that arrives while a final answer that ends the turn is written comes after the end', async () => {
    const steer = { id: 'm2', role: 'user' as const, kind: 'normal' as const, content: [{ type: 'text' as const, text: 'too late' }] };
    const gate = deferred<{ messageId: string }>();
    const t = runTurn([answer('first')], { actors: { persistAssistantMessage: stubPromise(() => gate.promise) } });
    await flush();
    expect(t.stubs.persistAssistantMessage.inputs[0]).toMatchObject({ end: { planUnfinishedStepCount: null } });
    t.child().send({ type: 'turn.steer', message: steer });
    t.child().send({ type: 'turn.cancel' });
    gate.resolve({ messageId: 'm1' });
    await flush();
    // The turn ended with the answer's commit: completed, its end not written again, the input handed back.
    expect(t.out()).toMatchObject({ outcome: { status: 'completed', finalText: 'first' }, endRecorded: true, pendingInput: [steer] });
    expect(t.stubs.finishTurn.inputs).toMatchObject([{ outcome: { status: 'completed' }, recorded: true }]);
    expect(t.stubs.drainInbox.inputs).toHaveLength(0);
  });

  it('one model call spans the call and its commit: persisting is streaming.persisting in the same model slot; a stop there lets the commit finish once and runs no tool', async () => {
    const gate = deferred<{ messageId: string }>();
    const t = runTurn([toolCalls('echo')], { actors: { persistAssistantMessage: stubPromise(() => gate.promise) } });
    await flush();
    expect(t.state()).toEqual({ running_model: { streaming: 'persisting' } });
    // The run that streamed is the one that commits: no second run or actor for the write.
    expect(Object.keys(t.child().getSnapshot().children)).toEqual(['effects']);
    expect(t.stubs.callModel.inputs).toHaveLength(1);
    expect(t.stubs.persistAssistantMessage.inputs).toEqual([
      expect.objectContaining({ spanId: 'turn_1.model1', end: null, draft: expect.objectContaining({ toolCalls: [expect.objectContaining({ callId: 'call_1', name: 'echo' })] }) }),
    ]);
    t.child().send({ type: 'turn.stop' });
    t.child().send({ type: 'turn.cancel' });
    await flush();
    // The stop is noted; the write in flight is not abandoned.
    expect(t.state()).toEqual({ running_model: { streaming: 'persisting' } });
    expect(t.published()).not.toContainEqual({ type: 'draft_cleared', reason: 'committed' });
    gate.resolve({ messageId: 'm1' });
    await flush();
    // Committed once and announced after the commit; the batch's call is recorded cancelled, never run.
    expect(t.stubs.persistAssistantMessage.inputs).toHaveLength(1);
    expect(t.published()).toContainEqual({ type: 'draft_cleared', reason: 'committed' });
    expect(t.stubs.runToolCall.inputs).toEqual([]);
    expect(t.stubs.runToolCall.executed).toEqual([]);
    expect(t.stubs.recordCancelledCalls.inputs[0]).toMatchObject({ calls: [{ toolCallId: 'turn_1.tc1' }] });
    expect(t.out().outcome).toEqual({ status: 'failed', code: 'actor_stopped', message: 'the session actor stopped during the turn' });
  });
});

describe('Turn machine (stub actors): calls it runs itself', () => {
  it('validates, authorizes, runs and records a call, publishing its start and end, then asks the model again', async () => {
    const t = runTurn([toolCalls('echo'), answer('done')]);
    await flush();
    expect(t.state()).toEqual({ tools: { run: { executing: 'running' } } });
    expect(t.stubs.runToolCall.inputs[0]).toMatchObject({ toolCallId: 'turn_1.tc1', call: { callId: 'call_1', name: 'echo' }, parentSpanId: 'turn_1.model1', doomLoopThreshold: 3 });
    // One run actor: validated at once, then asked to authorise the parsed arguments and to run them.
    expect(t.stubs.runToolCall.authorized).toEqual([{}]);
    t.stubs.runToolCall.send({ type: 'tool.progress', progress: { kind: 'stdout', chunk: 'x' } });
    t.stubs.runToolCall.send({ type: 'tool.finished', result: OK });
    await flush();
    // The batch's last result reserves the next model call, which then writes no counters of its own.
    expect(t.stubs.runToolCall.recorded[0]).toMatchObject({ toolCallId: 'turn_1.tc1', result: OK, executed: true, resolvedName: 'echo', approval: { decision: 'none', source: 'sandbox' }, reserveModelCall: 2 });
    const tool = t.published().filter((u) => u.type.startsWith('tool_call'));
    expect(tool).toEqual([
      { type: 'tool_call_started', toolCallId: 'turn_1.tc1', providerCallId: 'call_1', toolName: 'echo', arguments: '{}', status: 'validating' },
      { type: 'tool_call_progress', toolCallId: 'turn_1.tc1', progress: { kind: 'stdout', chunk: 'x' } },
      { type: 'tool_call_finished', toolCallId: 'turn_1.tc1', providerCallId: 'call_1', toolName: 'echo', status: 'succeeded', text: 'done' },
    ]);
    expect(t.out().outcome).toEqual({ status: 'completed', finalText: 'done' });
    expect(t.stubs.callModel.inputs.map((i: any) => i.counted)).toEqual([true, true]);
    expect(t.stubs.finishTurn.inputs[0]).toMatchObject({ unmadeModelCall: 0 });
    // The chart counted the call for the doom-loop rule: its name and canonical arguments, once.
    expect(t.context().doom).toEqual({ signature: 'echo\u0000{}', count: 1 });
  });

  it('sends the updates of one macrostep as one session.publish, in the order the chart announced them (issue 14)', async () => {
    const t = runTurn([toolCalls('echo'), answer('done')]);
    await flush();
    t.stubs.runToolCall.send({ type: 'tool.progress', progress: { kind: 'stdout', chunk: 'x' } });
    t.stubs.runToolCall.send({ type: 'tool.finished', result: OK });
    await flush();
    const batches = t.sent('parent', 'session.publish').map((e) => e.updates.map((u: SessionUpdate) => (u.type === 'phase_changed' ? `phase:${u.phase}` : u.type)));
    expect(batches).toEqual([
      ['phase:starting'],
      ['phase:running_model'],
      // The answer is stored: its draft is cleared, the phase changes and the call starts, in one event.
      ['draft_cleared', 'phase:running_tools', 'tool_call_started'],
      ['tool_call_progress'],
      // The result is stored: the call finishes and the next model call begins, in one event.
      ['tool_call_finished', 'phase:running_model'],
      ['text_delta'],
      ['draft_cleared'],
      ['phase:completed', 'turn_finished'],
    ]);
  });

  it('an invalid call is recorded without authorisation; a rule deny and a missing sandbox are recorded as denied without running', async () => {
    const invalid: ToolResult = { status: 'failed', text: 'bad args', error: { code: 'invalid_arguments', message: 'bad args', retryable: false } };
    const v = runTurn([toolCalls('echo'), answer('ok')], { actors: { runToolCall: run({ validate: { kind: 'invalid', result: invalid, resolvedName: null } }) } });
    await flush();
    expect(v.stubs.runToolCall.authorized).toEqual([]);
    expect(v.stubs.runToolCall.recorded[0]).toMatchObject({ result: invalid, resolvedName: null, executed: false });
    for (const [source, code] of [['builtin', 'permission_denied'], ['sandbox_unavailable', 'sandbox_unavailable']] as const) {
      const d = runTurn([toolCalls('bash'), answer('ok')], { actors: { runToolCall: run({ authorize: { kind: 'deny', text: 'no', source } }) } });
      await flush();
      expect(d.stubs.runToolCall.executed).toEqual([]);
      expect(d.stubs.runToolCall.recorded[0]).toMatchObject({ result: { status: 'denied', text: 'no', error: { code } }, approval: { source } });
      expect(d.out().outcome.status).toBe('completed');
    }
  });

  it('a card already granted for the turn or the session runs at once; non-interactive, a card is refused', async () => {
    for (const grants of [{ sessionGrants: { env_1: ['bash:ls'] } }]) {
      const g = runTurn([toolCalls('bash'), answer('ok')], { input: grants, actors: { runToolCall: run({ authorize: { kind: 'card', card: CARD, at: 1 } }) } });
      await flush();
      expect(g.stubs.runToolCall.executed[0]).toMatchObject({ approval: { decision: 'grant', source: 'user', card: CARD } });
      expect(g.toolCallLog).toEqual([]);
    }
    const n = runTurn([toolCalls('bash'), answer('ok')], { input: { nonInteractive: true }, actors: { runToolCall: run({ authorize: { kind: 'card', card: CARD, at: 1 } }) } });
    await flush();
    expect(n.stubs.runToolCall.executed).toEqual([]);
    expect(n.stubs.runToolCall.recorded[0]).toMatchObject({
      result: { status: 'denied', text: NON_INTERACTIVE_REFUSAL_TEXT, error: { code: 'permission_denied' } },
      approval: { source: 'non_interactive', card: CARD },
    });
  });

  it('the doom-loop rule is the chart\'s guard over the validated call: the same call up to the threshold is refused, the turn ends doom_loop and the rest of the batch is not run', async () => {
    const limits = { maxModelCalls: 5, doomLoopThreshold: 2 };
    const text = "doom loop detected for tool 'echo'";
    const t = runTurn([toolCalls('echo', 'echo', 'echo')], { input: { limits } });
    await flush();
    t.stubs.runToolCall.send({ type: 'tool.finished', result: OK });
    await flush();
    // The second identical call: validated by the actor, refused by the chart before authorisation.
    expect(t.stubs.runToolCall.authorized).toEqual([{}]);
    expect(t.stubs.runToolCall.executed).toHaveLength(1);
    expect(t.stubs.runToolCall.recorded[1]).toMatchObject({
      toolCallId: 'turn_1.tc2',
      result: { status: 'failed', text, error: { code: 'execution_failed', message: text, retryable: false } },
      resolvedName: 'echo',
      approval: { source: 'system' },
      executed: false,
    });
    expect(t.out().outcome).toEqual({ status: 'failed', code: 'doom_loop', message: text });
    // The batch's last call: its result ends the turn, so it reserves no model call.
    const last = runTurn([toolCalls('echo', 'echo')], { input: { limits } });
    await flush();
    last.stubs.runToolCall.send({ type: 'tool.finished', result: OK });
    await flush();
    expect(last.out().outcome).toEqual({ status: 'failed', code: 'doom_loop', message: text });
    expect(last.stubs.runToolCall.recorded[1]).toMatchObject({ result: { text }, reserveModelCall: 0 });
    expect(last.stubs.finishTurn.inputs[0]).toMatchObject({ unmadeModelCall: 0 });
    // Other arguments start the count again; key order does not count.
    const args = ['{"a":1,"b":2}', '{"b":2,"a":1}', '{"a":2}'];
    const varied = runTurn([[{ type: 'model.call_recorded', estimatedInputTokens: 10 }, ...args.map((a, i) => ({ type: 'model.tool_call' as const, callId: `call_${i + 1}`, name: 'echo', arguments: a })), { type: 'model.completed', usage: USAGE }]], {
      input: { limits: { maxModelCalls: 5, doomLoopThreshold: 3 } },
      actors: { runToolCall: run({ validate: (i: { call: { arguments: string } }) => ({ kind: 'registered', args: JSON.parse(i.call.arguments) }) }) },
    });
    for (let i = 0; i < 3; i++) {
      await flush();
      varied.stubs.runToolCall.send({ type: 'tool.finished', result: OK });
    }
    await flush();
    expect(varied.stubs.runToolCall.executed).toHaveLength(3);
    expect(varied.context().doom).toEqual({ signature: 'echo\u0000{"a":2}', count: 1 });
    // wait_agent is outside identical-call counting: even at a threshold of one it is not refused.
    const wait = runTurn([toolCalls('wait_agent')], { input: { limits: { maxModelCalls: 5, doomLoopThreshold: 1 } }, actors: { runToolCall: run({ validate: { kind: 'control', args: {} } }) } });
    await flush();
    expect(wait.toolCallLog[0]!.input.start).toEqual({ kind: 'control', args: {}, doom: { signature: null, count: 0 } });
    expect(t.stubs.recordCancelledCalls.inputs[0]).toMatchObject({ calls: [{ toolCallId: 'turn_1.tc3', call: { callId: 'call_3' } }], parentSpanId: 'turn_1.model1' });
    expect(t.published()).toContainEqual(
      expect.objectContaining({ type: 'tool_call_finished', toolCallId: 'turn_1.tc3', status: 'cancelled', text: REMAINING_CALL_TEXT }),
    );
  });

  it('a cancel while the call is validated or authorised records it cancelled before it ran; while it runs, the tool is told and the turn ends cancelled', async () => {
    const gate = deferred<AuthorizationOutput>();
    const a = runTurn([toolCalls('bash')], { actors: { runToolCall: run({ authorize: () => gate.promise }) } });
    await flush();
    expect(a.state()).toEqual({ tools: { run: 'authorizing' } });
    a.child().send({ type: 'turn.cancel' });
    await flush();
    expect(a.stubs.runToolCall.recorded[0]).toMatchObject({ result: { status: 'cancelled', error: { code: 'cancelled' } }, executed: false });
    expect(a.out().outcome).toEqual({ status: 'cancelled' });
    // A cancel while it is validated: it is not authorised at all.
    const validating = deferred<ValidatedCall>();
    const v = runTurn([toolCalls('bash')], { actors: { runToolCall: run({ validate: () => validating.promise }) } });
    await flush();
    expect(v.state()).toEqual({ tools: { run: 'validating' } });
    v.child().send({ type: 'turn.cancel' });
    validating.resolve({ kind: 'registered', args: {} });
    await flush();
    expect(v.stubs.runToolCall.authorized).toEqual([]);
    expect(v.stubs.runToolCall.recorded[0]).toMatchObject({ result: { status: 'cancelled', error: { code: 'cancelled' } }, executed: false });
    expect(v.out().outcome).toEqual({ status: 'cancelled' });
    const r = runTurn([toolCalls('bash', 'echo')]);
    await flush();
    r.child().send({ type: 'turn.cancel' });
    expect(r.stubs.runToolCall.received).toEqual([{ type: 'toolcall.cancel' }]);
    r.stubs.runToolCall.send({ type: 'tool.finished', result: { status: 'cancelled', text: 'killed' } });
    await flush();
    expect(r.out().outcome).toEqual({ status: 'cancelled' });
    expect(r.stubs.recordCancelledCalls.inputs[0].calls.map((c: any) => c.toolCallId)).toEqual(['turn_1.tc2']);
  });

  it('a cancel or a stop while the result is written is only noted: the one write ends the call, its result announced once, then the turn ends', async () => {
    for (const command of ['turn.cancel', 'turn.stop'] as const) {
      const write = deferred<ToolResult>();
      const t = runTurn([toolCalls('echo', 'echo'), answer('never')], { actors: { runToolCall: run({ record: () => write.promise }) } });
      await flush();
      t.stubs.runToolCall.send({ type: 'tool.finished', result: OK });
      await flush();
      expect(t.state()).toEqual({ tools: { run: 'recording' } });
      t.child().send({ type: command });
      t.child().send({ type: command });
      await flush();
      // Still the same write: nothing was abandoned, nothing asked to write again.
      expect(t.state()).toEqual({ tools: { run: 'recording' } });
      expect(t.stubs.runToolCall.recorded).toHaveLength(1);
      write.resolve(OK);
      await flush();
      expect(t.published().filter((u) => u.type === 'tool_call_finished').map((u) => [u.toolCallId, u.status])).toEqual([
        ['turn_1.tc1', 'succeeded'],
        ['turn_1.tc2', 'cancelled'],
      ]);
      expect(t.stubs.runToolCall.recorded).toHaveLength(1);
      expect(t.stubs.recordCancelledCalls.inputs[0].calls.map((c: any) => c.toolCallId)).toEqual(['turn_1.tc2']);
      expect(t.out().outcome).toMatchObject(command === 'turn.cancel' ? { status: 'cancelled' } : { status: 'failed', code: 'actor_stopped' });
    }
  });

  it('a cancel while its tool runs enters tools.run.executing.stopping and asks the tool once; a tool that confirms within the grace is recorded as it answered', async () => {
    const clock = new SimulatedClock();
    const t = runTurn([toolCalls('bash')], { clock, graceMs: 3_000 });
    await flush();
    t.child().send({ type: 'turn.cancel' });
    expect(t.state()).toEqual({ tools: { run: { executing: 'stopping' } } });
    expect(directCallStatusOf(t.child().getSnapshot())).toEqual({ toolCallId: 'turn_1.tc1', status: 'executing' });
    t.child().send({ type: 'turn.cancel' });
    expect(t.stubs.runToolCall.received).toEqual([{ type: 'toolcall.cancel' }]);
    clock.increment(2_999);
    t.stubs.runToolCall.send({ type: 'tool.finished', result: { status: 'cancelled', text: '[cancelled; duration 7 ms]' } });
    await flush();
    clock.increment(10_000);
    await flush();
    expect(t.stubs.runToolCall.recorded).toHaveLength(1);
    expect(t.stubs.runToolCall.recorded[0]).toMatchObject({ result: { status: 'cancelled', text: '[cancelled; duration 7 ms]' }, executed: true });
    expect(t.out().outcome).toEqual({ status: 'cancelled' });
  });

  it('a tool that does not confirm its stop within the grace (on the simulated clock) is recorded outcome_unknown; a stop ends the turn actor_stopped', async () => {
    const clock = new SimulatedClock();
    const t = runTurn([toolCalls('bash', 'echo')], { clock, graceMs: 3_000 });
    await flush();
    t.child().send({ type: 'turn.cancel' });
    clock.increment(2_999);
    await flush();
    expect(t.state()).toEqual({ tools: { run: { executing: 'stopping' } } });
    expect(t.stubs.runToolCall.recorded).toEqual([]);
    clock.increment(1);
    await flush();
    expect(t.stubs.runToolCall.recorded[0]).toMatchObject({ result: { status: 'outcome_unknown', text: UNCONFIRMED_STOP_TEXT, error: { code: 'outcome_unknown' } }, executed: true });
    expect(t.stubs.recordCancelledCalls.inputs[0].calls.map((c: any) => c.toolCallId)).toEqual(['turn_1.tc2']);
    expect(t.out().outcome).toEqual({ status: 'cancelled' });
    // A stop, with the default grace.
    const s = runTurn([toolCalls('bash')], { clock });
    await flush();
    s.child().send({ type: 'turn.stop' });
    expect(s.stubs.runToolCall.received).toEqual([{ type: 'toolcall.cancel' }]);
    clock.increment(DEFAULT_TOOL_CANCEL_GRACE_MS);
    await flush();
    expect(s.stubs.runToolCall.recorded[0]).toMatchObject({ result: { status: 'outcome_unknown', text: UNCONFIRMED_STOP_TEXT } });
    expect(s.out().outcome).toMatchObject({ status: 'failed', code: 'actor_stopped' });
  });

  it('a run that cannot start its tool (the session is gone) is a failed result, recorded like any other, and the model is asked again', async () => {
    const t = runTurn([toolCalls('echo'), answer('ok')]);
    t.stubs.runToolCall.state.failExecute = new CommandError('actor_stopped', 'session ses_1 is not loaded');
    await flush();
    expect(t.stubs.runToolCall.executed).toHaveLength(1);
    expect(t.stubs.runToolCall.recorded[0]).toMatchObject({
      result: { status: 'failed', text: 'session ses_1 is not loaded', error: { code: 'execution_failed' } },
      executed: false,
    });
    expect(t.published()).toContainEqual(expect.objectContaining({ type: 'tool_call_finished', status: 'failed', text: 'session ses_1 is not loaded' }));
    expect(t.out().outcome).toEqual({ status: 'completed', finalText: 'ok' });
  });

  it('a result that cannot be recorded ends the turn with the write\'s code, and validation or authorisation that throws is a failed result', async () => {
    // The write is classified by its class: the fence's CommandError('ownership_lost').
    const lost = runTurn([toolCalls('echo')], { actors: { runToolCall: run({ record: () => Promise.reject(new CommandError('ownership_lost', 'taken')) }) } });
    await flush();
    lost.stubs.runToolCall.send({ type: 'tool.finished', result: OK });
    await flush();
    expect(lost.out().outcome).toEqual({ status: 'failed', code: 'ownership_lost', message: 'taken' });
    const broken = runTurn([toolCalls('echo'), answer('ok')], { actors: { runToolCall: run({ validate: () => Promise.reject(new Error('zod blew up')) }) } });
    await flush();
    expect(broken.stubs.runToolCall.authorized).toEqual([]);
    expect(broken.stubs.runToolCall.recorded[0]).toMatchObject({ result: { status: 'failed', text: 'tool call validation failed: zod blew up' }, executed: false });
    const unauthorized = runTurn([toolCalls('echo'), answer('ok')], { actors: { runToolCall: run({ authorize: () => Promise.reject(new Error('policy unreadable')) }) } });
    await flush();
    expect(unauthorized.stubs.runToolCall.executed).toEqual([]);
    expect(unauthorized.stubs.runToolCall.recorded[0]).toMatchObject({ result: { status: 'failed', text: 'authorization failed: policy unreadable' }, executed: false });
    expect(unauthorized.out().outcome).toEqual({ status: 'completed', finalText: 'ok' });
  });

  it('a cancel while the model streams stops it at once: the draft is discarded and the turn ends cancelled; a stop ends it actor_stopped', async () => {
    const c = runTurn(['hang']);
    await flush();
    c.child().send({ type: 'turn.cancel' });
    await flush();
    expect(c.out().outcome).toEqual({ status: 'cancelled' });
    expect(c.published()).toContainEqual({ type: 'draft_cleared', reason: 'discarded' });
    expect(c.stubs.persistAssistantMessage.inputs).toEqual([]);
    const s = runTurn(['hang']);
    await flush();
    s.child().send({ type: 'turn.stop' });
    await flush();
    expect(s.out().outcome).toEqual({ status: 'failed', code: 'actor_stopped', message: 'the session actor stopped during the turn' });
  });

  it('leaving streaming stops the model call in the effects actor at once, before the turn ends: nothing it sends later reaches the Turn', async () => {
    const end = deferred<boolean>();
    const t = runTurn(['hang'], { actors: { finishTurn: stubPromise(() => end.promise) } });
    await flush();
    expect(t.stubs.callModel.live.stops).toBe(0);
    t.child().send({ type: 'turn.cancel' });
    await flush();
    // The turn waits for its end's write: the effects actor lives on, the call in it is stopped.
    expect(t.state()).toBe('ending');
    expect(Object.keys(t.child().getSnapshot().children).sort()).toEqual(['effects', 'finishTurn']);
    expect(t.stubs.callModel.live.stops).toBe(1);
    t.stubs.callModel.live.subscriber!.next({ type: 'model.text_delta', delta: 'late' });
    t.stubs.callModel.live.subscriber!.next({ type: 'model.completed', usage: USAGE });
    await flush();
    expect(t.published().filter((u) => u.type === 'text_delta')).toEqual([{ type: 'text_delta', delta: 'partial' }]);
    end.resolve(true);
    await flush();
    expect(t.out().outcome).toEqual({ status: 'cancelled' });
    expect(t.stubs.callModel.live.stops).toBe(1);
  });
});

describe('Turn machine (stub actors): a call that waits (the tool-call machine is a stub)', () => {
  it('a card to ask spawns the tool-call machine with what was decided; the Turn shows the card, relays the decision and keeps the grants', async () => {
    const t = runTurn([toolCalls('bash'), answer('ok')], { actors: { runToolCall: run({ authorize: { kind: 'card', card: CARD, at: 7 } }) } });
    await flush();
    expect(t.toolCallLog[0]!.input).toMatchObject({ toolCallId: 'turn_1.tc1', start: { kind: 'card', card: CARD, at: 7, args: {}, doom: { signature: 'bash\u0000{}', count: 1 } } });
    const call = () => t.child().getSnapshot().children.toolCall!;
    call().send({ type: 'stub.send', event: { type: 'toolcall.permission_requested', toolCallId: 'turn_1.tc1', card: CARD } });
    expect(t.state()).toEqual({ tools: { call: 'waiting_permission' } });
    expect(t.published()).toContainEqual({ type: 'permission_requested', toolCallId: 'turn_1.tc1', card: CARD });
    t.child().send({ type: 'turn.decide', toolCallId: 'turn_1.tc1', decision: 'allow_for_turn', at: 9 });
    expect(t.toolCallLog[0]!.events).toEqual([{ type: 'toolcall.decide', decision: 'allow_for_turn', at: 9 }]);
    call().send({ type: 'stub.send', event: { type: 'toolcall.granted', scope: 'turn', environmentId: 'env_1', grantKey: 'bash:ls' } });
    call().send({ type: 'stub.send', event: { type: 'toolcall.granted', scope: 'session', environmentId: 'env_2', grantKey: 'k' } });
    call().send({ type: 'stub.send', event: { type: 'toolcall.permission_resolved', toolCallId: 'turn_1.tc1', decision: 'allow_for_turn' } });
    expect(t.context()).toMatchObject({ host: { turnGrants: { env_1: ['bash:ls'] }, sessionGrants: { env_2: ['k'] } }, pendingApprovals: [] });
    expect(t.sent('parent', 'turn.granted')).toEqual([
      { type: 'turn.granted', scope: 'turn', environmentId: 'env_1', grantKey: 'bash:ls' },
      { type: 'turn.granted', scope: 'session', environmentId: 'env_2', grantKey: 'k' },
    ]);
    const output: ToolCallOutput = { waitTimedOut: null, toolCallId: 'turn_1.tc1', providerCallId: 'call_1', toolName: 'bash', result: OK, recorded: true, terminal: null, doom: { signature: 's', count: 1 }, plan: null };
    call().send({ type: 'stub.finish', output });
    await flush();
    expect(t.out().outcome).toEqual({ status: 'completed', finalText: 'ok' });
    expect(t.phases()).toEqual(['starting', 'running_model', 'running_tools', 'waiting_permission', 'running_tools', 'running_model', 'completed']);
  });

  it('a cancel or stop reaches the waiting call; its terminal ends the turn', async () => {
    for (const [event, relayed] of [['turn.cancel', 'toolcall.cancel'], ['turn.stop', 'toolcall.stop']] as const) {
      const t = runTurn([toolCalls('request_user_input')], { actors: { runToolCall: run({ validate: { kind: 'control', args: { questions: [] } } }) } });
      await flush();
      expect(t.toolCallLog[0]!.input.start).toEqual({ kind: 'control', args: { questions: [] }, doom: { signature: 'request_user_input\u0000{"questions":[]}', count: 1 } });
      t.child().send({ type: event });
      expect(t.toolCallLog[0]!.events).toEqual([{ type: relayed }]);
      const code = event === 'turn.cancel' ? 'cancelled' : 'actor_stopped';
      t.child().getSnapshot().children.toolCall!.send({
        type: 'stub.finish',
        output: { waitTimedOut: null, toolCallId: 'turn_1.tc1', providerCallId: 'call_1', toolName: 'request_user_input', result: OK, recorded: true, terminal: { code, message: 'm' }, doom: { signature: null, count: 0 }, plan: null },
      });
      await flush();
      expect(t.out().outcome).toEqual(code === 'cancelled' ? { status: 'cancelled' } : { status: 'failed', code: 'actor_stopped', message: 'm' });
    }
  });

  it('consecutive wait_agent timeouts reaching the doom-loop threshold end the turn doom_loop', async () => {
    const control = run({ validate: { kind: 'control', args: {} } });
    const t = runTurn([toolCalls('wait_agent'), toolCalls('wait_agent')], { input: { limits: { maxModelCalls: 5, doomLoopThreshold: 2 } }, actors: { runToolCall: control } });
    const timedOut = (n: number): ToolCallOutput => ({ waitTimedOut: true, toolCallId: `turn_1.tc${n}`, providerCallId: 'call_1', toolName: 'wait_agent', result: { status: 'succeeded', text: 'timed out' }, recorded: true, terminal: null, doom: { signature: null, count: 0 }, plan: null });
    await flush();
    t.child().getSnapshot().children.toolCall!.send({ type: 'stub.finish', output: timedOut(1) });
    await flush();
    expect(t.context().counts.waitTimeouts).toBe(1);
    t.child().getSnapshot().children.toolCall!.send({ type: 'stub.finish', output: timedOut(2) });
    await flush();
    expect(t.out().outcome).toEqual({ status: 'failed', code: 'doom_loop', message: "doom loop detected for tool 'wait_agent'" });
  });
});
