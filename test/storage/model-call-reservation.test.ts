/**
 * Issue 14 point 2: the model-call counters ride on the fact before the call. Begin turn reserves
 * the first model call and the batch's last tool result the next one, in the same statement (one
 * flushed commit); the model-call actor then writes no counter statement of its own; the turn's end
 * takes back a reservation whose call was never made (a cancel between the fact and the call). On
 * PGlite and a real Postgres server, through the storage and through the runtime.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NewMessage } from '../../src/protocol/content.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { backends, useBackend } from '../support/databases.js';
import { faultyStorage } from '../support/faults.js';
import { harness } from '../support/harness.js';
import { assertStoredInvariants } from '../support/invariants.js';
import { beginRunningTurn, toolResultMessage, uid } from '../support/storage-fixtures.js';

const toolResult = toolResultMessage;
const assistant = (callId: string): NewMessage => ({ id: uid('msg'), role: 'assistant', kind: 'normal', content: [{ type: 'tool_call', callId, name: 'echo', arguments: '{}' }] });
const usage = { inputTokens: 1, outputTokens: 1, cachedInputTokens: 0, reasoningTokens: 0 };
const echo = (n: number) => ({ name: 'echo', arguments: { text: `e${n}` }, callId: `echo_${n}` });

describe.each(backends)('model-call reservation in storage on $name', (backend) => {
  let storage: SqlSessionStorage;
  beforeAll(async () => {
    storage = await backend.create();
    await storage.migrate();
  });
  afterAll(async () => {
    await storage.close();
  });

  const begin = (reserveModelCall: boolean) => beginRunningTurn(storage, { reserveModelCall });

  it('begin turn and a tool result reserve the next call in their own statement; the end takes an unmade one back', async () => {
    const { turnId } = await begin(true);
    expect(await storage.getTurn(turnId)).toMatchObject({ modelCallCount: 1, modelSubmissionCount: 1 });
    await storage.commitAssistantMessage(turnId, assistant('c1'), usage, 1);
    await storage.commitToolResult(turnId, toolResult('c1'), 2);
    expect(await storage.getTurn(turnId)).toMatchObject({ modelCallCount: 2, modelSubmissionCount: 2 });
    // A resubmission of call 2 (an overflow) counts a submission, not a call.
    await storage.recordModelCallStart(turnId, 2);
    await storage.commitAssistantMessage(turnId, assistant('c2'), usage, 1);
    await storage.commitToolResult(turnId, toolResult('c2'), 3);
    expect(await storage.getTurn(turnId)).toMatchObject({ modelCallCount: 3, modelSubmissionCount: 4 });
    // Call 3 was never made (a cancel came first): the end says what happened.
    expect(await storage.finishTurn(turnId, { status: 'cancelled', planUnfinishedStepCount: null, unmadeModelCall: 3 })).toBe(true);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'cancelled', modelCallCount: 2, modelSubmissionCount: 3 });
  });

  it('without a reservation nothing is counted, and an end with nothing to take back leaves the counters', async () => {
    const { turnId } = await begin(false);
    expect(await storage.getTurn(turnId)).toMatchObject({ modelCallCount: 0, modelSubmissionCount: 0 });
    await storage.recordModelCallStart(turnId, 1);
    await storage.commitAssistantMessage(turnId, assistant('c1'), usage, 1);
    await storage.commitToolResult(turnId, toolResult('c1'));
    expect(await storage.getTurn(turnId)).toMatchObject({ modelCallCount: 1, modelSubmissionCount: 1 });
    await storage.finishTurn(turnId, { status: 'completed', planUnfinishedStepCount: null, unmadeModelCall: 0 });
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'completed', modelCallCount: 1, modelSubmissionCount: 1 });
  });

  it('a refused tool result reserves nothing (one statement: all or nothing)', async () => {
    const { turnId } = await begin(true);
    await storage.commitAssistantMessage(turnId, assistant('c1'), usage, 1);
    const result = toolResult('c1');
    await storage.commitToolResult(turnId, result, 2);
    // The same message id again: the insert fails, so the reservation of call 3 must not land.
    await expect(storage.commitToolResult(turnId, toolResult('c1', result.id), 3)).rejects.toMatchObject({ code: 'persistence_error', sqlState: '23505' });
    expect(await storage.getTurn(turnId)).toMatchObject({ modelCallCount: 2, modelSubmissionCount: 2 });
    // And a turn that is no longer running takes no reservation.
    await storage.interruptTurn(turnId, { errorCode: 'process_restart', errorMessage: 'corrected' });
    await expect(storage.commitToolResult(turnId, toolResult('c2'), 3)).rejects.toMatchObject({ code: 'persistence_error' });
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'interrupted', modelCallCount: 2, modelSubmissionCount: 2 });
  });
});

describe.each(backends)('model-call reservation in the runtime on $name', (backend) => {
  let storage: SqlSessionStorage;
  useBackend(backend, (s) => (storage = s));

  it('a turn of tool steps counts every call as before, with no counter statement of its own', async () => {
    const faulty = faultyStorage(storage);
    const h = await harness(faulty, [{ toolCalls: [echo(1)] }, { toolCalls: [echo(2), echo(3)] }, { toolCalls: [echo(4)] }, { text: 'done' }]);
    const { turnId, outcome } = await h.run('go');
    expect(outcome).toEqual({ status: 'completed', finalText: 'done' });
    expect(h.model.requests).toHaveLength(4);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'completed', modelCallCount: 4, modelSubmissionCount: 4, toolCallCount: 4 });
    // Every call was reserved by the fact before it (begin, then each batch's last result).
    expect(faulty.calls.filter((c) => c.method === 'recordModelCallStart')).toEqual([]);
    expect(faulty.calls.filter((c) => c.method === 'commitToolResult').map((c) => c.args[2] ?? 0)).toEqual([2, 0, 3, 4]);
    await assertStoredInvariants(storage, h.session.sessionId);
  });

  it('a cancel while the last tool result commits: the reserved call is never made and the end takes it back', async () => {
    const faulty = faultyStorage(storage);
    const held = faulty.hold('commitToolResult');
    const h = await harness(faulty, [{ toolCalls: [echo(1)] }]);
    const turnId = await h.start('go');
    await held.reached;
    // The result (with call 2's reservation) is on its way; the cancel lands before the call.
    await h.session.cancelTurn(turnId);
    held.release();
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
    expect(h.model.requests).toHaveLength(1);
    expect(faulty.calls.find((c) => c.method === 'commitToolResult')!.args[2]).toBe(2);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'cancelled', modelCallCount: 1, modelSubmissionCount: 1, toolCallCount: 1 });
    await assertStoredInvariants(storage, h.session.sessionId);
  });

  it('a cancel while the turn begins: the first call is never made and nothing stays counted', async () => {
    const faulty = faultyStorage(storage);
    const held = faulty.hold('beginTurn');
    const h = await harness(faulty, []);
    const turnId = await h.start('go');
    await held.reached;
    await h.session.cancelTurn(turnId);
    held.release();
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
    expect(h.model.requests).toHaveLength(0);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'cancelled', modelCallCount: 0, modelSubmissionCount: 0 });
  });

  it('an approved call (the tool-call machine records it) leaves the next call its own counter statement', async () => {
    const faulty = faultyStorage(storage);
    const h = await harness(faulty, [{ toolCalls: [{ name: 'guarded', arguments: { action: 'x' }, callId: 'a1' }] }, { text: 'done' }]);
    const turnId = await h.start('go');
    const card = await h.waitFor((e) => e.update.type === 'permission_requested');
    await h.session.resolvePermission(turnId, (card.update as { toolCallId: string }).toolCallId, 'allow_once');
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'done' });
    expect(faulty.calls.filter((c) => c.method === 'recordModelCallStart').map((c) => c.args[1])).toEqual([2]);
    expect(await storage.getTurn(turnId)).toMatchObject({ modelCallCount: 2, modelSubmissionCount: 2 });
  });
});
