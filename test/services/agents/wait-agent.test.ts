/**
 * wait_agent and the explorer's own limits through the real runtime on PGlite (reference §5.4,
 * §5.5): a delivered wait resets the timeout streak (other tools do not); cancelling the parent
 * during a wait ends the wait and the turn at once while the explorer keeps its turn and its slot;
 * an explorer's turn ends at its 15th model call with `max_model_calls`, whatever the root's limit.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore, type CoreOptions } from '../../../src/core.js';
import { renderAgentEnvelope } from '../../../src/services/agents/mailbox.js';
import type { ScriptedModel } from '../../../src/services/model/scripted.js';
import { defineTool } from '../../../src/services/tools/define.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { echoTool } from '../../../src/testing/tools.js';
import { agentMessages, firstUpdate, isChild, router, splitTimers, toolResults } from './support.js';
import { usePglite } from '../../support/databases.js';

const read = defineTool({ name: 'read', description: 'Reads a file.', parameters: z.object({ path: z.string() }), execute: ({ path }) => `contents of ${path}` });
const TIMED_OUT = '{"delivered":false,"timed_out":true}';
const DELIVERED = '{"delivered":true,"timed_out":false}';
const wait = (timeout_ms: number) => ({ name: 'wait_agent', arguments: { timeout_ms } });

describe('wait_agent and explorer limits (reference §5.5, §5.4)', () => {
  let storage!: SqlSessionStorage;
  const cores = usePglite((s) => (storage = s));

  async function runtime(model: ScriptedModel, extra: Partial<CoreOptions> = {}) {
    const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, tools: [read, echoTool], closeStorageOnShutdown: false, worldState: false, timers: splitTimers, ...extra });
    cores.push(core);
    const root = await core.createSession({ workingDirectory: process.cwd() });
    return { core, root };
  }

  it('a delivered wait resets the timeout streak: two timeouts, a delivery, two timeouts is no doom loop', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const model = router(
      (_r, i) => {
        if (i === 0) return { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'kid', message: 'take your time' } }, wait(10_000)] };
        if (i === 1) return { toolCalls: [wait(10_000)] };
        if (i === 2) {
          release();
          return { toolCalls: [wait(600_000)] };
        }
        if (i === 3 || i === 4) return { toolCalls: [wait(10_000)] };
        return { text: 'survived' };
      },
      async () => {
        await gate;
        return { text: 'kid answer' };
      },
    );
    const { root } = await runtime(model);
    const { turnId } = await root.startTurn({ clientRequestId: 'streak', input: [{ type: 'text', text: 'wait a lot' }] });
    expect(await root.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'survived' });
    const waits = toolResults(model.requests.filter((r) => !isChild(r)).at(-1)!).filter((r) => r.toolName === 'wait_agent');
    expect(waits.map((r) => r.text)).toEqual([TIMED_OUT, TIMED_OUT, DELIVERED, TIMED_OUT, TIMED_OUT]);
  });

  it('other tools between timeouts do not reset the streak: the third timeout is a doom loop', async () => {
    const model = router(
      (_r, i) => [{ toolCalls: [wait(10_000)] }, { toolCalls: [{ name: 'echo', arguments: { text: 'busy work' } }] }, { toolCalls: [wait(10_000)] }, { toolCalls: [wait(10_000)] }, { text: 'never' }][i]!,
      () => ({ text: 'x' }),
    );
    const { root } = await runtime(model);
    const { turnId } = await root.startTurn({ clientRequestId: 'no-reset', input: [{ type: 'text', text: 'wait' }] });
    expect(await root.waitForTurn(turnId)).toMatchObject({ status: 'failed', code: 'doom_loop', message: "doom loop detected for tool 'wait_agent'" });
    expect(model.requests).toHaveLength(4);
  });

  it('cancelling the parent during a wait ends the wait and the turn at once; the explorer keeps running and holds its slot until it ends', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const model = router(
      (request, i) => {
        if (i === 0) return { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'kid', message: 'long job' } }, wait(600_000)] };
        // Second user turn: the running explorer still holds the only slot.
        if (i === 1) return { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'other', message: 'short job' } }] };
        if (i === 2) {
          release();
          return agentMessages(request).length > 0 ? { toolCalls: [{ name: 'echo', arguments: { text: 'already here' } }] } : { toolCalls: [wait(600_000)] };
        }
        if (i === 3) return { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'other', message: 'short job' } }] };
        return { text: 'second turn done' };
      },
      async (request) => {
        if (request.messages.some((m) => m.role === 'user' && m.content[0]!.text === 'long job')) await gate;
        return { text: 'job done' };
      },
    );
    const { core, root } = await runtime(model, { agents: { maxActiveTurns: 1 } });
    const waiting = firstUpdate(root.updates$, (e) => e.update.type === 'tool_call_started' && e.update.toolName === 'wait_agent');
    const { turnId } = await root.startTurn({ clientRequestId: 'first', input: [{ type: 'text', text: 'start and wait' }] });
    await waiting;
    const cancelledAt = Date.now();
    await root.cancelTurn(turnId);
    expect(await root.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
    expect(Date.now() - cancelledAt, 'the cancel did not wait for the wait_agent timeout').toBeLessThan(5_000);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'cancelled' });
    // The spawn's result, then the wait's: ended by the cancel, not by a delivery or its timeout.
    const stored = (await storage.listMessages(root.sessionId)).flatMap((m) => (m.role === 'tool' ? m.content : []));
    expect(stored).toMatchObject([
      { type: 'tool_result', status: 'succeeded', text: '{"task_name":"kid"}' },
      { type: 'tool_result', status: 'cancelled' },
    ]);
    expect(root.status()).toEqual({ type: 'idle' });

    // The explorer was not touched by its parent's cancel: its turn still runs.
    const [kid] = await core.listChildSessions(root.sessionId);
    expect(core.session(kid!.id)!.snapshot().runtime.type).toBe('running');
    expect((await storage.listTurns(kid!.id)).map((t) => t.status)).toEqual(['running']);

    const { turnId: second } = await root.startTurn({ clientRequestId: 'second', input: [{ type: 'text', text: 'spawn another' }] });
    expect(await root.waitForTurn(second)).toEqual({ status: 'completed', finalText: 'second turn done' });
    const results = toolResults(model.requests.filter((r) => !isChild(r)).at(-1)!);
    const spawns = results.filter((r) => r.toolName === 'spawn_agent').map((r) => r.text);
    expect(spawns).toEqual(['{"task_name":"kid"}', expect.stringMatching(/^agent_limit_reached: 1 explorer turns are already running/), '{"task_name":"other"}']);
    expect(agentMessages(model.requests.filter((r) => !isChild(r)).at(-1)!)).toContain(renderAgentEnvelope({ taskName: 'kid', kind: 'final_answer', body: 'job done' }));
  });

  it("an explorer's turn ends at its 15th model call with max_model_calls, reported to the parent; the root keeps its own limit", async () => {
    const model = router(
      (_r, i) => {
        if (i === 0) return { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'looper', message: 'read everything' } }] };
        if (i === 1) return { toolCalls: [wait(600_000)] };
        if (i < 17) return { toolCalls: [{ name: 'read', arguments: { path: `root-${i}.txt` } }] };
        return { text: 'root made 18 calls' };
      },
      // Distinct arguments each call: no doom loop, only the call limit can end it.
      (_request, i) => ({ toolCalls: [{ name: 'read', arguments: { path: `file-${i}.txt` } }] }),
    );
    const { core, root } = await runtime(model, { limits: { maxModelCalls: 50 } });
    const { turnId } = await root.startTurn({ clientRequestId: 'limits', input: [{ type: 'text', text: 'delegate' }] });
    expect(await root.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'root made 18 calls' });
    expect(model.requests.filter(isChild)).toHaveLength(15);
    expect(model.requests.filter((r) => !isChild(r))).toHaveLength(18);
    const [looper] = await core.listChildSessions(root.sessionId);
    const [childTurn] = await storage.listTurns(looper!.id);
    expect(childTurn).toMatchObject({ status: 'failed', errorCode: 'max_model_calls', errorMessage: 'the turn reached max_model_calls (15)' });
    // The 15th call's tool result was recorded; no 16th request was ever made.
    expect(toolResults(model.requests.filter(isChild).at(-1)!)).toHaveLength(14);
    expect(agentMessages(model.requests.filter((r) => !isChild(r))[2]!)).toEqual([
      renderAgentEnvelope({ taskName: 'looper', kind: 'failed', body: 'max_model_calls: the turn reached max_model_calls (15)' }),
    ]);
  });
});
