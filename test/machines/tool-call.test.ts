/**
 * The tool-call machine alone, its effects stubs (issue 19 point 7): a call that waits for a card
 * (decide, cancel, stop), runs (progress, a cancel while the tool runs, a tool that throws) and is
 * recorded (or the write fails), and the control tools (update_plan, request_user_input, the agent
 * tools). It runs under recording parents, as under its Turn and Session. No storage or tool runs.
 *
 * The machine is main's `src/machines/tool-call/` (machine, ports, outcomes), imported through the
 * old path `machines/tool-call.ts`; a refused write is classified by the `errors.ts` class thrown
 * (`CommandError('ownership_lost')`, an `OpenworkError` coded `chat_state_error`), as the store
 * throws them, so the stubs reject with those classes.
 */
import { describe, expect, it } from 'vitest';
import { CommandError, OpenworkError, StorageError } from '../../src/errors.js';
import { SimulatedClock } from 'xstate';
import { toolCallMachine, USER_DENIED_TEXT, CANCELLED_BEFORE_RUN_TEXT, UNANSWERED_TEXT, ACTOR_STOPPED_TEXT } from '../../src/machines/tool-call.js';
import { cancelGraceDelays, DEFAULT_TOOL_CANCEL_GRACE_MS } from '../../src/machines/tool-call/cancel-grace.js';
import { liveToolCallOf } from '../../src/machines/tool-call/machine.js';
import { UNCONFIRMED_STOP_TEXT } from '../../src/protocol/model-texts.js';
import type { ToolCallInput, ToolCallOutput } from '../../src/machines/types.js';
import { answersResultText } from '../../src/protocol/user-input.js';
import type { ToolResult } from '../../src/services/tools/define.js';
import { CARD, deferred, flush, rejecting, stubExecute, stubPromise, underParents } from '../support/machine-stubs.js';


const DOOM = { signature: 'sig', count: 1 };

function input(name: string, start: ToolCallInput['start'], args: unknown = { command: 'ls' }): ToolCallInput {
  return {
    sessionId: 'ses_1',
    turnId: 'turn_1',
    toolCallId: 'turn_1.tc1',
    call: { type: 'tool_call', callId: 'call_1', name, arguments: JSON.stringify(args) },
    permissionMode: 'auto',
    permissionModeOrigin: 'session_default',
    nonInteractive: false,
    turnGrants: {},
    sessionGrants: {},
    doom: { signature: null, count: 0 },
    doomLoopThreshold: 3,
    parentSpanId: 'turn_1.model1',
    start,
  };
}

const cardStart = (args: unknown = { command: 'ls' }): ToolCallInput['start'] => ({ kind: 'card', card: CARD, at: 100, args, doom: DOOM });
const controlStart = (args: unknown): ToolCallInput['start'] => ({ kind: 'control', args, doom: DOOM });

/**
 * The machine with stub effects: `record` answers the result as stored (the real one makes it
 * storable). `clock` measures its `after` delays (the cancel grace, `graceMs` when given).
 */
function run(callInput: ToolCallInput, actors: Record<string, unknown> = {}, timing: { clock?: SimulatedClock; graceMs?: number } = {}) {
  const execute = stubExecute();
  const record = stubPromise<ToolResult, { result: ToolResult }>((i) => i.result);
  const logic = toolCallMachine.provide({
    actors: { executeTool: execute, recordToolResult: record, ...actors } as never,
    ...(timing.graceMs !== undefined ? { delays: cancelGraceDelays(timing.graceMs) } : {}),
  });
  const running = underParents(logic, callInput, timing.clock);
  return { ...running, execute, record, state: () => running.child().getSnapshot().value, out: () => running.output() as ToolCallOutput };
}

const OK: ToolResult = { status: 'succeeded', text: 'a\nb' };

describe('tool-call machine (stub actors): a call that waits for a card', () => {
  it('asks its Turn, and on a deny records the denial without running the tool; the turn ends permission_denied', async () => {
    const r = run(input('bash', cardStart()));
    expect(r.state()).toBe('waiting_permission');
    expect(r.sent('parent', 'toolcall.permission_requested')).toEqual([{ type: 'toolcall.permission_requested', toolCallId: 'turn_1.tc1', card: CARD }]);
    r.child().send({ type: 'toolcall.decide', decision: 'deny', at: 150 });
    await flush();
    expect(r.execute.inputs).toEqual([]);
    expect(r.sent('parent', 'toolcall.permission_resolved')).toEqual([{ type: 'toolcall.permission_resolved', toolCallId: 'turn_1.tc1', decision: 'deny' }]);
    expect(r.record.inputs[0]).toMatchObject({
      result: { status: 'denied', text: USER_DENIED_TEXT, error: { code: 'permission_denied', message: USER_DENIED_TEXT, retryable: false } },
      approval: { decision: 'deny', source: 'user', card: CARD, requestedAt: 100, decidedAt: 150 },
      executed: false,
    });
    expect(r.out()).toMatchObject({ recorded: true, terminal: { code: 'permission_denied', message: 'the user denied a tool call' }, doom: DOOM });
    expect(r.sent('grandparent', 'session.publish').flatMap((e) => e.updates)).toEqual([
      {
        type: 'tool_call_finished',
        toolCallId: 'turn_1.tc1',
        providerCallId: 'call_1',
        toolName: 'bash',
        status: 'denied',
        text: USER_DENIED_TEXT,
        error: { code: 'permission_denied', message: USER_DENIED_TEXT, retryable: false },
      },
    ]);
  });

  it('on allow_for_turn tells its Turn the grant, runs the tool with the approval, publishes its progress to the Session and records its result', async () => {
    const r = run(input('bash', cardStart()));
    r.child().send({ type: 'toolcall.decide', decision: 'allow_for_turn', at: 150 });
    expect(r.state()).toEqual({ executing: 'running' });
    expect(r.sent('parent', 'toolcall.granted')).toEqual([{ type: 'toolcall.granted', scope: 'turn', environmentId: 'env_1', grantKey: 'bash:ls' }]);
    expect(r.execute.inputs[0]).toMatchObject({
      toolCallId: 'turn_1.tc1',
      providerCallId: 'call_1',
      toolName: 'bash',
      args: { command: 'ls' },
      approval: { decision: 'allow_for_turn', source: 'user', decidedAt: 150 },
    });
    r.execute.send({ type: 'tool.progress', progress: { kind: 'stdout', chunk: 'a\n' } });
    r.execute.send({ type: 'tool.finished', result: OK });
    await flush();
    expect(r.record.inputs[0]).toMatchObject({ result: OK, executed: true, resolvedName: 'bash' });
    // Only the Turn's direct call reserves the next model call with its result; a waiting call does not.
    expect((r.record.inputs[0] as { reserveModelCall?: number }).reserveModelCall ?? 0).toBe(0);
    expect(r.out()).toMatchObject({ recorded: true, terminal: null, result: OK, waitTimedOut: null, plan: null });
    expect(r.sent('grandparent', 'session.publish').flatMap((e) => e.updates.map((u: { type: string }) => u.type))).toEqual(['tool_call_progress', 'tool_call_finished']);
  });

  it('allow_for_session is a session grant; a plain allow grants nothing', () => {
    const a = run(input('bash', cardStart()));
    a.child().send({ type: 'toolcall.decide', decision: 'allow_for_session', at: 1 });
    expect(a.sent('parent', 'toolcall.granted')).toEqual([{ type: 'toolcall.granted', scope: 'session', environmentId: 'env_1', grantKey: 'bash:ls' }]);
    const b = run(input('bash', cardStart()));
    b.child().send({ type: 'toolcall.decide', decision: 'allow_once', at: 1 });
    expect(b.sent('parent', 'toolcall.granted')).toEqual([]);
  });

  it('a cancel while the card waits records the call as cancelled before it ran; a stop records its outcome as unknown', async () => {
    const c = run(input('bash', cardStart()));
    c.child().send({ type: 'toolcall.cancel' });
    await flush();
    expect(c.sent('parent', 'toolcall.permission_resolved')).toEqual([{ type: 'toolcall.permission_resolved', toolCallId: 'turn_1.tc1', decision: 'cancelled' }]);
    expect(c.out()).toMatchObject({
      result: { status: 'cancelled', text: CANCELLED_BEFORE_RUN_TEXT },
      terminal: { code: 'cancelled' },
      recorded: true,
    });
    const s = run(input('bash', cardStart()));
    s.child().send({ type: 'toolcall.stop' });
    await flush();
    expect(s.sent('parent', 'toolcall.permission_resolved')).toEqual([{ type: 'toolcall.permission_resolved', toolCallId: 'turn_1.tc1', decision: 'actor_stopped' }]);
    expect(s.out()).toMatchObject({ result: { status: 'outcome_unknown', text: ACTOR_STOPPED_TEXT }, terminal: { code: 'actor_stopped' } });
    expect([...c.execute.inputs, ...s.execute.inputs]).toEqual([]);
  });

  it('a cancel while the tool runs reaches the tool, and the turn ends cancelled whatever the tool answered; a stop ends it actor_stopped', async () => {
    const c = run(input('bash', cardStart()));
    c.child().send({ type: 'toolcall.decide', decision: 'allow_once', at: 1 });
    c.child().send({ type: 'toolcall.cancel' });
    expect(c.execute.received).toEqual([{ type: 'toolcall.cancel' }]);
    c.execute.send({ type: 'tool.finished', result: OK });
    await flush();
    expect(c.out()).toMatchObject({ result: OK, terminal: { code: 'cancelled', message: 'the turn was cancelled' }, recorded: true });
    const s = run(input('bash', cardStart()));
    s.child().send({ type: 'toolcall.decide', decision: 'allow_once', at: 1 });
    s.child().send({ type: 'toolcall.stop' });
    expect(s.execute.received).toEqual([{ type: 'toolcall.cancel' }]);
    s.execute.send({ type: 'tool.finished', result: { status: 'cancelled', text: 'killed' } });
    await flush();
    expect(s.out()).toMatchObject({ terminal: { code: 'actor_stopped' } });
  });

  it('a cancel enters executing.stopping, which asks the tool to stop once; a tool that confirms within the grace is recorded as it answered', async () => {
    const clock = new SimulatedClock();
    const c = run(input('bash', cardStart()), {}, { clock, graceMs: 2_000 });
    c.child().send({ type: 'toolcall.decide', decision: 'allow_once', at: 1 });
    expect(c.state()).toEqual({ executing: 'running' });
    c.child().send({ type: 'toolcall.cancel' });
    expect(c.state()).toEqual({ executing: 'stopping' });
    expect(liveToolCallOf(c.child().getSnapshot())).toEqual({ status: 'executing' });
    // A second cancel and a stop are noted, not sent again: the tool was asked once.
    c.child().send({ type: 'toolcall.cancel' });
    c.child().send({ type: 'toolcall.stop' });
    expect(c.execute.received).toEqual([{ type: 'toolcall.cancel' }]);
    clock.increment(1_999);
    expect(c.state()).toEqual({ executing: 'stopping' });
    c.execute.send({ type: 'tool.finished', result: { status: 'cancelled', text: '[cancelled; duration 5 ms]' } });
    await flush();
    // The grace no longer fires once the call has left `stopping`.
    clock.increment(10_000);
    await flush();
    expect(c.record.inputs).toHaveLength(1);
    expect(c.out()).toMatchObject({ result: { status: 'cancelled', text: '[cancelled; duration 5 ms]' }, terminal: { code: 'actor_stopped' }, recorded: true });
  });

  it('a tool that does not confirm its stop within the grace (on the simulated clock) is recorded outcome_unknown, and its late answer is dropped', async () => {
    const clock = new SimulatedClock();
    const c = run(input('bash', cardStart()), {}, { clock, graceMs: 2_000 });
    c.child().send({ type: 'toolcall.decide', decision: 'allow_once', at: 1 });
    c.child().send({ type: 'toolcall.cancel' });
    clock.increment(1_999);
    await flush();
    expect(c.state()).toEqual({ executing: 'stopping' });
    expect(c.record.inputs).toEqual([]);
    clock.increment(1);
    await flush();
    expect(c.record.inputs).toHaveLength(1);
    expect(c.record.inputs[0]).toMatchObject({ result: { status: 'outcome_unknown', text: UNCONFIRMED_STOP_TEXT }, executed: true });
    expect(c.out()).toMatchObject({
      result: { status: 'outcome_unknown', text: UNCONFIRMED_STOP_TEXT, error: { code: 'outcome_unknown', message: UNCONFIRMED_STOP_TEXT, retryable: false } },
      terminal: { code: 'cancelled', message: 'the turn was cancelled' },
      recorded: true,
    });
    // A stop instead of a cancel ends the turn actor_stopped, with the default grace of 10 s.
    const s = run(input('bash', cardStart()), {}, { clock });
    s.child().send({ type: 'toolcall.decide', decision: 'allow_once', at: 1 });
    s.child().send({ type: 'toolcall.stop' });
    clock.increment(DEFAULT_TOOL_CANCEL_GRACE_MS - 1);
    await flush();
    expect(s.state()).toEqual({ executing: 'stopping' });
    clock.increment(1);
    await flush();
    expect(s.out()).toMatchObject({ result: { status: 'outcome_unknown', text: UNCONFIRMED_STOP_TEXT }, terminal: { code: 'actor_stopped' } });
  });

  it('a tool that throws is recorded as failed execution_failed; a tool that reports cancelled ends the turn cancelled', async () => {
    const t = run(input('bash', cardStart()));
    t.execute.state.fail = new Error('spawn failed');
    t.child().send({ type: 'toolcall.decide', decision: 'allow_once', at: 1 });
    await flush();
    expect(t.out()).toMatchObject({
      result: { status: 'failed', text: 'spawn failed', error: { code: 'execution_failed', message: 'spawn failed', retryable: false } },
      terminal: null,
    });
    const c = run(input('bash', cardStart()));
    c.child().send({ type: 'toolcall.decide', decision: 'allow_once', at: 1 });
    c.execute.send({ type: 'tool.finished', result: { status: 'cancelled', text: 'interrupted' } });
    await flush();
    expect(c.out()).toMatchObject({ terminal: { code: 'cancelled' } });
  });

  it('a refused write of the result ends the turn: ownership_lost, chat_state_error, else persistence_error; nothing is announced as finished', async () => {
    for (const [error, terminal] of [
      [new CommandError('ownership_lost', 'write refused: fence'), 'ownership_lost'],
      [new OpenworkError('chat_state_error', 'write refused: no such call'), 'chat_state_error'],
      [new StorageError('write refused: disk'), 'persistence_error'],
      // Only the classes count: a plain object that merely says `ownership_lost` is a storage failure.
      [{ code: 'ownership_lost', message: 'write refused: plain object' }, 'persistence_error'],
    ] as const) {
      const r = run(input('bash', cardStart()), { recordToolResult: rejecting(error) });
      r.child().send({ type: 'toolcall.decide', decision: 'deny', at: 1 });
      await flush();
      expect(r.out()).toMatchObject({ recorded: false, terminal: { code: terminal, message: error.message } });
      expect(r.sent('grandparent', 'session.publish')).toEqual([]);
    }
  });
});

describe('tool-call machine (stub actors): control tools', () => {
  const PLAN = { explanation: 'why', steps: [{ step: 'one', status: 'pending' }], updatedAt: 5 } as never;

  it('update_plan commits the plan itself (no separate record), then publishes plan_updated before tool_call_finished', async () => {
    const commit = stubPromise({ ok: true, result: { status: 'succeeded', text: 'Plan updated' }, plan: PLAN });
    const r = run(input('update_plan', controlStart({ plan: [] })), { commitPlanUpdate: commit });
    await flush();
    expect(commit.inputs[0]).toMatchObject({ toolCallId: 'turn_1.tc1', providerCallId: 'call_1', args: { plan: [] }, permissionMode: 'auto' });
    expect(r.record.inputs).toEqual([]);
    expect(r.out()).toMatchObject({ recorded: true, plan: PLAN, terminal: null });
    expect(r.sent('grandparent', 'session.publish').flatMap((e) => e.updates.map((u: { type: string }) => u.type))).toEqual(['plan_updated', 'tool_call_finished']);
  });

  it('a plan the store refused is recorded as the call\'s result; a failed plan write ends the turn', async () => {
    const refused = run(input('update_plan', controlStart({})), { commitPlanUpdate: stubPromise({ ok: false, result: { status: 'failed', text: 'bad plan' } }) });
    await flush();
    expect(refused.record.inputs[0]).toMatchObject({ result: { status: 'failed', text: 'bad plan' } });
    expect(refused.out()).toMatchObject({ recorded: true, terminal: null, plan: null });
    const broken = run(input('update_plan', controlStart({})), { commitPlanUpdate: rejecting(new CommandError('ownership_lost', 'taken over')) });
    await flush();
    expect(broken.out()).toMatchObject({ recorded: false, terminal: { code: 'ownership_lost', message: 'taken over' }, result: { text: 'the plan could not be saved' } });
  });

  const REQUEST = { questions: [{ id: 'colour', question: 'Which colour?' }] };

  it('request_user_input waits for the answers and records them as its result', async () => {
    const r = run(input('request_user_input', controlStart(REQUEST)));
    expect(r.state()).toEqual({ control: 'user_input' });
    expect(r.sent('parent', 'toolcall.user_input_requested')).toEqual([{ type: 'toolcall.user_input_requested', toolCallId: 'turn_1.tc1', request: REQUEST }]);
    const answers = { colour: 'blue' };
    r.child().send({ type: 'toolcall.answer', answers });
    await flush();
    expect(r.sent('parent', 'toolcall.user_input_resolved')).toEqual([
      { type: 'toolcall.user_input_resolved', toolCallId: 'turn_1.tc1', outcome: 'answered', answers },
    ]);
    expect(r.out()).toMatchObject({ result: { status: 'succeeded', text: answersResultText(REQUEST as never, answers) }, terminal: null, recorded: true });
  });

  it('a cancel ends the question unanswered and the turn cancelled; a stop ends it actor_stopped', async () => {
    const c = run(input('request_user_input', controlStart(REQUEST)));
    c.child().send({ type: 'toolcall.cancel' });
    await flush();
    expect(c.sent('parent', 'toolcall.user_input_resolved')).toEqual([{ type: 'toolcall.user_input_resolved', toolCallId: 'turn_1.tc1', outcome: 'cancelled' }]);
    expect(c.out()).toMatchObject({ result: { status: 'cancelled', text: UNANSWERED_TEXT }, terminal: { code: 'cancelled' } });
    const s = run(input('request_user_input', controlStart(REQUEST)));
    s.child().send({ type: 'toolcall.stop' });
    await flush();
    expect(s.out()).toMatchObject({ result: { status: 'outcome_unknown' }, terminal: { code: 'actor_stopped' } });
  });

  it('an agent tool records what it answered and passes a wait_agent timeout on; a failure is a failed result', async () => {
    const agent = stubPromise({ result: { status: 'succeeded', text: 'no message yet' }, waitTimedOut: true });
    const r = run(input('wait_agent', controlStart({ timeout_ms: 10 })), { runAgentTool: agent });
    await flush();
    expect(agent.inputs[0]).toEqual({ sessionId: 'ses_1', turnId: 'turn_1', toolCallId: 'turn_1.tc1', toolName: 'wait_agent', args: { timeout_ms: 10 } });
    expect(r.out()).toMatchObject({ waitTimedOut: true, terminal: null, recorded: true, result: { text: 'no message yet' } });
    const f = run(input('spawn_agent', controlStart({})), { runAgentTool: rejecting(new Error('no such agent')) });
    await flush();
    expect(f.out()).toMatchObject({ result: { status: 'failed', error: { code: 'execution_failed', message: 'no such agent' } }, terminal: null });
  });

  it('wait_agent ends at once on a cancel; another agent tool finishes what it started and then ends the turn cancelled', async () => {
    const waiting = run(input('wait_agent', controlStart({})), { runAgentTool: stubPromise(() => deferred<never>().promise) });
    await flush();
    waiting.child().send({ type: 'toolcall.cancel' });
    await flush();
    expect(waiting.out()).toMatchObject({ result: { status: 'cancelled', text: CANCELLED_BEFORE_RUN_TEXT }, terminal: { code: 'cancelled' } });
    const spawn = deferred<{ result: ToolResult }>();
    const spawning = run(input('spawn_agent', controlStart({})), { runAgentTool: stubPromise(() => spawn.promise) });
    await flush();
    spawning.child().send({ type: 'toolcall.cancel' });
    await flush();
    expect(spawning.output()).toBeUndefined();
    spawn.resolve({ result: { status: 'succeeded', text: 'spawned' } });
    await flush();
    expect(spawning.out()).toMatchObject({ result: { text: 'spawned' }, terminal: { code: 'cancelled' }, recorded: true });
  });
});
