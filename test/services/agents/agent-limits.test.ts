/**
 * The multi-agent limits of reference §1 at their edges (branch audit-b): task_name 48 characters
 * accepted, 49 refused; wait_agent timeout_ms 10,000-600,000 (outside: invalid_arguments, no wait);
 * an agent envelope of 3,999 estimated tokens delivered, 4,000 refused with agent_delivery_failed.
 */
import { describe, expect, it } from 'vitest';
import { agentEnvelopeTokens, AGENT_MESSAGE_MAX_TOKENS, type AgentMessage } from '../../../src/services/agents/mailbox.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { usePglite } from '../../support/databases.js';
import { harness } from '../../support/harness.js';
import { agentMessages, isChild, router, splitTimers, toolResults } from './support.js';

describe('multi-agent limits at their edges (reference §1, §5.3, §5.5, §5.6)', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  it('a 48-character task_name spawns, 49 does not; wait_agent outside 10,000-600,000 ms is invalid_arguments', async () => {
    const name48 = `a${'b'.repeat(47)}`;
    const model = router(
      (_request, i) =>
        i === 0
          ? {
              toolCalls: [
                { name: 'spawn_agent', arguments: { task_name: name48, message: 'go' } },
                { name: 'spawn_agent', arguments: { task_name: `${name48}c`, message: 'go' } },
                { name: 'wait_agent', arguments: { timeout_ms: 9_999 } },
                { name: 'wait_agent', arguments: { timeout_ms: 600_001 } },
                { name: 'wait_agent', arguments: { timeout_ms: 10_000.5 } },
              ],
            }
          : { text: 'done' },
      () => ({ text: 'explored' }),
    );
    const h = await harness(storage, model);
    const started = Date.now();
    const { outcome } = await h.run('spawn');
    expect(outcome.status).toBe('completed');
    const rootRequests = model.requests.filter((r) => !r.system[0]!.content.startsWith('You are an explorer'));
    const results = toolResults(rootRequests[1]!);
    expect(results[0]).toMatchObject({ toolName: 'spawn_agent', status: 'success', text: JSON.stringify({ task_name: name48 }) });
    expect(results[1]).toMatchObject({ toolName: 'spawn_agent', text: expect.stringMatching(/^invalid_task_name: /) });
    const finished = h.updates.map((e) => e.update).filter((u) => u.type === 'tool_call_finished' && u.toolName === 'wait_agent');
    expect(finished.map((u) => (u as { status: string }).status)).toEqual(['failed', 'failed', 'failed']);
    expect(finished.map((u) => (u as { error?: { code: string } }).error?.code)).toEqual(['invalid_arguments', 'invalid_arguments', 'invalid_arguments']);
    // None of them waited (the shortest legal wait is ten seconds).
    expect(Date.now() - started).toBeLessThan(10_000);
    expect((await h.core.listChildSessions(h.session.sessionId)).map((c) => c.taskName)).toEqual([name48]);
  });

  it('an envelope of 3,999 estimated tokens is delivered; 4,000 is refused with agent_delivery_failed and not stored', async () => {
    const message = (body: string): AgentMessage => ({ id: `agent-msg:kid:turn-${body.length}:final_answer`, taskName: 'kid', kind: 'final_answer', body });
    let length = 1;
    while (agentEnvelopeTokens(message('x'.repeat(length))) < AGENT_MESSAGE_MAX_TOKENS - 1) length += 1;
    const below = message('x'.repeat(length));
    let over = length;
    while (agentEnvelopeTokens(message('x'.repeat(over))) < AGENT_MESSAGE_MAX_TOKENS) over += 1;
    const at = message('x'.repeat(over));
    expect([agentEnvelopeTokens(below), agentEnvelopeTokens(at)]).toEqual([3_999, 4_000]);

    const h = await harness(storage, [{ text: 'seen' }]);
    await expect(h.session.deliverAgentMessage(at)).rejects.toMatchObject({ code: 'agent_delivery_failed' });
    await h.session.deliverAgentMessage(below);
    await h.run('what came back?');
    const stored = (await h.session.messages()).filter((m) => m.kind === 'agent_message');
    expect(stored.map((m) => m.id)).toEqual([below.id]);
  });

  it('an explorer answer too long for an envelope reaches the parent as an agent_delivery_failed notice, under its own id', async () => {
    // trust-leftovers point 4: before, nothing was delivered, `wait_agent` timed out, and the
    // reconciliation of the next user turn failed it with agent_delivery_failed.
    const long = 'word '.repeat(6_000);
    const model = router(
      (_request, i) =>
        i === 0
          ? { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'kid', message: 'write a lot' } }, { name: 'wait_agent', arguments: { timeout_ms: 600_000 } }] }
          : { text: `root ${i}` },
      () => ({ text: long }),
    );
    const h = await harness(storage, model, { timers: splitTimers });
    const started = Date.now();
    const { outcome } = await h.run('spawn');
    expect(outcome).toEqual({ status: 'completed', finalText: 'root 1' });
    // Delivered, not timed out: the longest wait is a real minute here.
    expect(Date.now() - started).toBeLessThan(30_000);
    const rootRequests = model.requests.filter((r) => !isChild(r));
    const [envelope] = agentMessages(rootRequests[1]!);
    expect(envelope).toContain('<kind>final_answer</kind>');
    expect(envelope).toMatch(/<body>\nagent_delivery_failed: the sub-agent finished, but its final answer is about \d+ tokens/);
    expect(envelope!.length).toBeLessThan(1_000);
    // The child's own turn keeps its whole answer (reference §5.6: the child turn result is unchanged).
    const [child] = await h.core.listChildSessions(h.session.sessionId);
    const [childTurn] = await h.core.session(child!.id)!.turns();
    expect(await h.core.session(child!.id)!.waitForTurn(childTurn!.id)).toEqual({ status: 'completed', finalText: long });
    const stored = (await h.session.messages()).filter((m) => m.kind === 'agent_message');
    expect(stored.map((m) => m.id)).toEqual([`agent-msg:${child!.id}:${childTurn!.id}:final_answer`]);
    // The reconciliation before the next user turn finds it delivered and refuses nothing.
    expect((await h.run('next')).outcome).toEqual({ status: 'completed', finalText: 'root 2' });
  });
});
