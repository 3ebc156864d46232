/**
 * Reconciliation after a restart (reference §5.8, §5.10 acc 19-20), through the real runtime on
 * PGlite: every terminal child turn whose message the parent never stored is re-delivered before
 * the next user turn, exactly once (also across a second restart), as the exact envelope of its
 * outcome; zero-turn children are deleted and their task names released; no parent turn is created.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore } from '../../../src/core.js';
import { COMPLETED_WITHOUT_ANSWER, INTERRUPTED_BODY, RESTART_BODY, agentMessageId, renderAgentEnvelope, type AgentMessageKind } from '../../../src/services/agents/mailbox.js';
import { defineTool } from '../../../src/services/tools/define.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { faultyStorage } from '../../support/faults.js';
import { agentMessages, isChild, router, taskOf, toolResults } from './support.js';
import { usePglite } from '../../support/databases.js';

const read = defineTool({ name: 'read', description: 'Reads a file.', parameters: z.object({ path: z.string() }), execute: ({ path }) => `contents of ${path}` });

describe('reconciliation after a restart (reference §5.8)', () => {
  let storage!: SqlSessionStorage;
  const cores = usePglite((s) => (storage = s));

  it('re-delivers each outcome once with its exact envelope, deletes zero-turn children, releases their names, and creates no turn', async () => {
    // First process: five explorers end in five different ways while the root is stuck in a tool;
    // the process dies before the root drains their messages (the mailbox is only in memory).
    const faulty = faultyStorage(storage);
    let stuck!: () => void;
    const rootStuck = new Promise<void>((r) => (stuck = r));
    const hang = defineTool({ name: 'hang', description: 'never returns', parameters: z.object({}), execute: () => (stuck(), new Promise<string>(() => undefined)) });
    let crashingStarted!: () => void;
    const crashingRuns = new Promise<void>((r) => (crashingStarted = r));
    const spawn = (task_name: string, message: string) => ({ name: 'spawn_agent', arguments: { task_name, message } });
    const model = router(
      () => ({
        toolCalls: [
          spawn('answers', 'answer'),
          spawn('silent', 'say nothing'),
          spawn('breaks', 'fail'),
          spawn('stopped', 'hang until interrupted'),
          { name: 'interrupt_agent', arguments: { task_name: 'stopped' } },
          spawn('crashes', 'hang until the crash'),
          { name: 'hang', arguments: {} },
        ],
      }),
      (request) => {
        const task = taskOf(request);
        if (task === 'answer') return { text: 'the answer is 42' };
        if (task === 'say nothing') return { text: '' };
        if (task === 'fail') return { error: new Error('child exploded') };
        if (task === 'hang until the crash') crashingStarted();
        return { hang: true };
      },
    );
    const first = await createCore({ plan: true, conversationHistory: true, storage: faulty, model, tools: [read, hang], closeStorageOnShutdown: false, worldState: false, agents: { maxActiveTurns: 5 } });
    const root = await first.createSession({ workingDirectory: process.cwd() });
    const ended = new Set<string>();
    let fourEnded!: () => void;
    const fourDone = new Promise<void>((r) => (fourEnded = r));
    first.updates$.subscribe((e) => {
      if (e.sessionId !== root.sessionId && e.update.type === 'turn_finished' && (ended.add(e.sessionId), ended.size === 4)) fourEnded();
    });
    await root.startTurn({ clientRequestId: 'before-crash', input: [{ type: 'text', text: 'spawn five' }] });
    await Promise.all([rootStuck, crashingRuns, fourDone]);
    await first.flushTrace();
    faulty.freeze();
    // A half-failed spawn of that process: a child row without a turn.
    const orphan = await storage.createSession({ id: `orphan-${root.sessionId}`, workingDirectory: '/w', parentSessionId: root.sessionId, taskName: 'orphan', agentRole: 'explorer' });

    const children = new Map((await storage.listChildSessions(root.sessionId)).map((c) => [c.taskName!, c.id]));
    expect([...children.keys()].sort()).toEqual(['answers', 'breaks', 'crashes', 'orphan', 'silent', 'stopped']);
    const turnOf = async (task: string) => (await storage.listTurns(children.get(task)!))[0]!;

    // Second process.
    const secondModel = router(
      (_r, i) =>
        i === 0
          ? { toolCalls: [spawn('orphan', 'the name is free again')] }
          : i === 1
            ? { toolCalls: [{ name: 'wait_agent', arguments: { timeout_ms: 600_000 } }] }
            : { text: 'after restart' },
      () => ({ text: 'new orphan answer' }),
    );
    const second = await createCore({ plan: true, conversationHistory: true, agents: true,
      storage,
      model: secondModel,
      tools: [read],
      closeStorageOnShutdown: false,
      worldState: false,
    });
    cores.push(second);
    const again = await second.loadSession(root.sessionId);
    expect(await storage.listTurns(root.sessionId)).toHaveLength(1); // Loading reconciles nothing and starts nothing.
    const crashed = await turnOf('crashes');
    expect(crashed.status).toBe('interrupted');
    const breaks = await turnOf('breaks');
    expect(breaks).toMatchObject({ status: 'failed', errorCode: 'model_error' });
    expect(breaks.errorMessage).toContain('child exploded');

    const expected = async (task: string, kind: AgentMessageKind, body: string) => ({
      id: agentMessageId(children.get(task)!, (await turnOf(task)).id, kind),
      text: renderAgentEnvelope({ taskName: task, kind, body }),
    });
    const want = [
      await expected('answers', 'final_answer', 'the answer is 42'),
      await expected('silent', 'final_answer', COMPLETED_WITHOUT_ANSWER),
      await expected('breaks', 'failed', `model_error: ${breaks.errorMessage}`),
      // A cancelled child gets the live path's kind and body, hence the live path's id.
      await expected('stopped', 'interrupted', INTERRUPTED_BODY),
      await expected('crashes', 'interrupted', RESTART_BODY),
    ];

    const turnA = await again.startTurn({ clientRequestId: 'after-restart', input: [{ type: 'text', text: 'what happened?' }] });
    expect(await again.waitForTurn(turnA.turnId)).toMatchObject({ status: 'completed' });
    // The first request of the turn carries the five missing outcomes, each once, exactly.
    const firstRequest = secondModel.requests.filter((r) => !isChild(r))[0]!;
    expect([...agentMessages(firstRequest)].sort()).toEqual(want.map((w) => w.text).sort());
    expect(toolResults(secondModel.requests.filter((r) => !isChild(r))[1]!).at(-1)).toMatchObject({ toolName: 'spawn_agent', text: '{"task_name":"orphan"}' });
    const storedA = (await again.messages()).filter((m) => m.kind === 'agent_message');
    const byId = (list: typeof storedA) => list.map((m) => ({ id: m.id, text: (m.content[0] as { text: string }).text })).sort((a, b) => (a.id < b.id ? -1 : 1));
    // The five missing outcomes plus, later in the turn, the new orphan's live answer.
    const newOrphan = (await storage.listChildSessions(root.sessionId)).find((c) => c.taskName === 'orphan')!;
    expect(newOrphan.id).not.toBe(orphan.id);
    const orphanTurn = (await storage.listTurns(newOrphan.id))[0]!;
    const live = { id: agentMessageId(newOrphan.id, orphanTurn.id, 'final_answer'), text: renderAgentEnvelope({ taskName: 'orphan', kind: 'final_answer', body: 'new orphan answer' }) };
    expect(byId(storedA)).toEqual([...want, live].sort((a, b) => (a.id < b.id ? -1 : 1)));
    // The zero-turn child went before the turn, so its name could be used again.
    expect(await storage.getSession(orphan.id)).toBeNull();
    // No parent turn was created by the reconciliation: the crashed turn and the user's one.
    expect((await storage.listTurns(root.sessionId)).map((t) => t.clientRequestId)).toEqual(['before-crash', 'after-restart']);

    // Third process: nothing is re-delivered again; the history carries each envelope once.
    await second.shutdown();
    const thirdModel = router(() => ({ text: 'quiet' }), () => ({ text: 'unused' }));
    const third = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model: thirdModel, tools: [read], closeStorageOnShutdown: false, worldState: false });
    cores.push(third);
    const last = await third.loadSession(root.sessionId);
    const turnB = await last.startTurn({ clientRequestId: 'third-process', input: [{ type: 'text', text: 'anything new?' }] });
    expect(await last.waitForTurn(turnB.turnId)).toEqual({ status: 'completed', finalText: 'quiet' });
    const storedB = (await last.messages()).filter((m) => m.kind === 'agent_message');
    expect(byId(storedB)).toEqual(byId(storedA));
    const seen = agentMessages(thirdModel.requests[0]!);
    expect(seen).toHaveLength(6);
    for (const { text } of [...want, live]) expect(seen.filter((t) => t === text)).toHaveLength(1);
    expect(thirdModel.requests.filter(isChild)).toHaveLength(0);
  });
});
