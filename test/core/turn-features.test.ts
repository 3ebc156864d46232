/**
 * update_plan (reference §6), the mailbox (§5.6), steering and grant scopes (seed 004), input
 * answers, permission modes, write failures and the trace of a turn.
 */
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import type { PermissionMode } from '../../src/protocol/input.js';
import { createCore } from '../../src/core.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { agentMessageId, type AgentMessage } from '../../src/services/agents/mailbox.js';
import { defineTool } from '../../src/services/tools/define.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { faultyStorage } from '../support/faults.js';
import { harness, updateTypes } from '../support/harness.js';
import { assertStoredInvariants } from '../support/invariants.js';
import { usePglite } from '../support/databases.js';

function agentMessage(child: string, body: string): AgentMessage {
  return { id: agentMessageId(child, `${child}-turn`, 'final_answer'), taskName: 'find_auth', kind: 'final_answer', body };
}

describe('turn features', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  describe('update_plan', () => {
    it('rejects invalid plans with the rule named, keeps the old plan, and continues the turn', async () => {
      const valid = { plan: [{ step: 'read', status: 'completed' }, { step: 'write', status: 'in_progress' }] };
      const invalid = [
        { plan: [{ step: 'a', status: 'in_progress' }, { step: 'b', status: 'in_progress' }] },
        { plan: [{ step: '   ', status: 'pending' }] },
        { plan: [{ step: 'x'.repeat(1025), status: 'pending' }] },
        { plan: Array.from({ length: 129 }, (_, i) => ({ step: `s${i}`, status: 'pending' })) },
        { plan: [{ step: 'a', status: 'done' }] },
        { steps: [] },
        { plan: [], extra: true },
      ];
      const h = await harness(storage, [
        { toolCalls: [{ name: 'update_plan', arguments: valid }] },
        { toolCalls: invalid.map((args) => ({ name: 'update_plan', arguments: args })) },
        { text: 'done' },
      ]);
      const { turnId, outcome } = await h.run('plan');
      expect(outcome.status).toBe('completed');
      const texts = h.model.requests[2]!.messages.filter((m) => m.role === 'tool').slice(1).map((m) => (m as { text: string }).text);
      expect(texts.slice(0, 4)).toEqual([
        'at most one step may be in_progress, but steps 0 and 1 are both in_progress',
        'plan step 0 must not be blank',
        'plan step 0 exceeds 1024 characters',
        'plan must not exceed 128 steps',
      ]);
      for (const text of texts.slice(4)) expect(text).toMatch(/^failed to parse update_plan arguments: /);
      expect(updateTypes(h.updates).filter((t) => t === 'plan_updated')).toHaveLength(1);
      expect(await storage.loadSessionTurnPlans(h.session.sessionId)).toEqual([{ turnId, explanation: null, steps: valid.plan, updatedAt: expect.any(String) }]);
      expect((await storage.getTurn(turnId))!.planUnfinishedStepCount).toBe(1);
    });

    it('emits plan_updated after the commit and before tool_call_finished; a new turn starts without a plan', async () => {
      const h = await harness(storage, [
        { toolCalls: [{ name: 'update_plan', arguments: { plan: [{ step: 'only', status: 'completed' }] } }] },
        { text: 'ok' },
        { text: 'second turn' },
      ]);
      await h.run('one');
      const types = updateTypes(h.updates);
      expect(types.indexOf('plan_updated')).toBeLessThan(types.lastIndexOf('tool_call_finished'));
      const result = h.model.requests[1]!.messages.at(-1);
      expect(result).toMatchObject({ role: 'tool', status: 'success', text: 'Plan updated' });
      const { turnId } = await h.run('two');
      expect(h.session.snapshot().runtime).toMatchObject({ type: 'terminal', turnId, plan: null });
      expect((await storage.getTurn(turnId))!.planUnfinishedStepCount).toBeNull();
    });

    // A failed plan commit: test/faults/degradation.test.ts, 'plan write fails: the turn fails, no plan_updated, no plan row'.

    it('repeating the same plan to the threshold ends the turn as doom_loop', async () => {
      const call = { name: 'update_plan', arguments: { plan: [{ step: 'same', status: 'pending' }] } };
      const h = await harness(storage, [{ toolCalls: [call] }, { toolCalls: [call] }, { toolCalls: [call] }]);
      const { outcome } = await h.run('loop');
      expect(outcome).toMatchObject({ status: 'failed', code: 'doom_loop', message: "doom loop detected for tool 'update_plan'" });
    });
  });

  describe('mailbox', () => {
    it('an idle session keeps agent messages for the next user turn, after the user message', async () => {
      const h = await harness(storage, [{ text: 'seen it' }]);
      await h.session.deliverAgentMessage(agentMessage('child1', 'the auth flow is in auth.ts'));
      expect(h.model.requests).toHaveLength(0); // No turn was started by the delivery.
      await h.run('what did the child say?');
      const [first] = h.model.requests;
      expect(first!.messages.map((m) => (m.role === 'user' ? m.kind : m.role))).toEqual(['normal', 'agent_message']);
      expect((first!.messages[1] as { content: Array<{ text: string }> }).content[0]!.text).toBe(
        '<agent_message>\n<task>find_auth</task>\n<kind>final_answer</kind>\n<body>\nthe auth flow is in auth.ts\n</body>\n</agent_message>',
      );
      const stored = await h.session.messages();
      expect(stored.find((m) => m.kind === 'agent_message')).toMatchObject({ id: 'agent-msg:child1:child1-turn:final_answer', role: 'user' });
    });

    it('a message delivered during a turn enters before the next model call; a duplicate id is dropped', async () => {
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const h = await harness(storage, [{ gate, step: { toolCalls: [{ name: 'echo', arguments: { text: 'x' } }] } }, { text: 'done' }]);
      const turnId = await h.start('work');
      await h.waitFor((e) => e.update.type === 'phase_changed' && e.update.phase === 'running_model');
      await h.session.deliverAgentMessage(agentMessage('child2', 'first'));
      await h.session.deliverAgentMessage(agentMessage('child2', 'first again'));
      release();
      await h.session.waitForTurn(turnId);
      const second = h.model.requests[1]!;
      const kinds = second.messages.map((m) => (m.role === 'user' ? m.kind : m.role));
      expect(kinds).toEqual(['normal', 'assistant', 'tool', 'agent_message']);
      expect((await h.session.messages()).filter((m) => m.kind === 'agent_message')).toHaveLength(1);
    });

    it('a message arriving after the final answer waits for the next user turn', async () => {
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const h = await harness(storage, [{ gate, step: { text: 'final' } }, { text: 'next' }]);
      const turnId = await h.start('one');
      await h.waitFor((e) => e.update.type === 'phase_changed' && e.update.phase === 'running_model');
      // Model call in flight: the drain for this call is over; the message waits for the next drain.
      await h.session.deliverAgentMessage(agentMessage('child3', 'late'));
      release();
      await h.session.waitForTurn(turnId);
      expect(h.model.requests).toHaveLength(1);
      expect((await h.session.messages()).some((m) => m.kind === 'agent_message')).toBe(false);
      await h.run('two');
      expect(h.model.requests[1]!.messages.at(-1)).toMatchObject({ role: 'user', kind: 'agent_message' });
    });

    it('refuses an envelope of 4,000 estimated tokens or more with agent_delivery_failed', async () => {
      const h = await harness(storage, []);
      await expect(h.session.deliverAgentMessage(agentMessage('big', 'x'.repeat(16_000)))).rejects.toMatchObject({ code: 'agent_delivery_failed' });
    });
  });

  describe('steering', () => {
    it('steered input is written and seen before the next model call', async () => {
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const h = await harness(storage, [{ gate, step: { toolCalls: [{ name: 'echo', arguments: { text: 'x' } }] } }, { text: 'adjusted' }]);
      const turnId = await h.start('do it');
      await h.waitFor((e) => e.update.type === 'phase_changed' && e.update.phase === 'running_model');
      await h.session.steerTurn(turnId, [{ type: 'text', text: 'actually, use tabs' }]);
      release();
      expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'adjusted' });
      expect(h.model.requests[1]!.messages.at(-1)).toEqual({ role: 'user', kind: 'normal', content: [{ type: 'text', text: 'actually, use tabs' }] });
      await assertStoredInvariants(storage, h.session.sessionId);
    });

    it('input steered during the final answer gets one more model call in the same turn', async () => {
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const h = await harness(storage, [{ gate, step: { text: 'first answer' } }, { text: 'answer to the steer' }]);
      const turnId = await h.start('question');
      await h.waitFor((e) => e.update.type === 'phase_changed' && e.update.phase === 'running_model');
      await h.session.steerTurn(turnId, [{ type: 'text', text: 'and one more thing' }]);
      release();
      expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'answer to the steer' });
      expect(h.model.requests).toHaveLength(2);
    });

    it('steering answers turn_not_active, empty_input and invalid_request', async () => {
      const h = await harness(storage, [{ hang: true }]);
      await expect(h.session.steerTurn('nope', [{ type: 'text', text: 'x' }])).rejects.toMatchObject({ code: 'turn_not_active' });
      const turnId = await h.start('x');
      await expect(h.session.steerTurn(turnId, [{ type: 'text', text: '  ' }])).rejects.toMatchObject({ code: 'empty_input' });
      await expect(h.session.steerTurn(turnId, [{ type: 'bogus' } as never])).rejects.toMatchObject({ code: 'invalid_request' });
      await expect(h.session.steerTurn('other', [{ type: 'text', text: 'x' }])).rejects.toMatchObject({ code: 'turn_not_active' });
      // The hanging step is played (the model call is under way) before the turn is cancelled.
      await vi.waitFor(() => expect(h.model.requests).toHaveLength(1));
      await h.session.cancelTurn(turnId);
      expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
    });
  });

  describe('grant scopes', () => {
    async function approveNext(h: Awaited<ReturnType<typeof harness>>, turnId: string, decision: 'allow_for_turn' | 'allow_for_session' | 'allow_once', after = 0) {
      const requested = await h.waitFor((e) => e.update.type === 'permission_requested' && e.sequence > after);
      await h.session.resolvePermission(turnId, (requested.update as { toolCallId: string }).toolCallId, decision);
      return requested.sequence;
    }

    it('allow_once covers one call; allow_for_turn covers the rest of that turn only', async () => {
      const call = (action: string, scope = 'deploy') => ({ name: 'guarded', arguments: { action, scope } });
      const h = await harness(storage, [
        { toolCalls: [call('a'), call('b')] },
        { toolCalls: [call('c'), call('d', 'other')] },
        { text: 'turn one done' },
        { toolCalls: [call('e')] },
        { text: 'turn two done' },
      ]);
      const turnId = await h.start('one');
      let seq = await approveNext(h, turnId, 'allow_once'); // a
      seq = await approveNext(h, turnId, 'allow_for_turn', seq); // b: grants "guarded:deploy" for this turn
      // c runs without a card; d has another grant key and asks.
      seq = await approveNext(h, turnId, 'allow_once', seq);
      expect(await h.session.waitForTurn(turnId)).toMatchObject({ status: 'completed' });
      const cards = h.updates.filter((e) => e.update.type === 'permission_requested');
      expect(cards).toHaveLength(3);
      // The turn grant is gone with its turn.
      const second = await h.start('two');
      await approveNext(h, second, 'allow_once', seq);
      expect(await h.session.waitForTurn(second)).toMatchObject({ status: 'completed' });
    });

    // A session grant covering later turns, keyed by environment: test/services/tools/tools-in-turns.test.ts, 'grants are keyed by environment id: ...'.
    // A late decision: test/services/tools/tools-in-turns.test.ts, 'a late allow_for_session (its turn was cancelled meanwhile) is refused, ...'.
  });

  describe('commands and modes', () => {
    it('startTurn answers empty_input, input_too_large and invalid_request before anything happens', async () => {
      const h = await harness(storage, [], { maxUserInputTokens: 100 });
      await expect(h.session.startTurn({ clientRequestId: 'a', input: [] })).rejects.toMatchObject({ code: 'empty_input' });
      await expect(h.session.startTurn({ clientRequestId: 'a', input: [{ type: 'skill', name: 's', path: '/p' }] })).rejects.toMatchObject({ code: 'empty_input' });
      await expect(h.session.startTurn({ clientRequestId: 'a', input: [{ type: 'text', text: 'x'.repeat(1000) }] })).rejects.toMatchObject({ code: 'input_too_large' });
      await expect(h.session.startTurn({ clientRequestId: '', input: [{ type: 'text', text: 'x' }] })).rejects.toMatchObject({ code: 'invalid_request' });
      expect(await h.session.turns()).toEqual([]);
      expect(h.updates).toEqual([]);
    });

    it('TurnAccepted returns before the turn row is written', async () => {
      const faulty = faultyStorage(storage);
      let releaseWrite!: () => void;
      const writeGate = new Promise<void>((r) => (releaseWrite = r));
      const inner = faulty.beginTurn.bind(faulty);
      faulty.beginTurn = async (input) => {
        await writeGate;
        return inner(input);
      };
      const h = await harness(faulty, [{ text: 'ok' }]);
      const turnId = await h.start('x');
      expect(await storage.getTurn(turnId)).toBeNull();
      expect(h.session.snapshot().runtime).toMatchObject({ type: 'running', phase: 'starting' });
      releaseWrite();
      expect(await h.session.waitForTurn(turnId)).toMatchObject({ status: 'completed' });
    });

    // A failed turn start: test/faults/degradation.test.ts, 'turn row or user message write fails: no model call, persistence_error'.

    // A failed tool result write: test/faults/degradation.test.ts, 'tool result write fails: no further model call, ...'.

    it('a permission mode switch persists and applies from the next tool call, even mid-turn', async () => {
      const seen: PermissionMode[] = [];
      const modeTool = defineTool({
        name: 'mode',
        description: 'reports the mode',
        parameters: z.object({ n: z.number() }),
        execute: (_args, ctx) => {
          seen.push(ctx.permissionMode);
          return ctx.permissionMode;
        },
      });
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const h = await harness(storage, [{ toolCalls: [{ name: 'mode', arguments: { n: 1 } }] }, { gate, step: { toolCalls: [{ name: 'mode', arguments: { n: 2 } }] } }, { text: 'ok' }], {
        tools: [modeTool],
      });
      const turnId = await h.start('modes');
      await h.waitFor((e) => e.update.type === 'tool_call_finished');
      await h.session.setPermissionMode('accept_edits');
      release();
      await h.session.waitForTurn(turnId);
      expect(seen).toEqual(['auto', 'accept_edits']);
      // Reference §4.14: each tool span says the mode at call time and where it came from.
      await h.core.flushTrace();
      const spans = (await storage.listTraceSpans({ turnId })).filter((s) => s.kind === 'tool_call');
      expect(spans.map((s) => [s.attributes.sessionMode, s.attributes.sessionModeOrigin, s.attributes.sandboxMode])).toEqual([
        ['auto', 'session_default', 'auto'],
        ['accept_edits', 'user_toggle', 'accept_edits'],
      ]);
      expect(await storage.getSession(h.session.sessionId)).toMatchObject({ permissionMode: 'accept_edits', permissionModeOrigin: 'user_toggle' });
      expect(h.session.snapshot().permissionMode).toBe('accept_edits');
      await expect(h.session.setPermissionMode('yolo' as never)).rejects.toMatchObject({ code: 'invalid_request' });

      // After a restart the toggled mode is still the user's: the origin is stored with the mode.
      await h.core.shutdown();
      const again = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model: scriptedModel([{ toolCalls: [{ name: 'mode', arguments: { n: 3 } }] }, { text: 'ok' }]), tools: [modeTool], closeStorageOnShutdown: false, worldState: false });
      try {
        const loaded = await again.loadSession(h.session.sessionId);
        const { turnId: later } = await loaded.startTurn({ clientRequestId: 'after-restart', input: [{ type: 'text', text: 'modes again' }] });
        await loaded.waitForTurn(later);
        await again.flushTrace();
        const after = (await storage.listTraceSpans({ turnId: later })).filter((s) => s.kind === 'tool_call');
        expect(after.map((s) => [s.attributes.sessionMode, s.attributes.sessionModeOrigin])).toEqual([['accept_edits', 'user_toggle']]);
        expect(seen.at(-1)).toBe('accept_edits');
      } finally {
        await again.shutdown();
      }
    });
  });

  it('trace: one model span per submission and one tool span per call, linked to the model call', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'a' } }, { name: 'update_plan', arguments: { plan: [] } }] }, { text: 'done' }]);
    const { turnId } = await h.run('trace');
    await h.core.flushTrace();
    const spans = await storage.listTraceSpans({ turnId });
    const turn = (await storage.getTurn(turnId))!;
    const models = spans.filter((s) => s.kind === 'model_call');
    const tools = spans.filter((s) => s.kind === 'tool_call');
    expect(models).toHaveLength(turn.modelSubmissionCount);
    expect(tools).toHaveLength(turn.toolCallCount);
    expect(new Set(spans.map((s) => s.traceId))).toEqual(new Set([turnId]));
    expect(models.every((s) => s.status === 'succeeded' && s.responseMessageId !== null && s.parentSpanId === null)).toBe(true);
    expect(tools.map((s) => [s.resolvedToolName, s.parentSpanId, s.attributes.permissionDecisionSource])).toEqual([
      ['echo', models[0]!.id, 'sandbox'],
      ['update_plan', models[0]!.id, 'control_tool'],
    ]);
    // Reference §6.5: a control tool records the session's mode and its origin, never `sandboxMode`.
    expect(tools[1]!.attributes).toMatchObject({ permissionDecision: 'allow', sessionMode: 'auto', sessionModeOrigin: 'session_default' });
    expect(tools[1]!.attributes).not.toHaveProperty('sandboxMode');
    const payloads = await storage.db.query(`SELECT slot FROM trace_span_payloads WHERE span_id = $1 ORDER BY slot`, [models[0]!.id]);
    expect(payloads.rows.map((r) => r.slot)).toEqual(['request', 'system_context', 'tool_definitions']);
  });
});
