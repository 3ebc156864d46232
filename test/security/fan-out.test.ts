/**
 * Fan-out bombs (attack round 3, point 3), through the public API with a scripted model: a response
 * of 70 `spawn_agent` calls whose explorers answer at once (so the three-active-turns cap never
 * binds), an explorer that tries to spawn its own, `update_plan` past MAX_PLAN_STEPS and
 * MAX_STEP_CHARS, and a response of 256 calls that each need a card.
 */
import { describe, expect, it } from 'vitest';
import type { ToolResultBlock } from '../../src/protocol/content.js';
import { MAX_PLAN_STEPS, MAX_STEP_CHARS } from '../../src/protocol/plan.js';
import { MAX_SUB_AGENTS_PER_SESSION } from '../../src/services/agents/control.js';
import { MAX_TOOL_CALLS_PER_RESPONSE } from '../../src/services/model/stream-events.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { harness } from '../support/harness.js';
import { isChild, router, toolResults } from '../services/agents/support.js';

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));

/** The error code of each stored tool result of a session, in order. */
async function resultCodes(sessionId: string): Promise<Array<string | undefined>> {
  const stored = await storage.listMessages(sessionId);
  return stored.filter((m) => m.role === 'tool').map((m) => (m.content[0] as ToolResultBlock).error?.code);
}

describe('fan-out bombs', () => {
  it(`70 spawn_agent calls in one response: ${MAX_SUB_AGENTS_PER_SESSION} explorers, the rest agent_limit_reached; an explorer cannot spawn`, async () => {
    const model = router(
      (_r, i) => (i === 0 ? { toolCalls: Array.from({ length: 70 }, (_, n) => ({ name: 'spawn_agent', arguments: { task_name: `t${n}`, message: 'look' } })) } : { text: 'root done' }),
      // Each explorer first tries to spawn one of its own, then answers.
      (request) => (toolResults(request).length === 0 ? { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'deeper', message: 'recurse' } }] } : { text: 'child done' }),
    );
    // The active-turn cap is lifted so that only the per-session cap can refuse: explorers answer at
    // once, but on a loaded machine a few may still be running when the next spawn comes (CI refused
    // 28 of 70 with the three-turn cap), which proves nothing about the 64.
    const h = await harness(storage, model, { agents: { maxActiveTurns: 1_000 } });
    const { outcome } = await h.run('go');
    expect(outcome).toMatchObject({ status: 'completed', finalText: 'root done' });
    const codes = await resultCodes(h.session.sessionId);
    const results = toolResults(model.requests.filter((r) => !isChild(r)).at(-1)!);
    expect(results.filter((r) => r.status === 'success')).toHaveLength(MAX_SUB_AGENTS_PER_SESSION);
    const refused = results.filter((r) => r.status !== 'success');
    expect(refused).toHaveLength(70 - MAX_SUB_AGENTS_PER_SESSION);
    for (const r of refused) expect(r.text).toMatch(new RegExp(`^agent_limit_reached: this session has ${MAX_SUB_AGENTS_PER_SESSION} explorers already`));
    expect(await resultCodes(h.session.sessionId)).toHaveLength(70);
    // Depth 1: the explorer's surface has no spawn_agent.
    const childResults = model.requests.filter(isChild).flatMap((r) => toolResults(r));
    expect(childResults.length).toBeGreaterThan(0);
    for (const r of childResults) expect(r.text).toBe("tool 'spawn_agent' not found");
  }, 120_000);

  it('update_plan past MAX_PLAN_STEPS or MAX_STEP_CHARS fails whole (invalid_arguments) and no plan update follows', async () => {
    const steps = (n: number, chars = 8) => Array.from({ length: n }, (_, i) => ({ step: `${i}`.padEnd(chars, 'x'), status: 'pending' }));
    const h = await harness(storage, [
      { toolCalls: [{ name: 'update_plan', arguments: { plan: steps(2) } }] },
      { toolCalls: [{ name: 'update_plan', arguments: { plan: steps(MAX_PLAN_STEPS + 1) } }] },
      { toolCalls: [{ name: 'update_plan', arguments: { plan: steps(1, MAX_STEP_CHARS + 1) } }] },
      { text: 'done' },
    ]);
    const { outcome } = await h.run('go');
    expect(outcome).toMatchObject({ status: 'completed' });
    expect(await resultCodes(h.session.sessionId)).toEqual([undefined, 'invalid_arguments', 'invalid_arguments']);
    const planUpdates = h.updates.filter((u) => u.update.type === 'plan_updated');
    expect(planUpdates).toHaveLength(1);
  }, 60_000);

  it(`${MAX_TOOL_CALLS_PER_RESPONSE} calls in one response that each need a card: one card at a time, all answered, bounded time`, async () => {
    const calls = Array.from({ length: MAX_TOOL_CALLS_PER_RESPONSE }, (_, n) => ({ name: 'guarded', arguments: { action: `a${n}`, scope: `s${n}` } }));
    const h = await harness(storage, [{ toolCalls: calls }, { text: 'done' }]);
    let pending = 0;
    let most = 0;
    let cards = 0;
    h.session.updates$.subscribe((u) => {
      if (u.update.type === 'permission_requested') {
        cards += 1;
        pending += 1;
        most = Math.max(most, pending);
        const id = u.update.toolCallId;
        setImmediate(() => {
          pending -= 1;
          void h.session.resolvePermission(u.turnId!, id, 'allow_once');
        });
      }
    });
    const { outcome } = await h.run('go');
    expect(outcome).toMatchObject({ status: 'completed', finalText: 'done' });
    expect(cards).toBe(MAX_TOOL_CALLS_PER_RESPONSE);
    expect(most).toBe(1);
    expect((await resultCodes(h.session.sessionId)).filter((c) => c !== undefined)).toEqual([]);
  }, 120_000);
});
