/**
 * Concurrent commands (issue 6, item 3): several callers issue random commands — start, cancel,
 * resolve, answer a question, steer, deliver, set mode, snapshot, replay, manual compaction — against one session while
 * its turns run; fast-check's scheduler interleaves the callers, the model calls (summaries too) and
 * the tool runs. Every command gets exactly the answer seed 000 §2 (and reference §3.1 for
 * compaction) gives for the state it met, and afterwards the stored rows, the model requests and the
 * update stream keep the invariants.
 *
 * The state a command meets: most commands are decided when they are sent, so the state right
 * before the call is the one they meet. `startTurn` first reconciles sub-agents (an await on the
 * database), so the state it meets is read at the moment its event reaches the Session actor.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore, type Core } from '../../src/core.js';
import type { SessionUpdateEnvelope } from '../../src/protocol/updates.js';
import type { SessionHandle } from '../../src/session-handle.js';
import { scriptedModel, type ScriptedStep } from '../../src/services/model/scripted.js';
import { defineTool } from '../../src/services/tools/define.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { approvalTool, echoTool } from '../../src/testing/tools.js';
import type { SessionEvent } from '../../src/machines/session/events.js';
import { fuzzParameters, fuzzTimeout } from '../support/fuzz.js';
import { isSummaryRequest, validSummary } from '../support/summaries.js';
import { assertAllRequests, assertNoRunningAfterTerminal, assertRequestsFollowResults, assertSequences, assertStoredInvariants, type TurnRequest } from '../support/invariants.js';
import { usePglite } from '../support/databases.js';

/**
 * Each case's scheduler, by its session: a turn a failed case left running (fast-check then shrinks,
 * running more cases) waits on its own case's scheduler, never on the next case's.
 */
const schedulers = new Map<string, fc.Scheduler>();

/** How often each command got each answer: printed, so a run that never reaches a case shows it. */
const answers = new Map<string, number>();

/** A tool whose run ends when the scheduler says (or when it is aborted). */
const waitTool = defineTool({
  name: 'wait',
  description: 'Waits for the scheduler.',
  parameters: z.object({}),
  execute: async (_args, ctx) => {
    const s = schedulers.get(ctx.sessionId)!;
    await Promise.race([
      s.schedule(Promise.resolve(), 'tool run ends'),
      new Promise((_, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true })),
    ]);
    return 'waited';
  },
});

type Cmd =
  | { type: 'start'; req: number; blank: boolean }
  | { type: 'cancel'; target: 'active' | 'last' | 'bogus' }
  | { type: 'resolve'; target: 'active' | 'bogus'; call: 'pending' | 'bogus'; decision: string }
  | { type: 'steer'; target: 'active' | 'bogus'; blank: boolean }
  | { type: 'deliver'; huge: boolean }
  | { type: 'set_mode'; mode: string }
  | { type: 'snapshot' }
  | { type: 'replay'; from: 'zero' | 'mid' | 'last' | 'beyond' | 'negative' }
  /** A manual compaction (reference §3.1): the session is in maintenance until its summary is written. */
  | { type: 'compact' }
  /** The caller thinks for a while: the runtime's own work (database writes) moves on meanwhile. */
  | { type: 'pause'; ms: number }
  /** The caller waits (briefly) for a card and answers it, racing the other callers. */
  | { type: 'answer_card'; decision: string }
  /** answerUserInput: fitting answers, a blank one, or one for a question that was not asked. */
  | { type: 'answer'; target: 'active' | 'bogus'; call: 'pending' | 'bogus'; answers: 'ok' | 'blank' | 'extra' }
  /** The caller waits (briefly) for a question of the model and answers it. */
  | { type: 'answer_question' };

const cmdArb: fc.Arbitrary<Cmd> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ type: fc.constant('start' as const), req: fc.integer({ min: 0, max: 3 }), blank: fc.constantFrom(false, false, false, false, false, true) }) },
  { weight: 2, arbitrary: fc.record({ type: fc.constant('cancel' as const), target: fc.constantFrom('active' as const, 'active' as const, 'last' as const, 'bogus' as const) }) },
  {
    weight: 4,
    arbitrary: fc.record({
      type: fc.constant('resolve' as const),
      target: fc.constantFrom('active' as const, 'active' as const, 'bogus' as const),
      call: fc.constantFrom('pending' as const, 'pending' as const, 'bogus' as const),
      decision: fc.constantFrom('allow_once', 'deny', 'allow_for_turn', 'allow_for_session', 'maybe'),
    }),
  },
  { weight: 2, arbitrary: fc.record({ type: fc.constant('steer' as const), target: fc.constantFrom('active' as const, 'bogus' as const), blank: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('deliver' as const), huge: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('set_mode' as const), mode: fc.constantFrom('auto', 'accept_edits', 'yolo') }) },
  { weight: 1, arbitrary: fc.constant({ type: 'snapshot' as const }) },
  { weight: 3, arbitrary: fc.record({ type: fc.constant('pause' as const), ms: fc.constantFrom(1, 5, 15) }) },
  { weight: 2, arbitrary: fc.record({ type: fc.constant('answer_card' as const), decision: fc.constantFrom('allow_once', 'deny', 'allow_for_turn', 'allow_for_session') }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('replay' as const), from: fc.constantFrom('zero' as const, 'mid' as const, 'last' as const, 'beyond' as const, 'negative' as const) }) },
  { weight: 1, arbitrary: fc.constant({ type: 'compact' as const }) },
  {
    weight: 2,
    arbitrary: fc.record({
      type: fc.constant('answer' as const),
      target: fc.constantFrom('active' as const, 'active' as const, 'bogus' as const),
      call: fc.constantFrom('pending' as const, 'pending' as const, 'bogus' as const),
      answers: fc.constantFrom('ok' as const, 'ok' as const, 'blank' as const, 'extra' as const),
    }),
  },
  { weight: 2, arbitrary: fc.constant({ type: 'answer_question' as const }) },
);

const stepArb: fc.Arbitrary<ScriptedStep> = fc.constantFrom<ScriptedStep>(
  { text: 'answer' },
  { toolCalls: [{ name: 'echo', arguments: { text: 'x' } }] },
  { toolCalls: [{ name: 'guarded', arguments: { action: 'deploy' } }] },
  { toolCalls: [{ name: 'wait', arguments: {} }] },
  { toolCalls: [{ name: 'echo', arguments: { text: 'y' } }, { name: 'guarded', arguments: { action: 'ship', scope: 's2' } }] },
  { toolCalls: [{ name: 'request_user_input', arguments: { questions: [{ id: 'q', question: 'which one?' }] } }] },
);

type Answer = { ok: true; turnId?: string } | { ok: false; code: string; activeTurnId?: string };

function answerOf(promise: Promise<unknown>): Promise<Answer> {
  return promise.then(
    (value) => ({ ok: true as const, ...(value && typeof value === 'object' && 'turnId' in value ? { turnId: (value as { turnId: string }).turnId } : {}) }),
    (error: { code?: string; activeTurnId?: string }) => {
      if (!error?.code) throw error;
      return { ok: false as const, code: error.code, ...(error.activeTurnId ? { activeTurnId: error.activeTurnId } : {}) };
    },
  );
}

/** What a start met when its event reached the Session actor. */
interface MetState {
  maintenance: boolean;
  active: string | null;
  accepted: string | undefined;
}

interface CaseState {
  session: SessionHandle;
  envelopes: SessionUpdateEnvelope[];
  accepted: Map<string, string>;
  turns: string[];
  lastTurn: string | null;
  log: string[];
  /** Per start (keyed by its unique text): the state its event met. */
  met: Map<string, MetState>;
  starts: number;
  compactions: number;
}

/** Records, for every start, the Session actor's state at the moment the event is delivered. */
function watchStarts(session: SessionHandle, met: Map<string, MetState>): void {
  const actor = session.actorRef;
  const send = actor.send.bind(actor);
  (actor as { send: (event: SessionEvent) => void }).send = (event: SessionEvent) => {
    if (event.type === 'session.start_turn') {
      const snapshot = actor.getSnapshot();
      const text = event.messages.at(-1)!.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
      met.set(text, {
        maintenance: snapshot.value === 'maintenance',
        active: snapshot.context.activeTurn?.turnId ?? null,
        accepted: snapshot.context.acceptedRequests[event.clientRequestId],
      });
    }
    send(event);
  };
}

/** Issues one command and checks its answer against seed 000 §2 for the state it met. */
async function issue(state: CaseState, caller: number, cmd: Cmd): Promise<void> {
  const { session } = state;
  if (cmd.type === 'answer_card') {
    for (let i = 0; i < 10; i += 1) {
      const runtime = session.snapshot().runtime;
      if (runtime.type === 'running' && runtime.pendingApprovals.length > 0) break;
      await new Promise((resolve) => setTimeout(resolve, 3));
    }
    return issue(state, caller, { type: 'resolve', target: 'active', call: 'pending', decision: cmd.decision });
  }
  if (cmd.type === 'answer_question') {
    for (let i = 0; i < 10; i += 1) {
      const runtime = session.snapshot().runtime;
      if (runtime.type === 'running' && runtime.pendingUserInput.length > 0) break;
      await new Promise((resolve) => setTimeout(resolve, 3));
    }
    return issue(state, caller, { type: 'answer', target: 'active', call: 'pending', answers: 'ok' });
  }
  const snapshot = session.snapshot();
  const runtime = snapshot.runtime;
  const active = runtime.type === 'running' ? runtime.turnId : null;
  const pending = runtime.type === 'running' ? (runtime.pendingApprovals[0]?.toolCallId ?? null) : null;
  const question = runtime.type === 'running' ? (runtime.pendingUserInput[0]?.toolCallId ?? null) : null;
  const maintenance = session.actorRef.getSnapshot().value === 'maintenance';
  const label = `caller ${caller}: ${JSON.stringify(cmd)} (active ${active}, pending ${pending}${maintenance ? ', maintenance' : ''})`;
  state.log.push(label);
  const check = async (promise: Promise<unknown>, expected: Answer | ((a: Answer) => void)) => {
    const answer = await answerOf(promise);
    const key = `${cmd.type}:${answer.ok ? 'ok' : answer.code}`;
    answers.set(key, (answers.get(key) ?? 0) + 1);
    if (typeof expected === 'function') expected(answer);
    else expect(answer, label).toEqual(expected);
    return answer;
  };
  switch (cmd.type) {
    case 'pause':
      await new Promise((resolve) => setTimeout(resolve, cmd.ms));
      return;
    case 'start': {
      const clientRequestId = `req-${cmd.req}`;
      state.starts += 1;
      const text = `request ${cmd.req} #${state.starts}`;
      const promise = session.startTurn({ clientRequestId, input: [{ type: 'text', text: cmd.blank ? '   ' : text }] });
      await check(promise, (answer) => {
        if (cmd.blank) return expect(answer, label).toEqual({ ok: false, code: 'empty_input' });
        const met = state.met.get(text);
        const where = `${label}, met ${JSON.stringify(met)}`;
        expect(met, `${where}: the start reached the actor`).toBeDefined();
        if (met!.maintenance) return expect(answer, where).toEqual({ ok: false, code: 'session_active' });
        if (met!.accepted) return expect(answer, where).toEqual({ ok: true, turnId: met!.accepted });
        if (met!.active) return expect(answer, where).toEqual({ ok: false, code: 'busy', activeTurnId: met!.active });
        expect(answer.ok, where).toBe(true);
        const turnId = (answer as { turnId: string }).turnId;
        expect(state.turns, label).not.toContain(turnId);
        state.accepted.set(clientRequestId, turnId);
        state.turns.push(turnId);
        state.lastTurn = turnId;
      });
      return;
    }
    case 'cancel': {
      const target = cmd.target === 'active' ? (active ?? 'turn_none') : cmd.target === 'last' ? (state.lastTurn ?? 'turn_none') : 'turn_bogus';
      await check(session.cancelTurn(target), target === active ? { ok: true } : { ok: false, code: 'turn_not_active' });
      return;
    }
    case 'resolve': {
      const turnId = cmd.target === 'active' ? (active ?? 'turn_none') : 'turn_bogus';
      const toolCallId = cmd.call === 'pending' ? (pending ?? 'tc_none') : 'tc_bogus';
      const expected: Answer =
        cmd.decision === 'maybe'
          ? { ok: false, code: 'invalid_request' }
          : turnId !== active
            ? { ok: false, code: 'turn_not_active' }
            : toolCallId !== pending
              ? { ok: false, code: 'permission_not_pending' }
              : { ok: true };
      await check(session.resolvePermission(turnId, toolCallId, cmd.decision as never), expected);
      return;
    }
    case 'answer': {
      const turnId = cmd.target === 'active' ? (active ?? 'turn_none') : 'turn_bogus';
      const toolCallId = cmd.call === 'pending' ? (question ?? 'tc_none') : 'tc_bogus';
      const answers: Record<string, string> = cmd.answers === 'blank' ? { q: '  ' } : cmd.answers === 'extra' ? { q: 'this', other: 'that' } : { q: 'this one' };
      const expected: Answer =
        cmd.answers === 'blank' || (cmd.answers === 'extra' && turnId === active && toolCallId === question)
          ? { ok: false, code: 'invalid_request' }
          : turnId !== active
            ? { ok: false, code: 'turn_not_active' }
            : toolCallId !== question
              ? { ok: false, code: 'user_input_not_pending' }
              : { ok: true };
      await check(session.answerUserInput(turnId, toolCallId, answers), expected);
      return;
    }
    case 'steer': {
      const turnId = cmd.target === 'active' ? (active ?? 'turn_none') : 'turn_bogus';
      const expected: Answer = cmd.blank ? { ok: false, code: 'empty_input' } : turnId === active ? { ok: true } : { ok: false, code: 'turn_not_active' };
      await check(session.steerTurn(turnId, [{ type: 'text', text: cmd.blank ? '' : 'steer' }]), expected);
      return;
    }
    case 'deliver': {
      const id = `agent-msg:child:${state.log.length}:final_answer`;
      const body = cmd.huge ? 'word '.repeat(4_000) : 'result';
      await check(session.deliverAgentMessage({ id, taskName: 'child', kind: 'final_answer', body }), cmd.huge ? { ok: false, code: 'agent_delivery_failed' } : { ok: true });
      return;
    }
    case 'set_mode':
      await check(session.setPermissionMode(cmd.mode as never), cmd.mode === 'yolo' ? { ok: false, code: 'invalid_request' } : { ok: true });
      return;
    case 'snapshot': {
      const last = state.envelopes.at(-1)?.sequence ?? 0;
      expect(snapshot.lastUpdateSequence, label).toBe(last);
      // A compaction holds the session too: status() says active, the snapshot has no running turn.
      expect(runtime.type === 'running' || maintenance, label).toBe(session.status().type === 'active');
      if (runtime.type === 'running') expect(runtime.turnId, label).toBe(state.lastTurn);
      return;
    }
    case 'replay': {
      const last = state.envelopes.at(-1)?.sequence ?? 0;
      const after = { zero: 0, mid: Math.floor(last / 2), last, beyond: last + 1, negative: -1 }[cmd.from];
      const run = () => session.replayUpdates(after);
      if (cmd.from === 'negative') return void expect(run, label).toThrow(expect.objectContaining({ code: 'invalid_request' }));
      if (cmd.from === 'beyond') return void expect(run, label).toThrow(expect.objectContaining({ code: 'snapshot_required' }));
      expect(run(), label).toEqual(state.envelopes.filter((e) => e.sequence > after));
      return;
    }
    case 'compact': {
      // session_active during a turn or another compaction; without a real user request there is
      // nothing to summarise (compaction_error, the conversation unchanged); otherwise a checkpoint.
      const busy = active !== null || maintenance;
      const answer = await check(session.compactConversation(), busy ? { ok: false, code: 'session_active' } : state.turns.length === 0 ? { ok: false, code: 'compaction_error' } : { ok: true });
      if (answer.ok) state.compactions += 1;
      return;
    }
  }
}

describe('concurrent commands', () => {
  let storage: SqlSessionStorage;
  let core: Core;

  usePglite((s) => (storage = s));
  beforeAll(async () => {
    core = await createCore({ plan: true, conversationHistory: true, agents: true,
      storage,
      model: scriptedModel([]),
      tools: [echoTool, approvalTool, waitTool],
      limits: { maxModelCalls: 4 },
      userInput: true,
      closeStorageOnShutdown: false,
      onActorError: (id, error) => {
        throw new Error(`actor of ${id} failed: ${String(error)}`);
      },
    });
  });

  afterAll(async () => {
    console.log(`concurrent commands, answers seen: ${[...answers].sort().map(([k, v]) => `${k}=${v}`).join(' ')}`);
    await core.shutdown();
  });

  it('every command gets the answer seed 000 §2 gives, and the invariants hold', async () => {
    let n = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.scheduler(),
        fc.array(stepArb, { minLength: 1, maxLength: 6 }),
        fc.array(fc.array(cmdArb, { minLength: 1, maxLength: 8 }), { minLength: 2, maxLength: 4 }),
        async (s, script, callers) => {
          n += 1;
          let turnCalls = 0;
          const model = scriptedModel((request) => {
            if (isSummaryRequest(request)) return { gate: s.schedule(Promise.resolve(), 'summary call'), step: { text: validSummary('the fuzzed requests') } };
            turnCalls += 1;
            return { gate: s.schedule(Promise.resolve(), `model call ${turnCalls}`), step: script[(turnCalls - 1) % script.length]! };
          });
          const session = await core.createSession({ workingDirectory: process.cwd(), model, id: `ses_fuzz_cmd_${n}` });
          schedulers.set(session.sessionId, s);
          // Every turn request with the turn that made it (summaries belong to no turn's count).
          const turnRequests: TurnRequest[] = [];
          const stream = model.stream.bind(model);
          model.stream = (request, options) => {
            if (!isSummaryRequest(request)) {
              const runtime = session.snapshot().runtime;
              turnRequests.push({ request: structuredClone(request), turnId: runtime.type === 'running' ? runtime.turnId : null });
            }
            return stream(request, options);
          };
          const state: CaseState = { session, envelopes: [], accepted: new Map(), turns: [], lastTurn: null, log: [], met: new Map(), starts: 0, compactions: 0 };
          watchStarts(session, state.met);
          session.updates$.subscribe((e) => state.envelopes.push(e));

          const runs = callers.map(async (commands, caller) => {
            for (const cmd of commands) {
              await s.schedule(Promise.resolve(), `caller ${caller}: ${cmd.type}`);
              await issue(state, caller, cmd);
            }
          });
          await s.waitFor(Promise.all(runs));

          // Wind down: cancel whatever still runs and let it finish.
          for (let i = 0; i < 5; i += 1) {
            const runtime = session.snapshot().runtime;
            if (runtime.type !== 'running') break;
            await session.cancelTurn(runtime.turnId);
            await s.waitFor(session.waitForTurn(runtime.turnId));
          }
          expect(session.status().type, state.log.join('\n')).not.toBe('active');
          const checkpoints = await storage.listCheckpoints(session.sessionId);
          expect(checkpoints.map((c) => c.kind), 'one checkpoint per compaction that answered ok').toEqual(Array(state.compactions).fill('manual'));
          expect(state.envelopes.filter((e) => e.update.type === 'conversation_compacted' && e.turnId === null)).toHaveLength(state.compactions);

          const stored = await assertStoredInvariants(storage, session.sessionId);
          assertNoRunningAfterTerminal(stored.turns, session.status());
          expect(stored.turns.map((t) => t.id).sort(), 'every accepted turn has its row').toEqual([...state.turns].sort());
          for (const turnId of state.turns) {
            const finished = state.envelopes.filter((e) => e.turnId === turnId && e.update.type === 'turn_finished');
            expect(finished, `turn ${turnId} finished once`).toHaveLength(1);
          }
          assertAllRequests(model.requests);
          // No model call before the results of the calls before it; requests per turn match its submissions.
          expect(turnRequests.every((r) => r.turnId !== null), 'every non-summary request was made by a running turn').toBe(true);
          assertRequestsFollowResults(turnRequests, stored);
          assertSequences(state.envelopes, { fromOne: true });
          await session.shutdown();
        },
      ),
      fuzzParameters(40),
    );
  }, fuzzTimeout(40));
});
