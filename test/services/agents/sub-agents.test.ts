/**
 * Sub-agents (reference §5.10, acceptance 1-24) and the end-to-end parallel-explorers turn with a
 * restart, through the real runtime on PGlite.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore } from '../../../src/core.js';
import type { SessionUpdateEnvelope } from '../../../src/protocol/updates.js';
import { NON_INTERACTIVE_REFUSAL_TEXT } from '../../../src/machines/tool-call.js';
import { RESTART_BODY } from '../../../src/services/agents/mailbox.js';
import type { ModelRequest } from '../../../src/services/model/port.js';
import { scriptedModel, type ScriptedStep } from '../../../src/services/model/scripted.js';
import { defineTool } from '../../../src/services/tools/define.js';
import { pgliteStorage } from '../../../src/storage/pglite.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { approvalTool, echoTool } from '../../../src/testing/tools.js';
import { faultyStorage } from '../../support/faults.js';
import { assertAllRequests } from '../../support/invariants.js';
import { usePglite } from '../../support/databases.js';

const read = defineTool({ name: 'read', description: 'Reads a file.', parameters: z.object({ path: z.string() }), execute: ({ path }) => `contents of ${path}` });
const write = defineTool({ name: 'write', description: 'Writes a file.', parameters: z.object({ path: z.string() }), execute: () => 'written' });

function isChild(request: ModelRequest): boolean {
  return request.system[0]!.content.startsWith('You are an explorer');
}

function taskOf(request: ModelRequest): string {
  const first = request.messages.find((m) => m.role === 'user');
  return first ? (first.content[0] as { text: string }).text : '';
}

function agentMessages(request: ModelRequest): string[] {
  return request.messages.flatMap((m) => (m.role === 'user' && m.kind === 'agent_message' ? [m.content[0]!.text] : []));
}

/** One model for the root and its explorers: explorers are told apart by their system prompt. */
function router(root: (request: ModelRequest, i: number) => ScriptedStep | Promise<ScriptedStep>, child: (request: ModelRequest) => ScriptedStep | Promise<ScriptedStep>) {
  let rootCalls = 0;
  return scriptedModel((request) => (isChild(request) ? child(request) : root(request, rootCalls++)));
}

const fastTimers = {
  setTimeout: (fn: () => void, ms: number) => setTimeout(fn, Math.ceil(ms / 1000)),
  clearTimeout: (handle: unknown) => clearTimeout(handle as NodeJS.Timeout),
};

describe('sub-agents (reference §5.10)', () => {
  let storage!: SqlSessionStorage;
  const cores = usePglite((s) => (storage = s));

  async function runtime(model: ReturnType<typeof scriptedModel>, extra: Parameters<typeof createCore>[0] extends infer O ? Partial<O> : never = {}) {
    const core = await createCore({ plan: true, conversationHistory: true, agents: true,
      storage,
      model,
      tools: [read, write, echoTool],
      closeStorageOnShutdown: false,
      worldState: false,
      timers: fastTimers,
      ...extra,
    });
    cores.push(core);
    const updates: SessionUpdateEnvelope[] = [];
    core.updates$.subscribe((e) => updates.push(e));
    const root = await core.createSession({ workingDirectory: process.cwd() });
    const run = async (text: string) => {
      const { turnId } = await root.startTurn({ clientRequestId: `r-${Math.random()}`, input: [{ type: 'text', text }] });
      const outcome = await root.waitForTurn(turnId);
      return { turnId, outcome };
    };
    return { core, root, run, updates };
  }

  it('e2e: three explorers run in parallel, a fourth is refused, results reach the root in the same turn; a restart re-delivers each outcome exactly once', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let running = 0;
    let maxRunning = 0;
    const model = router(
      (request, i) => {
        if (i === 0) {
          return {
            toolCalls: ['auth', 'db', 'ui', 'extra'].map((name) => ({ name: 'spawn_agent', arguments: { task_name: name, message: `investigate ${name}` } })),
          };
        }
        if (agentMessages(request).length < 3) {
          if (i === 1) release();
          return { toolCalls: [{ name: 'wait_agent', arguments: {} }] };
        }
        return { text: `aggregated: ${agentMessages(request).length} reports` };
      },
      async (request) => {
        running += 1;
        maxRunning = Math.max(maxRunning, running);
        await gate;
        running -= 1;
        return { text: `report on ${taskOf(request).replace('investigate ', '')}` };
      },
    );
    const { core, root, run, updates } = await runtime(model);
    const { turnId, outcome } = await run('Investigate the auth, db and ui areas in parallel.');
    expect(outcome).toEqual({ status: 'completed', finalText: 'aggregated: 3 reports' });
    expect(maxRunning).toBe(3);
    const rootRequests = model.requests.filter((r) => !isChild(r));
    const spawnResults = rootRequests[1]!.messages.filter((m) => m.role === 'tool').map((m) => (m as { text: string }).text);
    expect(spawnResults.slice(0, 3)).toEqual(['{"task_name":"auth"}', '{"task_name":"db"}', '{"task_name":"ui"}']);
    expect(spawnResults[3]).toMatch(/^agent_limit_reached: /);
    const delivered = agentMessages(rootRequests.at(-1)!);
    expect(delivered.map((t) => t.match(/<task>(.*)<\/task>/)![1]).sort()).toEqual(['auth', 'db', 'ui']);
    expect(delivered.every((t) => t.includes('<kind>final_answer</kind>'))).toBe(true);
    // Children publish on the global stream with their own session ids.
    const children = await core.listChildSessions(root.sessionId);
    expect(children.map((c) => c.taskName).sort()).toEqual(['auth', 'db', 'ui']);
    for (const child of children) expect(updates.some((e) => e.sessionId === child.id && e.update.type === 'turn_finished')).toBe(true);
    expect((await storage.getTurn(turnId))!.status).toBe('completed');
    assertAllRequests(model.requests);

    // Restart mid-way: explorers finish while the root is stuck; the process dies before the root drains them.
    const faulty = faultyStorage(storage);
    let childDone = 0;
    let allDone!: () => void;
    const childrenFinished = new Promise<void>((r) => (allDone = r));
    let stuck!: () => void;
    const rootStuck = new Promise<void>((r) => (stuck = r));
    const hang = defineTool({ name: 'hang', description: 'never returns', parameters: z.object({}), execute: () => (stuck(), new Promise<string>(() => undefined)) });
    const model2 = router(
      () => ({ toolCalls: [...['one', 'two'].map((n) => ({ name: 'spawn_agent', arguments: { task_name: n, message: `look at ${n}` } })), { name: 'hang', arguments: {} }] }),
      () => ({ text: 'child result' }),
    );
    const first = await createCore({ plan: true, conversationHistory: true, agents: true, storage: faulty, model: model2, tools: [read, hang], closeStorageOnShutdown: false, worldState: false });
    first.updates$.subscribe((e) => {
      if (e.sessionId !== rootA.sessionId && e.update.type === 'turn_finished' && ++childDone === 2) allDone();
    });
    const rootA = await first.createSession({ workingDirectory: process.cwd() });
    await rootA.startTurn({ clientRequestId: 'before-crash', input: [{ type: 'text', text: 'spawn and hang' }] });
    await Promise.all([childrenFinished, rootStuck]);
    await first.flushTrace();
    faulty.freeze();

    const model3 = scriptedModel([{ text: 'got them' }, { text: 'nothing new' }]);
    const second = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model: model3, tools: [read], closeStorageOnShutdown: false, worldState: false });
    cores.push(second);
    const rootB = await second.loadSession(rootA.sessionId);
    for (const text of ['after restart', 'and again']) {
      const { turnId: t } = await rootB.startTurn({ clientRequestId: text, input: [{ type: 'text', text }] });
      await rootB.waitForTurn(t);
    }
    const stored = (await rootB.messages()).filter((m) => m.kind === 'agent_message');
    expect(stored.map((m) => m.id).sort()).toEqual([...new Set(stored.map((m) => m.id))].sort());
    expect(stored).toHaveLength(2);
    expect(agentMessages(model3.requests[0]!)).toHaveLength(2);
    expect(agentMessages(model3.requests[1]!)).toHaveLength(2); // The same two, from history: nothing re-delivered.
    expect(stored.every((m) => (m.content[0] as { text: string }).text.includes('<body>\nchild result\n</body>'))).toBe(true);
  });

  it('topology columns, hidden children, unique and well-formed task names [reference §5.10 acc 1-4]', async () => {
    const model = router(
      (_r, i) =>
        i === 0
          ? { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'scan', message: 'go' } }, { name: 'spawn_agent', arguments: { task_name: 'scan', message: 'again' } }, { name: 'spawn_agent', arguments: { task_name: 'Bad-Name', message: 'x' } }, { name: 'spawn_agent', arguments: { task_name: 'a'.repeat(49), message: 'x' } }] }
          : { text: 'done' },
      () => ({ text: 'scanned' }),
    );
    const { core, root, run } = await runtime(model);
    await run('spawn');
    const results = model.requests.filter((r) => !isChild(r))[1]!.messages.filter((m) => m.role === 'tool').map((m) => (m as { text: string }).text);
    expect(results[0]).toBe('{"task_name":"scan"}');
    expect(results[1]).toMatch(/^duplicate_task_name: /);
    expect(results[2]).toMatch(/^invalid_task_name: /);
    expect(results[3]).toMatch(/^invalid_task_name: /);
    const rootRow = (await storage.getSession(root.sessionId))!;
    expect(rootRow).toMatchObject({ parentSessionId: null, taskName: null, agentRole: null, spawnSpanId: null });
    const [child] = await core.listChildSessions(root.sessionId);
    expect(child).toMatchObject({ parentSessionId: root.sessionId, taskName: 'scan', agentRole: 'explorer', spawnSpanId: expect.stringMatching(/^span\./), permissionMode: 'accept_edits' });
    expect((await core.listSessions()).some((s) => s.id === child!.id)).toBe(false);
    // Another root may reuse the name.
    const other = await runtime(router((_r, i) => (i === 0 ? { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'scan', message: 'go' } }] } : { text: 'ok' }), () => ({ text: 'x' })));
    await other.run('spawn');
    expect((await other.core.listChildSessions(other.root.sessionId)).map((c) => c.taskName)).toEqual(['scan']);
  });

  it('a child runs a turn; its answer enters the parent after all tool results, as a user message; its surface is read-only [reference §5.10 acc 5, 7-8, 17]', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const model = router(
      (request, i) => {
        if (i === 0) return { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'finder', message: 'find it' } }, { name: 'echo', arguments: { text: 'meanwhile' } }] };
        if (i === 1) {
          release();
          return { toolCalls: [{ name: 'wait_agent', arguments: { timeout_ms: 600_000 } }] };
        }
        return { text: `parent saw ${agentMessages(request).length}` };
      },
      async () => {
        await gate;
        return { text: 'found in src/x.ts:12' };
      },
    );
    const { root, run } = await runtime(model);
    const { outcome } = await run('delegate');
    expect(outcome).toEqual({ status: 'completed', finalText: 'parent saw 1' });
    const last = model.requests.filter((r) => !isChild(r)).at(-1)!;
    const tail = last.messages.slice(-3);
    expect(tail.map((m) => m.role)).toEqual(['assistant', 'tool', 'user']);
    expect(tail[2]).toMatchObject({ kind: 'agent_message' });
    expect((tail[1] as { text: string }).text).toBe('{"delivered":true,"timed_out":false}');
    const childRequest = model.requests.find(isChild)!;
    expect(childRequest.tools.map((t) => t.name).sort()).toEqual(['echo', 'read'].filter((n) => n === 'read'));
    const listed = await root.messages();
    expect(listed.find((m) => m.kind === 'agent_message')!.content[0]).toMatchObject({ text: expect.stringContaining('<body>\nfound in src/x.ts:12\n</body>') });
  });

  it('failed and interrupted children report back; a message after the final answer creates no turn and waits [reference §5.10 acc 9-10, 20]', async () => {
    const model = router(
      (_r, i) =>
        i === 0
          ? { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'breaks', message: 'fail please' } }, { name: 'spawn_agent', arguments: { task_name: 'slowpoke', message: 'take long' } }] }
          : i === 1
            ? { toolCalls: [{ name: 'interrupt_agent', arguments: { task_name: 'slowpoke' } }] }
            : { text: 'root done' },
      (request) => (taskOf(request) === 'fail please' ? { error: new Error('child exploded') } : { hang: true }),
    );
    const { root, run } = await runtime(model);
    await run('go');
    const turnsBefore = (await root.turns()).length;
    await new Promise((r) => setTimeout(r, 100));
    expect((await root.turns()).length).toBe(turnsBefore); // No turn was created by the deliveries.
    const snapshot = root.snapshot();
    expect(snapshot.runtime.type).toBe('terminal');
    const next = await run('what happened?');
    expect(next.outcome.status).toBe('completed');
    const texts = agentMessages(model.requests.filter((r) => !isChild(r)).at(-1)!);
    expect(texts.some((t) => t.includes('<task>breaks</task>') && t.includes('<kind>failed</kind>') && t.includes('model_error: '))).toBe(true);
    expect(texts.some((t) => t.includes('<task>slowpoke</task>') && t.includes('<kind>interrupted</kind>') && t.includes('Sub-agent turn was interrupted.'))).toBe(true);
  });

  it('at the limit spawn answers agent_limit_reached; an idle child holds no slot and followup_task reuses it [reference §5.10 acc 13-14]', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const lastTool = (request: ModelRequest) => (request.messages.filter((m) => m.role === 'tool').at(-1) as { toolName?: string } | undefined) ?? {};
    const model = router(
      (request, i) => {
        if (i === 0) return { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'a', message: 'first a' } }, { name: 'spawn_agent', arguments: { task_name: 'b', message: 'b' } }] };
        if (i === 1) return { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'c', message: 'c' } }] };
        if (agentMessages(request).length < 2) {
          release();
          return { toolCalls: [{ name: 'wait_agent', arguments: {} }] };
        }
        if (lastTool(request).toolName === 'wait_agent') {
          return { toolCalls: [{ name: 'followup_task', arguments: { task_name: 'a', message: 'second a' } }, { name: 'followup_task', arguments: { task_name: 'zzz', message: 'x' } }] };
        }
        if (lastTool(request).toolName === 'followup_task') return { toolCalls: [{ name: 'list_agents', arguments: {} }] };
        return { text: 'done' };
      },
      async (request) => {
        const task = taskOf(request);
        if (task === 'second a' || request.messages.length > 2) return { text: 'a again' };
        await gate;
        return { text: `${task} answered` };
      },
    );
    const { run } = await runtime(model, { agents: { maxActiveTurns: 2 } });
    const { outcome } = await run('limits');
    expect(outcome.status).toBe('completed');
    const root = model.requests.filter((r) => !isChild(r));
    const texts = root.at(-1)!.messages.filter((m) => m.role === 'tool').map((m) => (m as { text: string }).text);
    expect(texts[2]).toMatch(/^agent_limit_reached: 2 explorer turns are already running/);
    const followups = texts.slice(-3, -1);
    expect(followups[0]).toBe('Follow-up task started');
    expect(followups[1]).toMatch(/^unknown_agent: /);
    const listing = JSON.parse(texts.at(-1)!) as Array<{ task_name: string; status: string; started_at: string }>;
    expect(listing.map((r) => r.task_name)).toEqual(['a', 'b']);
    expect(listing[1]!.status).toBe('completed');
  });

  it('explorers run in accept_edits whatever the parent mode and refuse cards (non-interactive) [reference §5.10 acc 15-16]', async () => {
    const model = router(
      (_r, i) => (i === 0 ? { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'careful', message: 'try the guarded tool' } }] } : i === 1 ? { toolCalls: [{ name: 'wait_agent', arguments: {} }] } : { text: 'ok' }),
      (request) => (request.messages.some((m) => m.role === 'tool') ? { text: 'could not' } : { toolCalls: [{ name: 'guarded', arguments: { action: 'x' } }] }),
    );
    const { core, root, run } = await runtime(model, { tools: [read, approvalTool], agents: { explorerTools: [read, approvalTool] } });
    expect(root.snapshot().permissionMode).toBe('auto');
    await run('go');
    const [child] = await core.listChildSessions(root.sessionId);
    expect(child!.permissionMode).toBe('accept_edits');
    const refusal = model.requests.filter(isChild).at(-1)!.messages.at(-1) as { status: string; text: string };
    expect(refusal).toMatchObject({ status: 'denied', text: NON_INTERACTIVE_REFUSAL_TEXT });
    await expect((await core.loadSession(child!.id)).setPermissionMode('auto')).rejects.toMatchObject({ code: 'sub_agent_mode_fixed' });
  });

  it('wait_agent may time out and be retried; three consecutive timeouts end the turn as doom_loop [reference §5.10 acc 18]', async () => {
    const model = router(() => ({ toolCalls: [{ name: 'wait_agent', arguments: { timeout_ms: 10_000 } }] }), () => ({ text: 'x' }));
    const { run } = await runtime(model);
    const { outcome } = await run('wait forever');
    expect(outcome).toMatchObject({ status: 'failed', code: 'doom_loop', message: "doom loop detected for tool 'wait_agent'" });
    const texts = model.requests.at(-1)!.messages.filter((m) => m.role === 'tool').map((m) => (m as { text: string }).text);
    expect(texts).toEqual(['{"delivered":false,"timed_out":true}', '{"delivered":false,"timed_out":true}']);
    const bad = router((_r, i) => (i === 0 ? { toolCalls: [{ name: 'wait_agent', arguments: { timeout_ms: 5 } }] } : { text: 'ok' }), () => ({ text: 'x' }));
    const b = await runtime(bad);
    await b.run('bad wait');
    expect(bad.requests[1]!.messages.at(-1)).toMatchObject({ status: 'error', text: expect.stringMatching(/^invalid tool input: timeout_ms/) });
  });

  it('reconciliation deletes children that never ran and re-delivers an interrupted child once [reference §5.10 acc 19]', async () => {
    const faulty = faultyStorage(storage);
    let childStarted!: () => void;
    const started = new Promise<void>((r) => (childStarted = r));
    const model = router(
      (_r, i) => (i === 0 ? { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'ok', message: 'fine' } }] } : { text: 'done' }),
      () => {
        childStarted();
        return { hang: true };
      },
    );
    const first = await createCore({ plan: true, conversationHistory: true, agents: true, storage: faulty, model, tools: [read], closeStorageOnShutdown: false, worldState: false });
    const root = await first.createSession({ workingDirectory: process.cwd() });
    const { turnId } = await root.startTurn({ clientRequestId: 'spawn', input: [{ type: 'text', text: 'spawn a hanging child' }] });
    await root.waitForTurn(turnId);
    await started;
    await first.flushTrace();
    faulty.freeze(); // The process dies with the child's turn running.
    const [child] = await storage.listChildSessions(root.sessionId);
    await storage.createSession({ id: `orphan-${root.sessionId}`, workingDirectory: '/w', parentSessionId: root.sessionId, taskName: 'orphan', agentRole: 'explorer' });
    const second = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model: scriptedModel([{ text: 'saw it' }, { text: 'quiet' }]), closeStorageOnShutdown: false, worldState: false });
    cores.push(second);
    const again = await second.loadSession(root.sessionId);
    for (const text of ['status?', 'again?']) {
      const { turnId: t } = await again.startTurn({ clientRequestId: text, input: [{ type: 'text', text }] });
      await again.waitForTurn(t);
    }
    expect((await second.listChildSessions(root.sessionId)).map((c) => c.taskName)).toEqual(['ok']);
    const delivered = (await again.messages()).filter((m) => m.kind === 'agent_message');
    expect(delivered).toHaveLength(1);
    expect(delivered[0]!.id).toBe(`agent-msg:${child!.id}:${(await storage.listTurns(child!.id))[0]!.id}:interrupted`);
    expect((delivered[0]!.content[0] as { text: string }).text).toContain(RESTART_BODY);
  });

  it('reconciliation never deletes an explorer whose first turn is being written (a start refused meanwhile as busy)', async () => {
    // The child's first turn row waits for the test; meanwhile the host asks the busy root for a turn.
    let releaseChild!: () => void;
    const childHeld = new Promise<void>((r) => (releaseChild = r));
    let rootId = '';
    let childBegins!: () => void;
    const childBegun = new Promise<void>((r) => (childBegins = r));
    const held = new Proxy(storage, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver) as unknown;
        if (prop !== 'beginTurn' || typeof value !== 'function') return typeof value === 'function' ? value.bind(target) : value;
        return async (input: { sessionId: string }) => {
          if (input.sessionId !== rootId) {
            childBegins();
            await childHeld;
          }
          return (value as (i: unknown) => Promise<unknown>).call(target, input);
        };
      },
    });
    let releaseRoot!: () => void;
    const rootHeld = new Promise<void>((r) => (releaseRoot = r));
    const model = router(
      (_r, i) => (i === 0 ? { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'slow_start', message: 'look' } }] } : i === 1 ? { gate: rootHeld, step: { text: 'root done' } } : { text: 'later' }),
      () => ({ text: 'child answer' }),
    );
    const { root, core } = await runtime(model, { storage: held });
    rootId = root.sessionId;
    const { turnId } = await root.startTurn({ clientRequestId: 'spawn', input: [{ type: 'text', text: 'spawn' }] });
    await childBegun;
    const started = Date.now();
    await expect(root.startTurn({ clientRequestId: 'second', input: [{ type: 'text', text: 'second' }] })).rejects.toMatchObject({ code: 'busy' });
    expect(Date.now() - started, 'the refused start did not wait for an explorer to stop').toBeLessThan(5_000);
    releaseChild();
    releaseRoot();
    expect(await root.waitForTurn(turnId)).toMatchObject({ status: 'completed' });
    const [child] = await core.listChildSessions(root.sessionId);
    expect(child?.taskName).toBe('slow_start');
    const childHandle = core.session(child!.id)!;
    for (let i = 0; i < 200 && childHandle.snapshot().runtime.type !== 'terminal'; i += 1) await new Promise((r) => setTimeout(r, 5));
    expect(childHandle.snapshot().runtime).toMatchObject({ type: 'terminal', outcome: { status: 'completed', finalText: 'child answer' } });
  });

  it('a shutdown during wait_agent ends the call at once (actor_stopped), not at its timeout', async () => {
    const model = router((_r, i) => (i === 0 ? { toolCalls: [{ name: 'wait_agent', arguments: { timeout_ms: 600_000 } }] } : { text: 'never' }), () => ({ text: 'x' }));
    const { root } = await runtime(model, { timers: undefined });
    const waiting = new Promise<void>((resolve) => {
      root.updates$.subscribe((e) => {
        if (e.update.type === 'tool_call_started' && e.update.toolName === 'wait_agent') resolve();
      });
    });
    const { turnId } = await root.startTurn({ clientRequestId: 'wait', input: [{ type: 'text', text: 'wait' }] });
    await waiting;
    await new Promise((r) => setTimeout(r, 20));
    const started = Date.now();
    await root.shutdown();
    expect(Date.now() - started, 'the shutdown did not wait for the wait_agent timeout').toBeLessThan(5_000);
    const turn = await storage.getTurn(turnId);
    expect(turn).toMatchObject({ status: 'failed', errorCode: 'actor_stopped' });
    const result = (await storage.listMessages(root.sessionId)).find((m) => m.role === 'tool');
    expect(result?.content[0]).toMatchObject({ type: 'tool_result', status: 'outcome_unknown' });
  });

  it('children are listed with status, their transcript is readable, their trace is their own; deleting the root removes them and stops their actors [reference §5.10 acc 21-23]', async () => {
    const model = router((_r, i) => (i === 0 ? { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'traced', message: 'trace me' } }] } : i === 1 ? { toolCalls: [{ name: 'wait_agent', arguments: {} }] } : { text: 'done' }), () => ({ text: 'child answer' }));
    const { core, root, run } = await runtime(model);
    const { turnId } = await run('go');
    const [child] = await core.listChildSessions(root.sessionId);
    const childHandle = core.session(child!.id)!;
    expect((await childHandle.messages()).map((m) => m.role)).toEqual(['user', 'assistant']);
    await core.flushTrace();
    const childTurn = (await storage.listTurns(child!.id))[0]!;
    const childSpans = await storage.listTraceSpans({ turnId: childTurn.id });
    expect(childSpans.every((s) => s.traceId === childTurn.id && s.traceId !== turnId)).toBe(true);
    expect(await core.deleteSession(root.sessionId)).toBe(true);
    expect(await storage.getSession(child!.id)).toBeNull();
    expect(core.session(child!.id)).toBeUndefined();
    expect(childHandle.status()).toEqual({ type: 'not_loaded' });
  });

  it('one run loop: the machines have no sub-agent branches [reference §5.10 acc 24]', () => {
    const dir = join(process.cwd(), 'src', 'machines');
    // Each machine may have a folder of its own (issue 19): every file below src/machines counts.
    for (const file of readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((name) => name.endsWith('.ts'))) {
      const source = readFileSync(join(dir, file), 'utf8');
      expect(source).not.toMatch(/parentSessionId|isSubAgent|parent_link|explorer/);
    }
  });
});

describe('sub-agents in the inspector', () => {
  it('a child Session actor appears under its root in the actor tree, with its own turn', async () => {
    const { createActorTracker } = await import('../../../src/inspector/server/actor-tracker.js');
    const storage = pgliteStorage();
    const tracker = createActorTracker();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const model = router(
      (_r, i) => (i === 0 ? { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'watched', message: 'look' } }] } : { text: 'root done' }),
      async () => {
        await gate;
        return { text: 'child done' };
      },
    );
    const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, tools: [read], worldState: false, inspect: tracker.inspect });
    try {
      const root = await core.createSession({ workingDirectory: process.cwd() });
      const { turnId } = await root.startTurn({ clientRequestId: 'x', input: [{ type: 'text', text: 'spawn' }] });
      await root.waitForTurn(turnId);
      const [child] = await core.listChildSessions(root.sessionId);
      const actors = tracker.actors(root.sessionId);
      const rootActor = actors.find((a) => a.actorId === `session:${root.sessionId}`)!;
      const childActor = actors.find((a) => a.actorId === `agent:${child!.id}`)!;
      expect(childActor).toMatchObject({ machine: 'session', parentKey: rootActor.key });
      expect(actors.some((a) => a.machine === 'turn' && a.parentKey === childActor.key)).toBe(true);
      release();
      await expect.poll(() => core.session(child!.id)!.snapshot().runtime.type).toBe('terminal');
    } finally {
      await core.shutdown();
    }
  });
});
