/**
 * A sub-agent whose Turn crashes (integrity-paths point 4): the explorer's read tool parses its
 * arguments into something the Turn's doom-loop guard cannot serialise, so the child's Turn actor
 * fails and its Session ends the turn `failed` / `actor_stopped`. The parent must hear it as any
 * failed child (reference §5.6: kind `failed`, body `<code>: <message>`), `wait_agent` must return
 * `delivered` instead of waiting, the child's turn slot must come back (a follow-up turn starts on
 * it), `list_agents` shows it `failed`, `interrupt_agent` answers `agent_interrupt_failed` (no turn is
 * running), and `close_agent`, which the reference rejected (there are five agent tools), is
 * `tool_not_found`; the parent's turn goes on through all of it. Both backends: the child's turn row
 * and the parent's stored agent message are facts.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore } from '../../../src/core.js';
import { defineTool } from '../../../src/services/tools/define.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { backends, useBackend } from '../../support/databases.js';
import { within } from '../../support/faults.js';
import { agentMessages, isChild, router, splitTimers, toolResults } from './support.js';

/** The explorer's `read`: its parsed arguments throw when serialised (the Turn's doom-loop guard does). */
const hostileRead = defineTool({
  name: 'read',
  description: 'Reads a file.',
  parameters: z.object({ text: z.string() }).transform((value) => ({
    ...value,
    toJSON(): never {
      throw new Error('the arguments refuse to be serialised');
    },
  })),
  execute: () => 'ran',
});

for (const backend of backends) {
  describe(`a sub-agent whose turn crashes (${backend.name})`, () => {
    let storage: SqlSessionStorage;
    useBackend(backend, (s) => (storage = s));

    it('wait_agent is delivered its failure; list, interrupt, close and follow-up answer as the reference says; the parent goes on', async () => {
      const model = router(
        (_request, i) => {
          if (i === 0) return { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'kid', message: 'read it' } }, { name: 'wait_agent', arguments: { timeout_ms: 600_000 } }] };
          if (i === 1) {
            return {
              toolCalls: [
                { name: 'list_agents', arguments: {} },
                { name: 'interrupt_agent', arguments: { task_name: 'kid' } },
                { name: 'close_agent', arguments: { task_name: 'kid' } },
                { name: 'followup_task', arguments: { task_name: 'kid', message: 'try again' } },
                { name: 'wait_agent', arguments: { timeout_ms: 600_000 } },
              ],
            };
          }
          return { text: 'the parent carried on' };
        },
        (_request, i) => (i === 0 ? { toolCalls: [{ name: 'read', arguments: { text: 'a' } }] } : { text: 'the second try answered' }),
      );
      const core = await createCore({ agents: true, storage, model, tools: [hostileRead], closeStorageOnShutdown: false, worldState: false, timers: splitTimers });
      try {
        const root = await core.createSession({ workingDirectory: process.cwd() });
        const { turnId } = await root.startTurn({ clientRequestId: 'explore', input: [{ type: 'text', text: 'delegate' }] });
        expect(await within(20_000, 'the parent turn', root.waitForTurn(turnId))).toMatchObject({ status: 'completed', finalText: 'the parent carried on' });

        // The first wait was delivered (not timed out): the crash reached the parent's mailbox.
        const rootRequests = model.requests.filter((r) => !isChild(r));
        expect(rootRequests).toHaveLength(3);
        const second = rootRequests[1]!;
        const firstWait = toolResults(second).find((r) => r.toolName === 'wait_agent')!;
        expect(JSON.parse(firstWait.text)).toEqual({ delivered: true, timed_out: false });
        expect(agentMessages(second).join('\n')).toMatch(/actor_stopped: the turn actor failed: [\s\S]*the arguments refuse to be serialised/);

        const last = rootRequests[2]!;
        const results = toolResults(last);
        const list = results.find((r) => r.toolName === 'list_agents')!;
        expect(JSON.parse(list.text)).toEqual([expect.objectContaining({ task_name: 'kid', status: 'failed' })]);
        expect(results.find((r) => r.toolName === 'interrupt_agent')).toMatchObject({ status: 'error', text: expect.stringMatching(/^agent_interrupt_failed: /) });
        expect(results.find((r) => r.toolName === 'close_agent')).toMatchObject({ status: 'error', text: "tool 'close_agent' not found" });
        // The crashed turn gave its slot back: the follow-up started, and its answer was delivered.
        expect(results.find((r) => r.toolName === 'followup_task')).toMatchObject({ status: 'success' });
        expect(JSON.parse(results.filter((r) => r.toolName === 'wait_agent').at(-1)!.text)).toEqual({ delivered: true, timed_out: false });
        expect(agentMessages(last).join('\n')).toMatch(/the second try answered/);

        const [child] = await storage.listChildSessions(root.sessionId);
        const turns = await storage.listTurns(child!.id);
        expect(turns.map((t) => [t.status, t.errorCode])).toEqual([
          ['failed', 'actor_stopped'],
          ['completed', null],
        ]);
      } finally {
        await core.shutdown();
      }
    });
  });
}
