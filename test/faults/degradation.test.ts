/**
 * Fault injection (issue 6, item 5): a failure at each storage write — turn start, assistant
 * message, tool result, plan, mailbox message, end of turn — and a Postgres server stopped and
 * restarted mid-turn. Every row of seed 000 §11's degradation table is checked exactly, and after
 * each fault the session accepts a new turn once the database works again.
 */
import { appendFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
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
import { backends } from '../support/databases.js';
import { faultyStorage, type FaultyStorage } from '../support/faults.js';
import { harness, updateTypes, type Harness } from '../support/harness.js';
import { assertNoRunningAfterTerminal, assertSequences, assertStoredInvariants } from '../support/invariants.js';
import { startPostgres, type PostgresServer } from '../support/postgres-server.js';

/** A tool with a visible side effect: every run is recorded. */
function spyTool(ran: number[]) {
  return defineTool({
    name: 'spy',
    description: 'Records its run.',
    parameters: z.object({ n: z.number() }),
    execute: ({ n }) => {
      ran.push(n);
      return `ran ${n}`;
    },
  });
}

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

  beforeAll(async () => {
    storage = await backend.create();
    await storage.migrate();
  });

  afterAll(async () => {
    await storage.close();
  });

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

  it('end of turn write fails: the outcome is announced, the session reports it, and the next turn writes it first', async () => {
    const faulty = faultyStorage(storage);
    faulty.failOn('finishTurn', 1);
    const h = await harness(faulty, [{ text: 'first answer' }, { text: 'back' }]);
    const { turnId, outcome } = await h.run('first');
    expect(outcome).toEqual({ status: 'completed', finalText: 'first answer' });
    expect(h.session.status()).toMatchObject({ type: 'system_error' });
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'running' });
    await recovers(h, storage, faulty);
    // The end the first turn decided is the one written, not a correction.
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'completed', errorCode: null });
  });

  it('end of turn write fails twice: the next turn fails too, the one after writes both ends', async () => {
    const faulty = faultyStorage(storage);
    faulty.failOn('finishTurn', 2);
    const h = await harness(faulty, [{ text: 'first answer' }, { text: 'back' }]);
    const first = await h.run('first');
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
    const first = await createCore({ storage: faulty, model: scriptedModel([{ toolCalls: [{ name: 'journal', arguments: { entry: 'once' }, callId: 'j1' }] }]), tools: [tool], closeStorageOnShutdown: false });
    const session = await first.createSession({ workingDirectory: process.cwd() });
    const { turnId } = await session.startTurn({ clientRequestId: 'crash', input: [{ type: 'text', text: 'write' }] });
    for (let i = 0; i < 200 && !readFileSync(journal, { encoding: 'utf8', flag: 'a+' }).includes('once'); i += 1) await new Promise((r) => setTimeout(r, 5));

    const model = scriptedModel([{ text: 'back' }]);
    const second = await createCore({ storage, model, tools: [tool], closeStorageOnShutdown: false });
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'interrupted', errorCode: 'process_restart' });
    const again = await second.loadSession(session.sessionId);
    const next = await again.startTurn({ clientRequestId: 'after', input: [{ type: 'text', text: 'go on' }] });
    expect(await again.waitForTurn(next.turnId)).toEqual({ status: 'completed', finalText: 'back' });
    expect(model.requests[0]!.messages.find((m) => m.role === 'tool')).toMatchObject({ callId: 'j1', status: 'interrupted', synthetic: true });
    expect(readFileSync(journal, 'utf8').split('\n').filter(Boolean)).toEqual(['j1\tonce']);
    await second.shutdown();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a checkpoint committed but not installed: reload_required refuses turns until the session is reloaded', async () => {
    const h = await harness(storage, [{ text: 'after reload' }]);
    await h.session.beginMaintenance('compact');
    h.session.endMaintenance(true);
    await expect(h.session.startTurn({ clientRequestId: 'refused', input: [{ type: 'text', text: 'x' }] })).rejects.toMatchObject({ code: 'reload_required' });
    await h.session.shutdown();
    const model = scriptedModel([{ text: 'after reload' }]);
    const core = await createCore({ storage, model, closeStorageOnShutdown: false });
    const reloaded = await core.loadSession(h.session.sessionId);
    const { turnId } = await reloaded.startTurn({ clientRequestId: 'reloaded', input: [{ type: 'text', text: 'x' }] });
    expect(await reloaded.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'after reload' });
    await core.shutdown();
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
});
