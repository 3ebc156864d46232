/**
 * The Session machine alone, its Turn a stub (issue 19 point 7): how it answers every command in
 * each state, the sequence numbers it gives the updates it publishes, what it hands the Turn and
 * what it keeps of a Turn's end. No storage, model or tool runs; the composed machines on the real
 * runtime are test/machines/statecharts.test.ts.
 */
import { CommandError } from '../../src/errors.js';
import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, type AnyActorRef, type AnyEventObject } from 'xstate';
import { sessionMachine } from '../../src/machines/session/machine.js';
import type { CommandReply } from '../../src/machines/session/events.js';
import type { SessionInput } from '../../src/machines/session/ports.js';
import type { TurnOutput } from '../../src/machines/turn/ports.js';
import type { SessionUpdate } from '../../src/protocol/updates.js';
import type { NewMessage } from '../../src/protocol/content.js';
import type { AgentMessage } from '../../src/services/agents/mailbox.js';
import { CARD, flush, stubChild } from '../support/machine-stubs.js';

const ZERO = { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 };

const INPUT: SessionInput = {
  sessionId: 'ses_1',
  permissionMode: 'auto',
  permissionModeOrigin: 'session_default',
  nonInteractive: false,
  systemContext: [],
  limits: { maxModelCalls: 10, doomLoopThreshold: 3 },
  compactAtTokens: 0,
  compactionEnabled: true,
  tokenTotals: ZERO,
  acceptedRequests: {},
  lastTerminal: null,
  reloadRequired: false,
};


function message(id: string, text: string): NewMessage {
  return { id, role: 'user', kind: 'normal', content: [{ type: 'text', text }] };
}

const AGENT_MESSAGE: AgentMessage = { id: 'agent-msg:c:t:final_answer', taskName: 'explore', kind: 'final_answer', body: 'done' };

function output(overrides: Partial<TurnOutput> = {}): TurnOutput {
  return {
    turnId: 'turn_1',
    outcome: { status: 'completed', finalText: 'hi' },
    plan: null,
    usage: { inputTokens: 5, outputTokens: 2, cachedInputTokens: 0, reasoningTokens: 0 },
    mailbox: [],
    pendingInput: [],
    endRecorded: true,
    reloadRequired: false,
    ...overrides,
  };
}

function startSession(options: { input?: Partial<SessionInput>; turn?: any; finishCrashedTurn?: any } = {}) {
  const turns: Array<{ input: any; events: AnyEventObject[] }> = [];
  const logic = sessionMachine.provide({
    actors: { turn: options.turn ?? stubChild<TurnOutput>(turns), ...(options.finishCrashedTurn ? { finishCrashedTurn: options.finishCrashedTurn } : {}) },
  });
  const actor = createActor(logic, { input: { ...INPUT, ...options.input } });
  const replies = new Map<string, CommandReply>();
  const updates: Array<{ sequence: number; turnId: string | null; update: SessionUpdate }> = [];
  actor.on('session.replied', (e) => void replies.set(e.commandId, e.reply));
  // One emitted event carries the updates one publish sequenced, the last numbered `lastSequence`.
  actor.on('session.published', (e) => e.updates.forEach((update, i) => updates.push({ sequence: e.lastSequence - e.updates.length + 1 + i, turnId: e.turnId, update })));
  actor.start();
  let n = 0;
  /** Sends a command and returns the Session's answer to it. */
  const command = (event: Record<string, unknown> & { type: string }): CommandReply | undefined => {
    const commandId = `cmd_${++n}`;
    actor.send({ ...event, commandId } as never);
    return replies.get(commandId);
  };
  const start = (turnId = 'turn_1', clientRequestId = `req_${turnId}`) =>
    command({ type: 'session.start_turn', turnId, clientRequestId, messages: [message('m1', 'hello')], disabledSkillNames: [] });
  const turnRef = () => actor.getSnapshot().children.turn as AnyActorRef;
  return { actor, turns, updates, command, start, turnRef, context: () => actor.getSnapshot().context, value: () => actor.getSnapshot().value };
}

describe('Session machine (stub Turn)', () => {
  it('accepts a turn from idle: answers with its id, publishes turn_started as sequence 1 and invokes the Turn with the session context', () => {
    const s = startSession({ input: { tokenTotals: { ...ZERO, inputTokens: 7 } } });
    s.command({ type: 'session.deliver_agent_message', message: AGENT_MESSAGE });
    expect(s.start()).toEqual({ ok: true, turnId: 'turn_1' });
    expect(s.value()).toBe('active');
    expect(s.updates).toEqual([{ sequence: 1, turnId: 'turn_1', update: { type: 'turn_started', clientRequestId: 'req_turn_1' } }]);
    expect(s.turns).toHaveLength(1);
    expect(s.turns[0]!.input).toMatchObject({
      sessionId: 'ses_1',
      turnId: 'turn_1',
      clientRequestId: 'req_turn_1',
      messages: [message('m1', 'hello')],
      tokenBaseline: { ...ZERO, inputTokens: 7 },
      // An agent message delivered while idle goes to the next turn, and the session's own box empties.
      mailbox: [AGENT_MESSAGE],
      sessionGrants: {},
    });
    expect(s.context().mailbox).toEqual([]);
    expect(s.context().acceptedRequests).toEqual({ req_turn_1: 'turn_1' });
  });

  it('answers busy while a turn runs, and a repeated client request id with the turn it already started', () => {
    const s = startSession();
    s.start('turn_1', 'req_a');
    expect(s.start('turn_2', 'req_b')).toEqual({ ok: false, code: 'busy', message: 'session is busy with turn turn_1', activeTurnId: 'turn_1' });
    expect(s.start('turn_3', 'req_a')).toEqual({ ok: true, turnId: 'turn_1' });
    s.turnRef().send({ type: 'stub.finish', output: output() });
    // Idempotent after the turn ended too: no second turn starts for the same request.
    expect(s.start('turn_4', 'req_a')).toEqual({ ok: true, turnId: 'turn_1' });
    expect(s.turns).toHaveLength(1);
    expect(s.value()).toBe('idle');
  });

  it('refuses the commands of a turn when none is active (turn_not_active), in idle and in maintenance', () => {
    const s = startSession();
    const refused = (turnId: string) => ({ ok: false, code: 'turn_not_active', message: `turn ${turnId} is not active` });
    expect(s.command({ type: 'session.cancel_turn', turnId: 't' })).toEqual(refused('t'));
    expect(s.command({ type: 'session.steer_turn', turnId: 't', message: message('m', 'x') })).toEqual(refused('t'));
    expect(s.command({ type: 'session.resolve_permission', turnId: 't', toolCallId: 'c', decision: 'allow_once', at: 1 })).toEqual(refused('t'));
    expect(s.command({ type: 'session.answer_user_input', turnId: 't', toolCallId: 'c', answers: {} })).toEqual(refused('t'));
    expect(s.command({ type: 'session.begin_maintenance', kind: 'compact' })).toEqual({ ok: true });
    expect(s.command({ type: 'session.cancel_turn', turnId: 't' })).toEqual(refused('t'));
    expect(s.command({ type: 'session.steer_turn', turnId: 't', message: message('m', 'x') })).toEqual(refused('t'));
    expect(s.command({ type: 'session.resolve_permission', turnId: 't', toolCallId: 'c', decision: 'allow_once', at: 1 })).toEqual(refused('t'));
    expect(s.command({ type: 'session.answer_user_input', turnId: 't', toolCallId: 'c', answers: {} })).toEqual(refused('t'));
  });

  it('cancel, steer, mail and mode changes of the active turn reach the Turn; a cancel of another turn is refused', () => {
    const s = startSession();
    s.start();
    expect(s.command({ type: 'session.cancel_turn', turnId: 'other' })).toEqual({ ok: false, code: 'turn_not_active', message: 'turn other is not active' });
    expect(s.command({ type: 'session.steer_turn', turnId: 'turn_1', message: message('m2', 'more') })).toEqual({ ok: true });
    expect(s.command({ type: 'session.deliver_agent_message', message: AGENT_MESSAGE })).toEqual({ ok: true });
    expect(s.command({ type: 'session.set_permission_mode', mode: 'accept_edits' })).toEqual({ ok: true });
    expect(s.command({ type: 'session.cancel_turn', turnId: 'turn_1' })).toEqual({ ok: true });
    expect(s.turns[0]!.events).toEqual([
      { type: 'turn.steer', message: message('m2', 'more') },
      { type: 'turn.mailbox', message: AGENT_MESSAGE },
      { type: 'turn.set_mode', mode: 'accept_edits', origin: 'user_toggle' },
      { type: 'turn.cancel' },
    ]);
    expect(s.context()).toMatchObject({ permissionMode: 'accept_edits', permissionModeOrigin: 'user_toggle', mailbox: [] });
  });

  it('numbers every published update in order and tracks the pending card: resolved once, then permission_not_pending', () => {
    const s = startSession();
    s.start();
    s.turnRef().send({ type: 'stub.publish', update: { type: 'phase_changed', phase: 'running_tools' } });
    s.turnRef().send({ type: 'stub.publish', update: { type: 'permission_requested', toolCallId: 'turn_1.tc1', card: CARD } });
    expect(s.context().pendingApproval).toEqual({ turnId: 'turn_1', toolCallId: 'turn_1.tc1', card: CARD });
    expect(s.command({ type: 'session.resolve_permission', turnId: 'turn_1', toolCallId: 'turn_1.tc9', decision: 'allow_once', at: 5 })).toEqual({
      ok: false,
      code: 'permission_not_pending',
      message: 'no permission is pending for tool call turn_1.tc9',
    });
    expect(s.command({ type: 'session.resolve_permission', turnId: 'turn_1', toolCallId: 'turn_1.tc1', decision: 'allow_for_session', at: 5 })).toEqual({ ok: true });
    expect(s.turns[0]!.events).toEqual([{ type: 'turn.decide', toolCallId: 'turn_1.tc1', decision: 'allow_for_session', at: 5 }]);
    // A session-scoped grant is the session's, whichever turn asked.
    expect(s.context().sessionGrants).toEqual({ env_1: ['bash:ls'] });
    expect(s.context().pendingApproval).toBeNull();
    expect(s.command({ type: 'session.resolve_permission', turnId: 'turn_1', toolCallId: 'turn_1.tc1', decision: 'allow_once', at: 6 })).toMatchObject({
      ok: false,
      code: 'permission_not_pending',
    });
    expect(s.updates.map((u) => [u.sequence, u.update.type])).toEqual([
      [1, 'turn_started'],
      [2, 'phase_changed'],
      [3, 'permission_requested'],
    ]);
  });

  it('sequences the updates of one session.publish one by one, in order, and applies what each changes (issue 14: one event a Turn macrostep)', () => {
    const s = startSession();
    s.start();
    const ASK = { question: 'which?', options: [] } as never;
    s.turnRef().send({
      type: 'stub.send',
      event: {
        type: 'session.publish',
        updates: [
          { type: 'phase_changed', phase: 'waiting_permission' },
          { type: 'permission_requested', toolCallId: 'turn_1.tc1', card: CARD },
          { type: 'permission_resolved', toolCallId: 'turn_1.tc1', decision: 'allow_once' },
          { type: 'user_input_requested', toolCallId: 'turn_1.tc2', request: ASK },
        ],
      },
    });
    expect(s.updates.map((u) => [u.sequence, u.turnId, u.update.type])).toEqual([
      [1, 'turn_1', 'turn_started'],
      [2, 'turn_1', 'phase_changed'],
      [3, 'turn_1', 'permission_requested'],
      [4, 'turn_1', 'permission_resolved'],
      [5, 'turn_1', 'user_input_requested'],
    ]);
    expect(s.context().sequence).toBe(5);
    // The card was asked and resolved inside the batch; the question still waits.
    expect(s.context().pendingApproval).toBeNull();
    expect(s.context().pendingUserInput).toEqual({ turnId: 'turn_1', toolCallId: 'turn_1.tc2', request: ASK });
    s.turnRef().send({ type: 'stub.publish', update: { type: 'phase_changed', phase: 'running_tools' } });
    expect(s.updates.at(-1)).toMatchObject({ sequence: 6 });
  });

  it('grant scopes: a Turn\'s session grant is kept by the session, a turn grant is not; allow (once) grants nothing', () => {
    const s = startSession();
    s.start();
    s.turnRef().send({ type: 'stub.send', event: { type: 'turn.granted', scope: 'turn', environmentId: 'env_1', grantKey: 'k_turn' } });
    s.turnRef().send({ type: 'stub.send', event: { type: 'turn.granted', scope: 'session', environmentId: 'env_1', grantKey: 'k_session' } });
    s.turnRef().send({ type: 'stub.send', event: { type: 'turn.granted', scope: 'session', environmentId: 'env_1', grantKey: 'k_session' } });
    s.turnRef().send({ type: 'stub.publish', update: { type: 'permission_requested', toolCallId: 'turn_1.tc2', card: CARD } });
    s.command({ type: 'session.resolve_permission', turnId: 'turn_1', toolCallId: 'turn_1.tc2', decision: 'allow_once', at: 1 });
    expect(s.context().sessionGrants).toEqual({ env_1: ['k_session'] });
    // The next turn starts with the session's grants.
    s.turnRef().send({ type: 'stub.finish', output: output() });
    s.start('turn_2');
    expect(s.turns[1]!.input.sessionGrants).toEqual({ env_1: ['k_session'] });
  });

  it('tracks the question a turn waits on: answered once, then user_input_not_pending', () => {
    const s = startSession();
    s.start();
    const request = { questions: [{ id: 'q1', header: 'H', question: 'which?', options: [] }] };
    s.turnRef().send({ type: 'stub.publish', update: { type: 'user_input_requested', toolCallId: 'turn_1.tc1', request } as never });
    expect(s.context().pendingUserInput).toEqual({ turnId: 'turn_1', toolCallId: 'turn_1.tc1', request });
    expect(s.command({ type: 'session.answer_user_input', turnId: 'turn_1', toolCallId: 'turn_1.tc1', answers: { q1: 'a' } })).toEqual({ ok: true });
    expect(s.turns[0]!.events).toEqual([{ type: 'turn.answer', toolCallId: 'turn_1.tc1', answers: { q1: 'a' } }]);
    expect(s.command({ type: 'session.answer_user_input', turnId: 'turn_1', toolCallId: 'turn_1.tc1', answers: {} })).toEqual({
      ok: false,
      code: 'user_input_not_pending',
      message: 'no question is waiting for an answer in tool call turn_1.tc1',
    });
  });

  it('keeps what a Turn\'s end hands back: the terminal, the token totals, carried mail and input, and a system error when the end was not recorded', () => {
    const s = startSession({ input: { tokenTotals: { ...ZERO, inputTokens: 10 } } });
    s.start();
    s.turnRef().send({
      type: 'stub.finish',
      output: output({ mailbox: [AGENT_MESSAGE], pendingInput: [message('m9', 'late')], endRecorded: false }),
    });
    expect(s.value()).toBe('idle');
    expect(s.context()).toMatchObject({
      activeTurn: null,
      lastTerminal: { turnId: 'turn_1', clientRequestId: 'req_turn_1', outcome: { status: 'completed', finalText: 'hi' }, plan: null },
      tokenTotals: { inputTokens: 15, outputTokens: 2, cachedInputTokens: 0, reasoningTokens: 0 },
      mailbox: [AGENT_MESSAGE],
      pendingInput: [message('m9', 'late')],
      systemError: 'the end of turn turn_1 could not be recorded',
    });
    // The next turn takes them, and a turn that starts clears the system error.
    s.start('turn_2');
    expect(s.turns[1]!.input).toMatchObject({ mailbox: [AGENT_MESSAGE], pendingInput: [message('m9', 'late')] });
    expect(s.context().systemError).toBeNull();
  });

  it('after a turn that left reload_required, refuses new turns and maintenance until reloaded', () => {
    const s = startSession();
    s.start();
    s.turnRef().send({ type: 'stub.finish', output: output({ reloadRequired: true }) });
    const refused = { ok: false, code: 'reload_required', message: 'a compaction was committed but could not be installed; reload the session' };
    expect(s.start('turn_2')).toEqual(refused);
    expect(s.command({ type: 'session.begin_maintenance', kind: 'rewind' })).toEqual(refused);
    expect(s.turns).toHaveLength(1);
  });

  it('a Turn that fails as an actor ends as failed actor_stopped once its end is written, announces it, and the session accepts the next turn', async () => {
    const ends: unknown[] = [];
    const s = startSession({
      turn: fromPromise(async () => Promise.reject(new Error('boom'))),
      finishCrashedTurn: fromPromise(async ({ input }) => {
        ends.push(input);
        return true;
      }),
    });
    s.start();
    await flush();
    expect(s.value()).toBe('idle');
    const outcome = { status: 'failed', code: 'actor_stopped', message: 'the turn actor failed: boom' };
    expect(ends).toEqual([{ sessionId: INPUT.sessionId, turnId: 'turn_1', outcome, planUnfinishedStepCount: null, unmadeModelCall: 0, recorded: false, orphans: [] }]);
    expect(s.updates.at(-1)).toEqual({
      sequence: 2,
      turnId: 'turn_1',
      update: { type: 'turn_finished', outcome, usage: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 } },
    });
    expect(s.context()).toMatchObject({
      lastTerminal: { turnId: 'turn_1', outcome },
      systemError: 'the turn actor failed: boom',
      activeTurn: null,
    });
    expect(s.start('turn_2')).toEqual({ ok: true, turnId: 'turn_2' });
  });

  it('a Turn that fails as an actor and whose end is refused for want of the lease ends ownership_lost', async () => {
    const s = startSession({
      turn: fromPromise(async () => Promise.reject(new Error('boom'))),
      finishCrashedTurn: fromPromise(async () => Promise.reject(new CommandError('ownership_lost', 'the session is owned by another runtime'))),
    });
    s.start();
    await flush();
    expect(s.value()).toBe('idle');
    expect(s.updates.at(-1)!.update).toMatchObject({ type: 'turn_finished', outcome: { status: 'failed', code: 'ownership_lost' } });
    expect(s.context().systemError).toMatch(/the turn actor failed: boom; the end of turn turn_1 could not be recorded/);
  });

  it('shutdown while a turn runs stops the Turn, answers at once, and stops the session when the Turn has ended', () => {
    const s = startSession();
    s.start();
    expect(s.command({ type: 'session.shutdown' })).toEqual({ ok: true });
    expect(s.turns[0]!.events).toEqual([{ type: 'turn.stop' }]);
    expect(s.value()).toBe('active');
    s.turnRef().send({ type: 'stub.finish', output: output({ outcome: { status: 'failed', code: 'actor_stopped', message: 'stopped' } }) });
    expect(s.actor.getSnapshot().status).toBe('done');
    expect(s.value()).toBe('stopped');
  });

  it('maintenance: refuses turns and a second maintenance, publishes its updates with no turn, and a shutdown asked for meanwhile waits for its end', () => {
    const s = startSession();
    expect(s.command({ type: 'session.begin_maintenance', kind: 'compact' })).toEqual({ ok: true });
    const busy = { ok: false, code: 'session_active', message: 'a compaction or rewind is running' };
    expect(s.start()).toEqual(busy);
    expect(s.command({ type: 'session.begin_maintenance', kind: 'compact' })).toEqual(busy);
    expect(s.command({ type: 'session.deliver_agent_message', message: AGENT_MESSAGE })).toEqual({ ok: true });
    s.actor.send({ type: 'session.maintenance_update', update: { type: 'phase_changed', phase: 'compacting' } as SessionUpdate });
    expect(s.updates).toEqual([{ sequence: 1, turnId: null, update: { type: 'phase_changed', phase: 'compacting' } }]);
    expect(s.command({ type: 'session.shutdown' })).toEqual({ ok: true });
    expect(s.value()).toBe('maintenance');
    s.actor.send({ type: 'session.end_maintenance', reloadRequired: true });
    expect(s.value()).toBe('stopped');
    expect(s.context()).toMatchObject({ reloadRequired: true, mailbox: [AGENT_MESSAGE] });
  });

  it('a maintenance that ends goes back to idle, and one that needs a reload leaves the session refusing turns', () => {
    const s = startSession();
    s.command({ type: 'session.begin_maintenance', kind: 'rewind' });
    s.actor.send({ type: 'session.end_maintenance', reloadRequired: false });
    expect(s.value()).toBe('idle');
    expect(s.start()).toEqual({ ok: true, turnId: 'turn_1' });
    s.turnRef().send({ type: 'stub.finish', output: output() });
    s.command({ type: 'session.begin_maintenance', kind: 'compact' });
    s.actor.send({ type: 'session.end_maintenance', reloadRequired: true });
    expect(s.start('turn_2')).toMatchObject({ ok: false, code: 'reload_required' });
    expect(s.command({ type: 'session.begin_maintenance', kind: 'compact' })).toMatchObject({ ok: false, code: 'reload_required' });
  });

  it('an active turn refuses maintenance, and rate limits from the Turn are merged into the session', () => {
    const s = startSession();
    s.start();
    expect(s.command({ type: 'session.begin_maintenance', kind: 'compact' })).toEqual({ ok: false, code: 'session_active', message: 'a turn is active' });
    s.turnRef().send({ type: 'stub.send', event: { type: 'turn.rate_limits_reported', snapshot: { limitId: null, plan: 'pro' } } });
    s.turnRef().send({ type: 'stub.send', event: { type: 'turn.rate_limits_reported', snapshot: { limitId: 'b', primary: null } } });
    expect(s.context().rateLimits).toEqual({ limitId: 'b', primary: null, credits: null, plan: 'pro' });
  });

  it('idle shutdown stops at once; a mode change in idle is kept for the next turn', () => {
    const s = startSession();
    expect(s.command({ type: 'session.set_permission_mode', mode: 'accept_edits' })).toEqual({ ok: true });
    s.start();
    expect(s.turns[0]!.input).toMatchObject({ permissionMode: 'accept_edits', permissionModeOrigin: 'user_toggle' });
    s.turnRef().send({ type: 'stub.finish', output: output() });
    expect(s.command({ type: 'session.shutdown' })).toEqual({ ok: true });
    expect(s.value()).toBe('stopped');
  });
});
