/**
 * request_user_input (seed 004 TurnState `pending_user_input`, DECISIONS §5 status flag
 * `waiting_on_user_input`): the model asks, the turn waits in `waiting_user_input`, the host answers
 * or cancels, and the answer (or the cancellation) is the call's one written result.
 */
import { describe, expect, it } from 'vitest';
import { CommandError, InputError } from '../../../src/errors.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { harness, updateTypes } from '../../support/harness.js';
import { assertStoredInvariants } from '../../support/invariants.js';
import { usePglite } from '../../support/databases.js';

const ASK = {
  name: 'request_user_input',
  arguments: {
    questions: [
      { id: 'indent', header: 'Style', question: 'Tabs or spaces?', options: [{ label: 'tabs' }, { label: 'spaces', description: 'two of them' }] },
      { id: 'scope', question: 'Which directory should I change?' },
    ],
  },
};

async function expectCode(promise: Promise<unknown>, code: string, type: typeof CommandError | typeof InputError): Promise<void> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(type);
  expect((error as CommandError).code).toBe(code);
}

describe('request_user_input', () => {
  let storage!: SqlSessionStorage;
  usePglite((s) => (storage = s));

  it('is offered only when the core is created with userInput: true', async () => {
    const off = await harness(storage, [{ text: 'ok' }]);
    await off.run('hi');
    expect(off.model.requests[0]!.tools.map((t) => t.name)).not.toContain('request_user_input');

    const on = await harness(storage, [{ text: 'ok' }], { userInput: true });
    await on.run('hi');
    const tool = on.model.requests[0]!.tools.find((t) => t.name === 'request_user_input');
    expect(tool?.parameters).toMatchObject({ type: 'object', required: ['questions'] });
    expect(on.model.requests[0]!.system.map((p) => p.content).join('\n')).toContain('## Asking the user');
  });

  it('waits in waiting_user_input with the status flag, and the answers become the call result', async () => {
    const h = await harness(storage, [{ toolCalls: [ASK] }, { text: 'using tabs in src' }], { userInput: true });
    const turnId = await h.start('format the code');
    const asked = await h.waitFor((e) => e.update.type === 'user_input_requested');
    if (asked.update.type !== 'user_input_requested') throw new Error('unreachable');
    expect(asked.update.request).toEqual(ASK.arguments);

    const snap = h.session.snapshot();
    expect(snap.runtime).toMatchObject({ type: 'running', phase: 'waiting_user_input', pendingUserInput: [{ toolCallId: asked.update.toolCallId, request: ASK.arguments }] });
    expect(h.session.status()).toEqual({ type: 'active', activeFlags: ['waiting_on_user_input'] });
    expect(h.model.requests).toHaveLength(1);

    await h.session.answerUserInput(turnId, asked.update.toolCallId, { scope: 'src', indent: 'tabs' });
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'using tabs in src' });

    // The model reads the answers in question order as the call's result.
    const result = h.model.requests[1]!.messages.at(-1);
    expect(result).toMatchObject({ role: 'tool', toolName: 'request_user_input', status: 'success', text: '{"answers":{"indent":"tabs","scope":"src"}}' });
    const types = updateTypes(h.updates);
    expect(types.indexOf('user_input_requested')).toBeLessThan(types.indexOf('user_input_resolved'));
    expect(h.updates.find((e) => e.update.type === 'user_input_resolved')!.update).toEqual({
      type: 'user_input_resolved',
      toolCallId: asked.update.toolCallId,
      outcome: 'answered',
      answers: { scope: 'src', indent: 'tabs' },
    });
    expect(h.updates.filter((e) => e.update.type === 'phase_changed').map((e) => (e.update as { phase: string }).phase)).toEqual([
      'starting',
      'running_model',
      'running_tools',
      'waiting_user_input',
      'running_tools',
      'running_model',
      'completed',
    ]);
    expect(h.session.status()).toEqual({ type: 'idle' });
    const stored = await assertStoredInvariants(storage, h.session.sessionId);
    expect(stored.messages.filter((m) => m.role === 'tool')).toHaveLength(1);
  });

  it('answers invalid_request for answers that do not fit, user_input_not_pending and turn_not_active otherwise', async () => {
    const h = await harness(storage, [{ toolCalls: [ASK] }, { text: 'done' }], { userInput: true });
    const turnId = await h.start('ask me');
    const asked = await h.waitFor((e) => e.update.type === 'user_input_requested');
    const { toolCallId } = asked.update as { toolCallId: string };

    await expectCode(h.session.answerUserInput(turnId, toolCallId, { indent: 'tabs' }), 'invalid_request', InputError);
    await expectCode(h.session.answerUserInput(turnId, toolCallId, { indent: 'tabs', scope: 'src', extra: 'x' }), 'invalid_request', InputError);
    await expectCode(h.session.answerUserInput(turnId, toolCallId, { indent: '   ', scope: 'src' }), 'invalid_request', InputError);
    await expectCode(h.session.answerUserInput(turnId, toolCallId, 'tabs' as never), 'invalid_request', InputError);
    await expectCode(h.session.answerUserInput(turnId, 'tc_other', { indent: 'tabs' }), 'user_input_not_pending', CommandError);
    await expectCode(h.session.answerUserInput('turn_other', toolCallId, { indent: 'tabs', scope: 'src' }), 'turn_not_active', CommandError);
    // None of that disturbed the wait.
    expect(h.session.status()).toEqual({ type: 'active', activeFlags: ['waiting_on_user_input'] });

    await h.session.answerUserInput(turnId, toolCallId, { indent: 'spaces', scope: 'lib' });
    await h.session.waitForTurn(turnId);
    // A second answer to the same call, after the turn is over, finds nothing waiting.
    await expectCode(h.session.answerUserInput(turnId, toolCallId, { indent: 'tabs', scope: 'src' }), 'turn_not_active', CommandError);
  });

  it('a cancel during the wait withdraws the question, writes a cancelled result and ends the turn cancelled', async () => {
    const h = await harness(storage, [{ toolCalls: [ASK, { name: 'echo', arguments: { text: 'after' } }] }, { text: 'next turn' }], { userInput: true });
    const turnId = await h.start('ask me');
    const asked = await h.waitFor((e) => e.update.type === 'user_input_requested');
    const { toolCallId } = asked.update as { toolCallId: string };
    await h.session.cancelTurn(turnId);
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
    expect(h.updates.find((e) => e.update.type === 'user_input_resolved')!.update).toEqual({ type: 'user_input_resolved', toolCallId, outcome: 'cancelled' });
    expect(h.session.status()).toEqual({ type: 'idle' });
    await expectCode(h.session.answerUserInput(turnId, toolCallId, { indent: 'tabs', scope: 'src' }), 'turn_not_active', CommandError);

    // Both calls have their one result: the question cancelled, the echo not run.
    const stored = await assertStoredInvariants(storage, h.session.sessionId);
    const results = stored.messages.filter((m) => m.role === 'tool').map((m) => m.content[0] as { status: string; callId: string });
    expect(results.map((r) => r.status)).toEqual(['cancelled', 'cancelled']);
    const next = await h.run('go on');
    expect(next.outcome).toEqual({ status: 'completed', finalText: 'next turn' });
  });

  it('malformed questions are the model error: a failed result with the rule named, and the turn goes on', async () => {
    const bad = { name: 'request_user_input', arguments: { questions: [{ id: 'Not Snake', question: 'x' }, { id: 'a', question: 'y', options: [{ label: 'only one' }] }] } };
    const dup = { name: 'request_user_input', arguments: { questions: [{ id: 'a', question: 'x' }, { id: 'a', question: 'y' }] } };
    const h = await harness(storage, [{ toolCalls: [bad] }, { toolCalls: [dup] }, { text: 'gave up asking' }], { userInput: true });
    const { outcome } = await h.run('ask me badly');
    expect(outcome).toEqual({ status: 'completed', finalText: 'gave up asking' });
    const first = h.model.requests[1]!.messages.at(-1) as { status: string; text: string };
    expect(first.status).toBe('error');
    expect(first.text).toContain('invalid tool input: failed to parse request_user_input arguments');
    expect(first.text).toContain('questions.0.id');
    expect(first.text).toContain('questions.1.options');
    expect((h.model.requests[2]!.messages.at(-1) as { text: string }).text).toContain('duplicate question id a');
    expect(updateTypes(h.updates)).not.toContain('user_input_requested');
  });

  it('a shutdown while waiting records the call as outcome unknown and the restarted session is idle', async () => {
    const h = await harness(storage, [{ toolCalls: [ASK] }], { userInput: true });
    const turnId = await h.start('ask me');
    await h.waitFor((e) => e.update.type === 'user_input_requested');
    await h.core.shutdown();
    const turn = await storage.getTurn(turnId);
    expect(turn?.status).toBe('failed');
    const stored = await assertStoredInvariants(storage, h.session.sessionId);
    expect(stored.messages.filter((m) => m.role === 'tool').map((m) => (m.content[0] as { status: string }).status)).toEqual(['outcome_unknown']);
  });
});
