/**
 * Fault injection (issue 6, item 5): a failure at each storage write — turn start, assistant
 * message, tool result, plan, mailbox message, World State message, checkpoint (in a turn and
 * manual), prune watermark, explorer row, end of turn — and a Postgres server stopped and restarted
 * mid-turn (during the model call, a tool run, a compaction's summary). Every row of seed 000 §11's
 * degradation table (and reference §3.2 / §3.9 for the compaction writes) is checked exactly, and
 * after each fault the session accepts a new turn once the database works again.
 */
import { appendFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { SUMMARY_PREFIX } from '../../src/services/context/chat-state.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { config as rxjsConfig } from 'rxjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore } from '../../src/core.js';
import { ModelError } from '../../src/errors.js';
import { agentMessageId } from '../../src/services/agents/mailbox.js';
import { INTERRUPTED_RESULT_TEXT } from '../../src/services/context/assemble.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { defineTool } from '../../src/services/tools/define.js';
import { postgresStorage } from '../../src/storage/postgres.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { failTool } from '../../src/testing/tools.js';
import { backends, useBackend } from '../support/databases.js';
import { faultyStorage, spyTool, type FaultyStorage } from '../support/faults.js';
import { harness, updateTypes, type Harness } from '../support/harness.js';
import { compactingModel, validSummary } from '../support/summaries.js';
import { assertNoRunningAfterTerminal, assertSequences, assertStoredInvariants } from '../support/invariants.js';
import { startPostgres, type PostgresServer } from '../support/postgres-server.js';


const spy = (n: number, callId = `spy_${n}`) => ({ name: 'spy', arguments: { n }, callId });

/** After the fault: the database works again, the session takes a turn, the rows are consistent. */
async function recovers(h: Harness, storage: SqlSessionStorage, faulty: FaultyStorage, expectedText = 'back'): Promise<void> {
  faulty.clear();
  const { outcome } = await h.run('again');
  expect(outcome).toEqual({ status: 'completed', finalText: expectedText });
  const stored = await assertStoredInvariants(storage, h.session.sessionId);
  assertNoRunningAfterTerminal(stored.turns, h.session.status());
  expect(h.session.status()).toEqual({ type: 'idle' });
  assertSequences(h.updates, { fromOne: true });
}

describe.each(backends)('degradation table (seed 000 §11) on $name', (backend) => {
  let storage: SqlSessionStorage;

  useBackend(backend, (s) => (storage = s));

  it('turn row or user message write fails: no model call, persistence_error', async () => {
    const faulty = faultyStorage(storage);
    faulty.failOn('beginTurn', 1);
    const h = await harness(faulty, [{ text: 'back' }]);
    const { turnId, outcome } = await h.run('first');
    expect(outcome).toMatchObject({ status: 'failed', code: 'persistence_error' });
    expect(h.model.requests).toHaveLength(0);
    expect(await storage.getTurn(turnId)).toBeNull();
    expect(await storage.listMessages(h.session.sessionId)).toEqual([]);
    await recovers(h, storage, faulty);
    // The failed input was never stored, so the next request holds only the new one.
    expect(h.model.requests[0]!.messages.map((m) => m.role)).toEqual(['user']);
  });

  it('assistant message write fails: no tool runs, the turn fails', async () => {
    const ran: number[] = [];
    const faulty = faultyStorage(storage);
    faulty.failOn('commitAssistantMessage', 1);
    const h = await harness(faulty, [{ text: 'calling', toolCalls: [spy(1)] }, { text: 'back' }], { tools: [spyTool(ran)] });
    const { turnId, outcome } = await h.run('first');
    expect(outcome).toMatchObject({ status: 'failed', code: 'persistence_error' });
    expect(ran).toEqual([]);
    expect(updateTypes(h.updates)).not.toContain('tool_call_started');
    expect(h.updates.find((u) => u.update.type === 'draft_cleared')?.update).toEqual({ type: 'draft_cleared', reason: 'discarded' });
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'persistence_error', toolCallCount: 0 });
    expect((await storage.listMessages(h.session.sessionId)).map((m) => m.role)).toEqual(['user']);
    await recovers(h, storage, faulty);
    expect(ran).toEqual([]);
  });

  it('tool result write fails: no further model call, the turn fails, the rest of the batch is cancelled', async () => {
    const ran: number[] = [];
    const faulty = faultyStorage(storage);
    faulty.failOn('commitToolResult', 1);
    const h = await harness(faulty, [{ toolCalls: [spy(1), spy(2)] }, { text: 'back' }], { tools: [spyTool(ran)] });
    const { turnId, outcome } = await h.run('first');
    expect(outcome).toMatchObject({ status: 'failed', code: 'persistence_error' });
    expect(h.model.requests).toHaveLength(1);
    expect(ran).toEqual([1]);
    const results = (await storage.listMessages(h.session.sessionId)).filter((m) => m.role === 'tool');
    expect(results.map((m) => [m.providerCallId, (m.content[0] as { status: string }).status])).toEqual([['spy_2', 'cancelled']]);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'persistence_error' });
    await recovers(h, storage, faulty);
    // The call whose result was lost gets the synthesized result; it is never run again.
    expect(h.model.requests[1]!.messages.filter((m) => m.role === 'tool')).toEqual([
      { role: 'tool', callId: 'spy_1', toolName: 'spy', status: 'interrupted', text: INTERRUPTED_RESULT_TEXT, synthetic: true },
      { role: 'tool', callId: 'spy_2', toolName: 'spy', status: 'interrupted', text: 'tool was not executed because the turn already terminated' },
    ]);
    expect(ran).toEqual([1]);
  });

  it('the k-th tool result write of a batch fails: the results before it stay committed, nothing after it runs', async () => {
    const ran: number[] = [];
    const faulty = faultyStorage(storage);
    // Three calls; the first result write succeeds, the second (k = 2) fails.
    faulty.failOn('commitToolResult', 1, { after: 1 });
    const h = await harness(faulty, [{ toolCalls: [spy(1), spy(2), spy(3)] }, { text: 'back' }], { tools: [spyTool(ran)] });
    const { turnId, outcome } = await h.run('three');
    expect(outcome).toMatchObject({ status: 'failed', code: 'persistence_error' });
    expect(ran).toEqual([1, 2]);
    expect(h.model.requests).toHaveLength(1);
    // spy_1's result was committed in its own transaction before the failure and is still there;
    // spy_2's result is lost; spy_3 never ran and is cancelled as the rest of the batch.
    const results = (await storage.listMessages(h.session.sessionId)).filter((m) => m.role === 'tool');
    expect(results.map((m) => [m.providerCallId, (m.content[0] as { status: string; text: string }).status, (m.content[0] as { text: string }).text])).toEqual([
      ['spy_1', 'succeeded', 'ran 1'],
      ['spy_3', 'cancelled', 'tool was not executed because the turn already terminated'],
    ]);
    const finished = h.updates.filter((u) => u.update.type === 'tool_call_finished').map((u) => (u.update as { providerCallId: string }).providerCallId);
    expect(finished).toContain('spy_1');
    expect(finished).not.toContain('spy_2');
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'persistence_error', toolCallCount: 3 });
    await assertStoredInvariants(storage, h.session.sessionId);
    await recovers(h, storage, faulty);
    // The next request: spy_1's real result, spy_2's synthesized one, spy_3's cancellation.
    expect(h.model.requests[1]!.messages.filter((m) => m.role === 'tool').map((m) => [(m as { callId: string }).callId, (m as { status: string }).status])).toEqual([
      ['spy_1', 'success'],
      ['spy_2', 'interrupted'],
      ['spy_3', 'interrupted'],
    ]);
    expect(ran).toEqual([1, 2]);
  });

  it('plan_updated is emitted only after the plan commit: nothing while the commit is held open', async () => {
    const faulty = faultyStorage(storage);
    const held = faulty.hold('commitPlanUpdate');
    let committed = false;
    void held.settled.then(() => (committed = true));
    const plan = { explanation: 'two steps', plan: [{ step: 'read', status: 'in_progress' }, { step: 'write', status: 'pending' }] };
    const h = await harness(faulty, [{ toolCalls: [{ name: 'update_plan', arguments: plan, callId: 'p1' }] }, { text: 'planned' }]);
    const committedAtUpdate: boolean[] = [];
    h.session.updates$.subscribe((e) => {
      if (e.update.type === 'plan_updated') committedAtUpdate.push(committed);
    });
    const turnId = await h.start('plan it');
    await held.reached;
    // The commit is open: the tool call has started, but no plan update, no result, no plan anywhere.
    await new Promise((r) => setTimeout(r, 150));
    expect(updateTypes(h.updates)).toContain('tool_call_started');
    expect(updateTypes(h.updates)).not.toContain('plan_updated');
    expect(updateTypes(h.updates)).not.toContain('tool_call_finished');
    expect(h.session.snapshot().runtime).toMatchObject({ type: 'running', phase: 'running_tools', plan: null });
    expect(await storage.loadSessionTurnPlans(h.session.sessionId)).toEqual([]);
    expect(h.model.requests).toHaveLength(1);

    held.release();
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'planned' });
    expect(committedAtUpdate).toEqual([true]);
    const types = updateTypes(h.updates);
    expect(types.indexOf('plan_updated')).toBeLessThan(types.indexOf('tool_call_finished'));
    expect(h.updates.find((u) => u.update.type === 'plan_updated')!.update).toMatchObject({ type: 'plan_updated', explanation: 'two steps', plan: plan.plan });
    expect((await storage.loadSessionTurnPlans(h.session.sessionId)).map((p) => p.steps)).toEqual([plan.plan]);
    expect(h.session.snapshot().runtime).toMatchObject({ type: 'terminal', plan: { explanation: 'two steps', steps: plan.plan } });
  });

  it('plan write fails: the turn fails, no plan_updated, no plan row', async () => {
    const faulty = faultyStorage(storage);
    faulty.failOn('commitPlanUpdate', 1);
    const plan = { plan: [{ step: 'a', status: 'in_progress' }] };
    const h = await harness(faulty, [{ toolCalls: [{ name: 'update_plan', arguments: plan, callId: 'p1' }] }, { text: 'back' }]);
    const { turnId, outcome } = await h.run('plan it');
    expect(outcome).toMatchObject({ status: 'failed', code: 'persistence_error' });
    expect(updateTypes(h.updates)).not.toContain('plan_updated');
    expect(await storage.loadSessionTurnPlans(h.session.sessionId)).toEqual([]);
    expect((await storage.getTurn(turnId))!.planUnfinishedStepCount).toBeNull();
    expect(h.model.requests).toHaveLength(1);
    await recovers(h, storage, faulty);
  });

  it('mailbox message write fails: the turn fails before the model call, and the message waits for the next turn', async () => {
    const faulty = faultyStorage(storage);
    const h = await harness(faulty, [{ text: 'back' }]);
    const message = { id: agentMessageId('child', `t-${backend.name}`, 'final_answer'), taskName: 'find_auth', kind: 'final_answer' as const, body: 'found it' };
    await h.session.deliverAgentMessage(message);
    faulty.failOn('appendTurnMessages', 1);
    const { outcome } = await h.run('first');
    expect(outcome).toMatchObject({ status: 'failed', code: 'persistence_error' });
    expect(h.model.requests).toHaveLength(0);
    expect((await storage.listMessages(h.session.sessionId)).map((m) => m.kind)).toEqual(['normal']);
    await recovers(h, storage, faulty);
    const texts = h.model.requests[0]!.messages.map((m) => (m.role === 'user' ? m.content.map((b) => b.text).join('') : m.role));
    expect(texts.some((t) => t.includes('found it'))).toBe(true);
  });

  // A plain final answer ends its turn in its own statement (test/storage/answer-end.test.ts): the
  // end written on its own, which these two fail, is that of a judged answer (structured output).
  const Judged = z.object({ answer: z.string() });

  it('end of turn write fails: the outcome is announced, the session reports it, and the next turn writes it first', async () => {
    const faulty = faultyStorage(storage);
    faulty.failOn('finishTurn', 1);
    const h = await harness(faulty, [{ text: '{"answer":"first"}' }, { text: 'back' }]);
    const { turnId, outcome } = await h.session.run('first', { outputSchema: Judged });
    expect(outcome).toEqual({ status: 'completed', finalText: '{"answer":"first"}' });
    expect(h.session.status()).toMatchObject({ type: 'system_error' });
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'running' });
    await recovers(h, storage, faulty);
    // The end the first turn decided is the one written, not a correction.
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'completed', errorCode: null });
  });

  it('end of turn write fails twice: the next turn fails too, the one after writes both ends', async () => {
    const faulty = faultyStorage(storage);
    faulty.failOn('finishTurn', 2);
    const h = await harness(faulty, [{ text: '{"answer":"first"}' }, { text: 'back' }]);
    const first = await h.session.run('first', { outputSchema: Judged });
    expect(first.outcome).toMatchObject({ status: 'completed' });
    const second = await h.run('second');
    expect(second.outcome).toMatchObject({ status: 'failed', code: 'persistence_error' });
    expect(h.model.requests).toHaveLength(1);
    expect(await storage.getTurn(second.turnId)).toBeNull();
    await recovers(h, storage, faulty);
    expect(await storage.getTurn(first.turnId)).toMatchObject({ status: 'completed' });
  });

  it('trace queue full and trace database failing: the loop continues, dropped_signals counts', async () => {
    const steps = [{ toolCalls: [{ name: 'fail', arguments: { message: 'x' } }] }, { text: 'same' }];
    const faulty = faultyStorage(storage);
    faulty.failOn('writeTraceSignals');
    const h = await harness(faulty, steps, { trace: { capacity: 2 }, tools: [failTool] });
    const { outcome } = await h.run('trace');
    expect(outcome).toEqual({ status: 'completed', finalText: 'same' });
    const stats = await h.core.flushTrace();
    expect(stats.droppedSignals).toBeGreaterThan(0);
    expect(stats.writeFailures).toBeGreaterThan(0);
    faulty.clear();
  });

  it('a live update receiver disconnects: the loop continues, the snapshot stays readable', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'x' } }] }, { text: 'done' }]);
    const errors: unknown[] = [];
    const previous = rxjsConfig.onUnhandledError;
    rxjsConfig.onUnhandledError = (e) => errors.push(e);
    const seen: number[] = [];
    const sub = h.session.updates$.subscribe((e) => {
      seen.push(e.sequence);
      sub.unsubscribe();
    });
    h.session.updates$.subscribe(() => {
      throw new Error('receiver gone');
    });
    const { outcome } = await h.run('go');
    expect(outcome).toEqual({ status: 'completed', finalText: 'done' });
    expect(seen).toEqual([1]);
    expect(h.session.snapshot().runtime).toMatchObject({ type: 'terminal', outcome: { status: 'completed' } });
    expect(h.session.replayUpdates(0).length).toBe(h.updates.length);
    await new Promise((r) => setTimeout(r, 20)); // RxJS reports subscriber errors on a later macrotask.
    rxjsConfig.onUnhandledError = previous;
    expect(errors.length).toBe(h.updates.length);
  });

  it('the model stream breaks: the draft is discarded, the turn fails', async () => {
    const h = await harness(storage, [{ error: new ModelError('model_error', 'connection reset'), afterEvents: [{ type: 'text_delta', delta: 'partial' }] }, { text: 'back' }]);
    const { turnId, outcome } = await h.run('first');
    expect(outcome).toMatchObject({ status: 'failed', code: 'model_error' });
    expect(h.updates.find((u) => u.update.type === 'draft_cleared')?.update).toEqual({ type: 'draft_cleared', reason: 'discarded' });
    expect((await storage.listMessages(h.session.sessionId)).map((m) => m.role)).toEqual(['user']);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'model_error' });
    const faulty = faultyStorage(storage);
    await recovers(h, storage, faulty);
  });

  it('a tool returns an error: the error result is written and the model decides', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'fail', arguments: { message: 'disk full' }, callId: 'f1' }] }, { text: 'handled' }], { tools: [failTool] });
    const { outcome } = await h.run('try');
    expect(outcome).toEqual({ status: 'completed', finalText: 'handled' });
    const result = (await storage.listMessages(h.session.sessionId)).find((m) => m.role === 'tool')!;
    expect(result.content[0]).toMatchObject({ status: 'failed', text: 'disk full' });
    expect(h.model.requests[1]!.messages.at(-1)).toEqual({ role: 'tool', callId: 'f1', toolName: 'fail', status: 'error', text: 'disk full' });
  });

  it('the process dies after a tool side effect: the next start marks the turn interrupted and never retries', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'openwork-journal-'));
    const journal = join(dir, 'journal');
    const faulty = faultyStorage(storage);
    const tool = defineTool({
      name: 'journal',
      description: 'Appends to the journal.',
      parameters: z.object({ entry: z.string() }),
      execute: ({ entry }, ctx) => {
        appendFileSync(journal, `${ctx.providerCallId}\t${entry}\n`);
        faulty.freeze(); // The process dies right after the side effect.
        return 'written';
      },
    });
    // With ownership (Postgres), the restarted process is the same host: same owner id, leases freed at start.
    const ownership = { ownerId: `dies-${backend.name}` };
    const first = await createCore({ plan: true, conversationHistory: true, agents: true, storage: faulty, model: scriptedModel([{ toolCalls: [{ name: 'journal', arguments: { entry: 'once' }, callId: 'j1' }] }]), tools: [tool], closeStorageOnShutdown: false, ownership });
    const session = await first.createSession({ workingDirectory: process.cwd() });
    const { turnId } = await session.startTurn({ clientRequestId: 'crash', input: [{ type: 'text', text: 'write' }] });
    for (let i = 0; i < 200 && !readFileSync(journal, { encoding: 'utf8', flag: 'a+' }).includes('once'); i += 1) await new Promise((r) => setTimeout(r, 5));

    const model = scriptedModel([{ text: 'back' }]);
    const second = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, tools: [tool], closeStorageOnShutdown: false, ownership });
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'interrupted', errorCode: 'process_restart' });
    const again = await second.loadSession(session.sessionId);
    const next = await again.startTurn({ clientRequestId: 'after', input: [{ type: 'text', text: 'go on' }] });
    expect(await again.waitForTurn(next.turnId)).toEqual({ status: 'completed', finalText: 'back' });
    expect(model.requests[0]!.messages.find((m) => m.role === 'tool')).toMatchObject({ callId: 'j1', status: 'interrupted', synthetic: true });
    expect(readFileSync(journal, 'utf8').split('\n').filter(Boolean)).toEqual(['j1\tonce']);
    await second.shutdown();
    rmSync(dir, { recursive: true, force: true });
  });

  it('World State message write fails: no model call, persistence_error; the next turn sends the sections', async () => {
    const faulty = faultyStorage(storage);
    faulty.failOn('appendTurnMessages', 1);
    const workingDirectory = mkdtempSync(join(tmpdir(), 'openwork-ws-'));
    const h = await harness(faulty, [{ text: 'back' }], { worldState: {}, workingDirectory });
    const { turnId, outcome } = await h.run('first');
    expect(outcome).toMatchObject({ status: 'failed', code: 'persistence_error' });
    expect(h.model.requests).toHaveLength(0);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'persistence_error', modelCallCount: 0 });
    expect((await storage.listMessages(h.session.sessionId)).map((m) => m.kind)).toEqual(['normal']);
    await recovers(h, storage, faulty);
    // Nothing of the failed sample counts as sent: the next turn samples and writes the sections.
    const kinds = h.model.requests[0]!.messages.map((m) => (m.role === 'user' ? m.kind : m.role));
    expect(kinds.filter((k) => k === 'world_state').length).toBeGreaterThan(0);
    rmSync(workingDirectory, { recursive: true, force: true });
  });

  it('checkpoint write fails during an overflow compaction: compaction_error, no checkpoint, the conversation unchanged', async () => {
    const faulty = faultyStorage(storage);
    faulty.failOn('insertCheckpoint', 1);
    const model = compactingModel([{ error: new ModelError('context_overflow', 'prompt is too long') }, { text: 'back' }]);
    const h = await harness(faulty, model, { compaction: { retryDelayMs: 0 } });
    const { turnId, outcome } = await h.run('first');
    expect(outcome).toMatchObject({ status: 'failed', code: 'compaction_error' });
    expect(model.summaryRequests).toHaveLength(1);
    expect(model.turnRequests).toHaveLength(1);
    expect(await storage.listCheckpoints(h.session.sessionId)).toEqual([]);
    expect(updateTypes(h.updates)).not.toContain('conversation_compacted');
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'compaction_error' });
    await recovers(h, storage, faulty);
    // The old conversation is kept as it was: no summary replaced the first request.
    const texts = model.turnRequests.at(-1)!.messages.map((m) => (m.role === 'user' ? m.content.map((b) => b.text).join('') : m.role));
    expect(texts).toEqual(['first', 'again']);
  });

  it('checkpoint write fails during a manual compaction: compaction_error, no checkpoint, the session goes on as before', async () => {
    const faulty = faultyStorage(storage);
    const model = compactingModel([{ text: 'one' }, { text: 'back' }]);
    const h = await harness(faulty, model, { compaction: { retryDelayMs: 0 } });
    await h.run('first');
    faulty.failOn('insertCheckpoint', 1);
    await expect(h.session.compactConversation()).rejects.toMatchObject({ code: 'compaction_error' });
    expect(h.session.status()).toEqual({ type: 'idle' });
    expect(await storage.listCheckpoints(h.session.sessionId)).toEqual([]);
    expect(updateTypes(h.updates)).not.toContain('conversation_compacted');
    await recovers(h, storage, faulty);
    const texts = model.turnRequests.at(-1)!.messages.map((m) => (m.role === 'user' ? m.content.map((b) => b.text).join('') : m.role));
    expect(texts).toEqual(['first', 'assistant', 'again']);
  });

  it('prune watermark write fails: no pruning this time, the compaction summarises the unpruned conversation and the turn goes on', async () => {
    const home = mkdtempSync(join(tmpdir(), 'openwork-home-'));
    const big = defineTool({ name: 'big', description: 'Returns a long text.', parameters: z.object({}), execute: () => `BEGIN${'x'.repeat(10_000)}END` });
    const run = async (failWatermark: boolean) => {
      const faulty = faultyStorage(storage);
      const model = compactingModel([
        { toolCalls: [{ name: 'big', arguments: {}, callId: 'long1' }] },
        { text: 'first done' },
        { error: new ModelError('context_overflow', 'prompt is too long') },
        { text: 'resubmitted' },
        { text: 'back' },
      ]);
      const h = await harness(faulty, model, { compaction: { retryDelayMs: 0 }, tools: [big], openworkHome: home });
      await h.run('first');
      if (failWatermark) faulty.failOn('advancePruneWatermark', 1);
      const { outcome } = await h.run('second');
      expect(outcome).toEqual({ status: 'completed', finalText: 'resubmitted' });
      expect(model.summaryRequests).toHaveLength(1);
      expect(await storage.listCheckpoints(h.session.sessionId)).toHaveLength(1);
      const summaryInput = JSON.stringify(model.summaryRequests[0]!.messages);
      const watermark = (await storage.getSession(h.session.sessionId))!.toolResultPrunedThroughSequence;
      await recovers(h, storage, faulty);
      return { summaryInput, watermark };
    };
    const failed = await run(true);
    expect(failed.watermark).toBeNull();
    expect(failed.summaryInput).toContain('x'.repeat(10_000));
    expect(failed.summaryInput).not.toContain('[tool result pruned:');
    // The same turn with a working database prunes first (the difference is only the pruning).
    const healthy = await run(false);
    expect(healthy.watermark).not.toBeNull();
    expect(healthy.summaryInput).toContain('[tool result pruned:');
    rmSync(home, { recursive: true, force: true });
  });

  it('explorer row write fails: spawn_agent answers agent_start_failed and the parent turn goes on', async () => {
    const faulty = faultyStorage(storage);
    const h = await harness(faulty, [{ toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'probe', message: 'look' }, callId: 's1' }] }, { text: 'went on' }, { text: 'back' }]);
    faulty.failOn('createSession', 1);
    const { outcome } = await h.run('delegate');
    expect(outcome).toEqual({ status: 'completed', finalText: 'went on' });
    expect(h.model.requests[1]!.messages.at(-1)).toMatchObject({ role: 'tool', callId: 's1', status: 'error', text: expect.stringMatching(/^agent_start_failed: /) });
    expect(await storage.listChildSessions(h.session.sessionId)).toEqual([]);
    await recovers(h, storage, faulty);
  });

  it('a checkpoint committed but not installed (manual): reload_required refuses turns until the session is reloaded', async () => {
    let failInstall = true;
    const model = compactingModel([{ text: 'one' }, { text: 'after reload' }]);
    const h = await harness(storage, model, {
      compaction: {
        retryDelayMs: 0,
        beforeInstall: () => {
          if (failInstall) throw new Error('injected install failure');
        },
      },
    });
    await h.run('first');
    await expect(h.session.compactConversation()).rejects.toMatchObject({ code: 'reload_required' });
    failInstall = false;
    // The committed checkpoint is not deleted (reference §3.9).
    expect(await storage.listCheckpoints(h.session.sessionId)).toHaveLength(1);
    await expect(h.session.startTurn({ clientRequestId: 'refused', input: [{ type: 'text', text: 'x' }] })).rejects.toMatchObject({ code: 'reload_required' });
    await expect(h.session.compactConversation()).rejects.toMatchObject({ code: 'reload_required' });
    // Loading the session again rebuilds it from the database; the next request is the checkpoint's projection.
    const reloaded = await h.core.loadSession(h.session.sessionId);
    expect(reloaded).not.toBe(h.session);
    const { turnId } = await reloaded.startTurn({ clientRequestId: 'reloaded', input: [{ type: 'text', text: 'x' }] });
    expect(await reloaded.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'after reload' });
    expect(JSON.stringify(model.turnRequests.at(-1)!.messages)).toContain(SUMMARY_PREFIX.slice(0, 20));
  });

  it('a checkpoint committed but not installed (in a turn): compaction_error, then reload_required until the session is reloaded', async () => {
    let failInstall = true;
    const model = compactingModel([{ error: new ModelError('context_overflow', 'prompt is too long') }, { text: 'after reload' }]);
    const h = await harness(storage, model, {
      compaction: {
        retryDelayMs: 0,
        beforeInstall: () => {
          if (failInstall) throw new Error('injected install failure');
        },
      },
    });
    const { turnId, outcome } = await h.run('first');
    failInstall = false;
    expect(outcome).toMatchObject({ status: 'failed', code: 'compaction_error' });
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'compaction_error' });
    expect(await storage.listCheckpoints(h.session.sessionId)).toHaveLength(1);
    expect(h.session.snapshot().reloadRequired).toBe(true);
    await expect(h.session.startTurn({ clientRequestId: 'refused', input: [{ type: 'text', text: 'x' }] })).rejects.toMatchObject({ code: 'reload_required' });
    const reloaded = await h.core.loadSession(h.session.sessionId);
    const next = await reloaded.startTurn({ clientRequestId: 'reloaded', input: [{ type: 'text', text: 'x' }] });
    expect(await reloaded.waitForTurn(next.turnId)).toEqual({ status: 'completed', finalText: 'after reload' });
    expect(JSON.stringify(model.turnRequests.at(-1)!.messages)).toContain(SUMMARY_PREFIX.slice(0, 20));
  });
});

describe('a Postgres server stopped and restarted mid-turn', () => {
  let server: PostgresServer;
  let storage: SqlSessionStorage;

  beforeAll(async () => {
    server = await startPostgres();
    storage = postgresStorage({ connectionString: server.url, max: 4 });
    await storage.migrate();
  });

  afterAll(async () => {
    await storage.close().catch(() => undefined);
    server.stop();
  });

  async function midTurn(where: 'model' | 'tool'): Promise<void> {
    const ran: number[] = [];
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let reached!: () => void;
    const atPoint = new Promise<void>((r) => (reached = r));
    const tool = defineTool({
      name: 'spy',
      description: 'Records its run; waits while the server is down.',
      parameters: z.object({ n: z.number() }),
      execute: async ({ n }) => {
        ran.push(n);
        if (where === 'tool') {
          reached();
          await held;
        }
        return `ran ${n}`;
      },
    });
    const steps =
      where === 'model'
        ? [{ gate: held.then(() => undefined), step: { toolCalls: [spy(1)] } }, { text: 'back' }]
        : [{ toolCalls: [spy(1), spy(2)] }, { text: 'back' }];
    const model = scriptedModel(steps);
    const h = await harness(storage, model, { tools: [tool] });
    const turnId = await h.start('first');
    if (where === 'model') {
      // The model is called (after its counter write committed) and waits for the gate.
      for (let i = 0; i < 400 && h.model.requests.length === 0; i += 1) await new Promise((r) => setTimeout(r, 5));
      expect(h.model.requests).toHaveLength(1);
    } else {
      await atPoint;
    }
    server.halt();
    release();
    const outcome = await h.session.waitForTurn(turnId);
    expect(outcome).toMatchObject({ status: 'failed', code: 'persistence_error' });
    expect(ran).toEqual(where === 'model' ? [] : [1]);
    expect(h.model.requests).toHaveLength(1);
    // The end could not be written either: the session says so.
    expect(h.session.status()).toMatchObject({ type: 'system_error' });

    server.restart();
    const next = await h.run('again');
    expect(next.outcome).toEqual({ status: 'completed', finalText: 'back' });
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'persistence_error' });
    const stored = await assertStoredInvariants(storage, h.session.sessionId);
    assertNoRunningAfterTerminal(stored.turns, h.session.status());
    expect(h.session.status()).toEqual({ type: 'idle' });
    expect(ran).toEqual(where === 'model' ? [] : [1]);
  }

  it('during the model call: the response is not stored, no tool runs, the next turn works once the server is back', async () => {
    await midTurn('model');
  });

  it('during a tool run: its result is lost, nothing more runs, the next turn works once the server is back', async () => {
    await midTurn('tool');
  });

  it('during a compaction: the checkpoint is not written, compaction_error, the next turn works once the server is back', async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const model = compactingModel([{ error: new ModelError('context_overflow', 'prompt is too long') }, { text: 'back' }], {
      summary: () => ({ gate: held, step: { text: validSummary('the stopped server') } }),
    });
    const h = await harness(storage, model, { compaction: { retryDelayMs: 0 } });
    const turnId = await h.start('first');
    for (let i = 0; i < 400 && model.summaryRequests.length === 0; i += 1) await new Promise((r) => setTimeout(r, 5));
    expect(model.summaryRequests).toHaveLength(1);
    server.halt();
    release();
    expect(await h.session.waitForTurn(turnId)).toMatchObject({ status: 'failed', code: 'compaction_error' });
    expect(h.session.status()).toMatchObject({ type: 'system_error' });
    expect(updateTypes(h.updates)).not.toContain('conversation_compacted');

    server.restart();
    const next = await h.run('again');
    expect(next.outcome).toEqual({ status: 'completed', finalText: 'back' });
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'compaction_error' });
    expect(await storage.listCheckpoints(h.session.sessionId)).toEqual([]);
    const texts = model.turnRequests.at(-1)!.messages.map((m) => (m.role === 'user' ? m.content.map((b) => b.text).join('') : m.role));
    expect(texts).toEqual(['first', 'again']);
    const stored = await assertStoredInvariants(storage, h.session.sessionId);
    assertNoRunningAfterTerminal(stored.turns, h.session.status());
    expect(h.session.status()).toEqual({ type: 'idle' });
  });
});
