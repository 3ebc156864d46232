/**
 * The error codes of the agent control tools (reference §5.5) that the happy paths never reach,
 * each produced through the real runtime on PGlite: `agent_turn_start_failed`,
 * `agent_interrupt_failed`, `agent_inspection_failed` and `agent_host_unavailable`; and the exact
 * success text of `interrupt_agent`.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore, type Core, type CoreOptions } from '../../../src/core.js';
import { INTERRUPTED_BODY, renderAgentEnvelope } from '../../../src/services/agents/mailbox.js';
import type { ScriptedModel } from '../../../src/services/model/scripted.js';
import { defineTool } from '../../../src/services/tools/define.js';
import type { SessionStorage } from '../../../src/storage/storage.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { faultyStorage, type StorageMethod } from '../../support/faults.js';
import { agentMessages, firstUpdate, isChild, router, splitTimers, taskOf, toolResults } from './support.js';
import { usePglite } from '../../support/databases.js';

const read = defineTool({ name: 'read', description: 'Reads a file.', parameters: z.object({ path: z.string() }), execute: ({ path }) => `contents of ${path}` });

describe('agent control error codes (reference §5.5)', () => {
  let storage!: SqlSessionStorage;
  const cores = usePglite((s) => (storage = s));

  async function runtime(model: ScriptedModel, extra: Partial<CoreOptions> = {}) {
    const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, tools: [read], closeStorageOnShutdown: false, worldState: false, timers: splitTimers, ...extra });
    cores.push(core);
    return core;
  }

  async function run(session: Awaited<ReturnType<Core['createSession']>>, text: string) {
    const { turnId } = await session.startTurn({ clientRequestId: `r-${Math.random()}`, input: [{ type: 'text', text }] });
    return { turnId, outcome: await session.waitForTurn(turnId) };
  }

  /** A tool that makes the next `times` calls of a storage method fail, armed just before the call under test. */
  function armTool(faulty: ReturnType<typeof faultyStorage>) {
    return defineTool({
      name: 'arm',
      description: 'Arms a storage fault.',
      parameters: z.object({ method: z.string() }),
      execute: ({ method }) => {
        faulty.failOn(method as StorageMethod, 1);
        return `armed ${method}`;
      },
    });
  }

  it('followup_task on a running explorer is agent_turn_start_failed; interrupt_agent answers "Interrupt requested", then agent_interrupt_failed once no turn runs', async () => {
    const model = router(
      (request, i) => {
        if (i === 0) return { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'slow', message: 'hang around' } }] };
        if (i === 1) return { toolCalls: [{ name: 'followup_task', arguments: { task_name: 'slow', message: 'more work' } }] };
        if (i === 2) return { toolCalls: [{ name: 'interrupt_agent', arguments: { task_name: 'slow' } }] };
        // The interruption may already be drained into this request; otherwise wait for it.
        if (agentMessages(request).length === 0) return { toolCalls: [{ name: 'wait_agent', arguments: { timeout_ms: 600_000 } }] };
        const last = toolResults(request).at(-1)!.toolName;
        if (last === 'interrupt_agent' || last === 'wait_agent') {
          return toolResults(request).filter((r) => r.toolName === 'interrupt_agent').length === 1
            ? { toolCalls: [{ name: 'interrupt_agent', arguments: { task_name: 'slow' } }] }
            : { toolCalls: [{ name: 'list_agents', arguments: {} }] };
        }
        return { text: 'root carried on' };
      },
      () => ({ hang: true }),
    );
    const core = await runtime(model);
    const root = await core.createSession({ workingDirectory: process.cwd() });
    const { outcome } = await run(root, 'exercise the control errors');
    // Domain errors are failed results; the parent turn goes on to its answer.
    expect(outcome).toEqual({ status: 'completed', finalText: 'root carried on' });
    const results = toolResults(model.requests.filter((r) => !isChild(r)).at(-1)!);
    const waited = results.filter((r) => r.toolName === 'wait_agent');
    expect(waited.map((r) => r.text)).toEqual(waited.length === 0 ? [] : ['{"delivered":true,"timed_out":false}']);
    const control = results.filter((r) => r.toolName !== 'wait_agent');
    expect(control.map((r) => r.toolName)).toEqual(['spawn_agent', 'followup_task', 'interrupt_agent', 'interrupt_agent', 'list_agents']);
    expect(control[1]).toEqual({ toolName: 'followup_task', status: 'error', text: 'agent_turn_start_failed: explorer slow is still running' });
    expect(control[2]).toEqual({ toolName: 'interrupt_agent', status: 'success', text: 'Interrupt requested' });
    expect(control[3]).toEqual({ toolName: 'interrupt_agent', status: 'error', text: 'agent_interrupt_failed: explorer slow has no running turn' });
    const [listed] = JSON.parse(control[4]!.text) as Array<{ task_name: string; status: string }>;
    expect(listed).toMatchObject({ task_name: 'slow', status: 'cancelled' });
    // The interruption came back as its envelope, and the explorer was asked only its first task.
    expect(agentMessages(model.requests.filter((r) => !isChild(r)).at(-1)!)).toEqual([renderAgentEnvelope({ taskName: 'slow', kind: 'interrupted', body: INTERRUPTED_BODY })]);
    expect(model.requests.filter(isChild).map(taskOf)).toEqual(['hang around']);
  });

  it('after a restart: a child that cannot be loaded is agent_turn_start_failed and gives its slot back; an unloaded child has no turn to interrupt', async () => {
    const first = await runtime(
      router(
        (_r, i) => [{ toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'kid', message: 'first question' } }] }, { toolCalls: [{ name: 'wait_agent', arguments: { timeout_ms: 600_000 } }] }, { text: 'first done' }][i]!,
        () => ({ text: 'first answer' }),
      ),
    );
    const original = await first.createSession({ workingDirectory: process.cwd() });
    expect((await run(original, 'ask the kid')).outcome.status).toBe('completed');
    await first.shutdown();

    const faulty = faultyStorage(storage);
    const model = router(
      (_r, i) =>
        [
          { toolCalls: [{ name: 'interrupt_agent', arguments: { task_name: 'kid' } }, { name: 'arm', arguments: { method: 'loadSession' } }, { name: 'followup_task', arguments: { task_name: 'kid', message: 'second question' } }] },
          // With one slot, a slot leaked by the failed start would answer agent_limit_reached here.
          { toolCalls: [{ name: 'followup_task', arguments: { task_name: 'kid', message: 'second question' } }] },
          { toolCalls: [{ name: 'wait_agent', arguments: { timeout_ms: 600_000 } }] },
          { text: 'second done' },
        ][i]!,
      () => ({ text: 'second answer' }),
    );
    const second = await runtime(model, { storage: faulty, tools: [read, armTool(faulty)], agents: { maxActiveTurns: 1 } });
    const root = await second.loadSession(original.sessionId);
    const { outcome } = await run(root, 'ask again');
    expect(outcome).toEqual({ status: 'completed', finalText: 'second done' });
    // The last request also carries the first turn's results; this turn's are the last five.
    const results = toolResults(model.requests.filter((r) => !isChild(r)).at(-1)!).slice(-5);
    expect(results.map((r) => [r.toolName, r.text])).toEqual([
      ['interrupt_agent', 'agent_interrupt_failed: explorer kid has no running turn'],
      ['arm', 'armed loadSession'],
      ['followup_task', expect.stringMatching(/^agent_turn_start_failed: .*injected failure in loadSession/)],
      ['followup_task', 'Follow-up task started'],
      ['wait_agent', '{"delivered":true,"timed_out":false}'],
    ]);
    // The follow-up ran on the explorer's own earlier context.
    const childRequest = model.requests.find(isChild)!;
    expect(childRequest.messages.filter((m) => m.role === 'user').map((m) => (m.content[0] as { text: string }).text)).toEqual(['first question', 'second question']);
  });

  it('list_agents answers agent_inspection_failed when a child status cannot be read, and works again after', async () => {
    const faulty = faultyStorage(storage);
    const model = router(
      (_r, i) =>
        [
          { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'seen', message: 'look' } }] },
          { toolCalls: [{ name: 'wait_agent', arguments: { timeout_ms: 600_000 } }] },
          { toolCalls: [{ name: 'arm', arguments: { method: 'listTurns' } }, { name: 'list_agents', arguments: {} }, { name: 'list_agents', arguments: {} }] },
          { text: 'listed' },
        ][i]!,
      () => ({ text: 'looked' }),
    );
    const core = await runtime(model, { storage: faulty, tools: [read, armTool(faulty)] });
    const root = await core.createSession({ workingDirectory: process.cwd() });
    expect((await run(root, 'list them')).outcome.status).toBe('completed');
    const results = toolResults(model.requests.filter((r) => !isChild(r)).at(-1)!).slice(-3);
    expect(results[0]!.text).toBe('armed listTurns');
    expect(results[1]).toEqual({ toolName: 'list_agents', status: 'error', text: 'agent_inspection_failed: injected failure in listTurns' });
    expect(JSON.parse(results[2]!.text)).toEqual([{ task_name: 'seen', status: 'completed', started_at: expect.any(String) }]);
  });

  it('agent_host_unavailable: control tools that run while the runtime shuts down create and touch nothing', async () => {
    // The explorer's end is held while the runtime stops its sessions (explorers first), so the
    // root's batch goes on after shutdown began: that is the reference's "Core is gone".
    let rootTurnId = '';
    let releaseChildEnd!: () => void;
    const childEndHeld = new Promise<void>((r) => (releaseChildEnd = r));
    const held = new Proxy(storage as SessionStorage, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver) as unknown;
        if (typeof value !== 'function') return value;
        if (prop !== 'finishTurn') return value.bind(target);
        return async (turnId: string, outcome: unknown) => {
          if (turnId !== rootTurnId) await childEndHeld;
          return (value as (t: string, o: unknown) => Promise<unknown>).call(target, turnId, outcome);
        };
      },
    });
    let resume!: () => void;
    const paused = new Promise<void>((r) => (resume = r));
    const pause = defineTool({ name: 'pause', description: 'Waits for the test.', parameters: z.object({}), execute: async () => (await paused, 'resumed') });
    const model = router(
      (_r, i) =>
        i === 0
          ? {
              toolCalls: [
                { name: 'spawn_agent', arguments: { task_name: 'busy', message: 'keep busy' } },
                { name: 'pause', arguments: {} },
                { name: 'spawn_agent', arguments: { task_name: 'late', message: 'too late' } },
                { name: 'followup_task', arguments: { task_name: 'busy', message: 'more' } },
                { name: 'interrupt_agent', arguments: { task_name: 'busy' } },
                { name: 'list_agents', arguments: {} },
              ],
            }
          : { hang: true },
      () => ({ hang: true }),
    );
    const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage: held as SqlSessionStorage, model, tools: [read, pause], closeStorageOnShutdown: false, worldState: false, timers: splitTimers });
    const root = await core.createSession({ workingDirectory: process.cwd() });
    const finished: Array<[string, string]> = [];
    root.updates$.subscribe((e) => {
      if (e.update.type === 'tool_call_finished') finished.push([e.update.toolName, e.update.text]);
    });
    const pausing = firstUpdate(root.updates$, (e) => e.update.type === 'tool_call_started' && e.update.toolName === 'pause');
    const { turnId } = await root.startTurn({ clientRequestId: 'shutdown-race', input: [{ type: 'text', text: 'spawn, then shut down' }] });
    rootTurnId = turnId;
    await pausing;
    const lastControlCall = firstUpdate(root.updates$, (e) => e.update.type === 'tool_call_finished' && e.update.toolName === 'list_agents');
    const stopping = core.shutdown();
    resume();
    await lastControlCall;
    releaseChildEnd();
    await stopping;
    const unavailable = 'agent_host_unavailable: the runtime that owns the sub-agents has shut down';
    expect(finished).toEqual([
      ['spawn_agent', '{"task_name":"busy"}'],
      ['pause', 'resumed'],
      ['spawn_agent', unavailable],
      ['followup_task', unavailable],
      ['interrupt_agent', unavailable],
      ['list_agents', unavailable],
    ]);
    // Nothing was created for the refused spawn, and the shutdown ended the root turn.
    expect((await storage.listChildSessions(root.sessionId)).map((c) => c.taskName)).toEqual(['busy']);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'actor_stopped' });
  });
});
