/**
 * update_plan acceptance items of reference §6.11 that no other suite showed through the public API
 * (branch audit-b): one plan in every place it lives, advancing within a turn, the NULL/0/N signal
 * on completed, cleared and cancelled turns, the cancelled later call, a reload, the surface.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it, vi } from 'vitest';
import { permissionModeSchema } from '../../../src/protocol/input.js';
import { SECTION_SPECS } from '../../../src/services/context/world-state.js';
import { createCore } from '../../../src/core.js';
import { OpenworkError } from '../../../src/errors.js';
import type { SessionUpdateEnvelope } from '../../../src/protocol/updates.js';
import { scriptedModel } from '../../../src/services/model/scripted.js';
import { defineTool } from '../../../src/services/tools/define.js';
import { echoTool } from '../../../src/testing/tools.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { z } from 'zod';
import { harness, updateTypes } from '../../support/harness.js';
import { usePglite } from '../../support/databases.js';

type PlanUpdate = Extract<SessionUpdateEnvelope['update'], { type: 'plan_updated' }>;
const planUpdates = (updates: readonly SessionUpdateEnvelope[]) =>
  updates.map((e) => e.update).filter((u): u is PlanUpdate => u.type === 'plan_updated');
const planCall = (plan: unknown[], explanation?: string) => ({
  name: 'update_plan',
  arguments: explanation === undefined ? { plan } : { plan, explanation },
});

describe('update_plan acceptance (reference §6.11)', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  it('a turn creates and advances its plan; the update, the row, the call arguments and the snapshot hold the same plan, order and whitespace kept [acc 1, 3, 7, 15]', async () => {
    const first = [
      { step: '  read the schema  ', status: 'in_progress' },
      { step: 'add the migration', status: 'pending' },
    ];
    const second = [
      { step: '  read the schema  ', status: 'completed' },
      { step: 'add the migration', status: 'in_progress' },
    ];
    const done = [
      { step: '  read the schema  ', status: 'completed' },
      { step: 'add the migration', status: 'completed' },
    ];
    const h = await harness(
      storage,
      [
        { toolCalls: [planCall(first)] },
        { toolCalls: [planCall(second, 'schema read')] },
        { toolCalls: [planCall(done)] },
        { text: 'finished' },
      ],
    );
    // Not in the default mode either: update_plan never asks, in any mode (reference §6.5).
    await h.session.setPermissionMode('accept_edits');
    const { turnId, outcome } = await h.run('do the work');
    expect(outcome).toEqual({ status: 'completed', finalText: 'finished' });
    expect(updateTypes(h.updates)).not.toContain('permission_requested');

    const updates = planUpdates(h.updates);
    expect(updates.map((u) => [u.explanation, u.plan])).toEqual([
      [null, first],
      ['schema read', second],
      [null, done],
    ]);
    // Every success result is exactly `Plan updated`; the plan lives only in the call's arguments.
    const results = h.updates.map((e) => e.update).filter((u) => u.type === 'tool_call_finished');
    expect(results.map((u) => [u.toolName, u.status, u.text])).toEqual(Array(3).fill(['update_plan', 'succeeded', 'Plan updated']));

    const [row] = await storage.loadSessionTurnPlans(h.session.sessionId);
    expect(row).toEqual({ turnId, explanation: null, steps: done, updatedAt: updates[2]!.updatedAt });
    const calls = (await h.session.messages())
      .flatMap((m) => m.content)
      .filter((b) => b.type === 'tool_call' && b.name === 'update_plan')
      .map((b) => JSON.parse((b as { arguments: string }).arguments));
    expect(calls.at(-1)).toEqual({ plan: done });
    expect(h.session.snapshot().runtime).toMatchObject({ type: 'terminal', turnId, plan: { explanation: null, steps: done, updatedAt: updates[2]!.updatedAt } });
    // All completed: 0 unfinished steps.
    expect((await storage.getTurn(turnId))!.planUnfinishedStepCount).toBe(0);
  });

  it('an empty plan clears it (row with steps [], count 0); a cancelled turn keeps its count of unfinished steps [acc 15, 22]', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const h = await harness(storage, [
      { toolCalls: [planCall([{ step: 'a', status: 'completed' }])] },
      { toolCalls: [planCall([])] },
      { text: 'cleared' },
      { toolCalls: [planCall([{ step: 'x', status: 'completed' }, { step: 'y', status: 'in_progress' }, { step: 'z', status: 'pending' }])] },
      { gate, step: { text: 'never' } },
    ]);
    const cleared = await h.run('clear it');
    expect(cleared.outcome.status).toBe('completed');
    expect(planUpdates(h.updates).at(-1)).toMatchObject({ plan: [] });
    expect((await storage.getTurn(cleared.turnId))!.planUnfinishedStepCount).toBe(0);
    expect(h.session.snapshot().runtime).toMatchObject({ type: 'terminal', plan: { steps: [] } });

    const cancelled = await h.start('then cancel');
    await h.waitFor((e) => e.turnId === cancelled && e.update.type === 'plan_updated');
    const finished = await h.waitFor((e) => e.turnId === cancelled && e.update.type === 'tool_call_finished');
    await h.waitFor((e) => e.sequence > finished.sequence && e.update.type === 'phase_changed' && e.update.phase === 'running_model');
    // The gated call has begun (three requests of the first turn, two of this one).
    await vi.waitFor(() => expect(h.model.requests).toHaveLength(5), { timeout: 10_000 });
    await h.session.cancelTurn(cancelled);
    release();
    expect((await h.session.waitForTurn(cancelled)).status).toBe('cancelled');
    expect((await storage.getTurn(cancelled))!.planUnfinishedStepCount).toBe(2);
    // One row per turn, in turn order, the empty plan included.
    expect((await storage.loadSessionTurnPlans(h.session.sessionId)).map((p) => [p.turnId, p.steps.length])).toEqual([
      [cleared.turnId, 0],
      [cancelled, 3],
    ]);
  });

  it('a call after one that ended the turn is not run: cancelled result, no plan row, no plan_updated [acc 20]', async () => {
    const echo = { name: 'echo', arguments: { text: 'again' } };
    const h = await harness(storage, [
      { toolCalls: [echo] },
      { toolCalls: [echo] },
      { toolCalls: [echo, planCall([{ step: 'never written', status: 'pending' }])] },
    ]);
    const { turnId, outcome } = await h.run('loop');
    expect(outcome).toMatchObject({ status: 'failed', code: 'doom_loop' });
    const plan = h.updates.map((e) => e.update).find((u) => u.type === 'tool_call_finished' && u.toolName === 'update_plan');
    expect(plan).toMatchObject({ status: 'cancelled', text: 'tool was not executed because the turn already terminated' });
    expect(updateTypes(h.updates)).not.toContain('plan_updated');
    expect(await storage.loadSessionTurnPlans(h.session.sessionId)).toEqual([]);
    expect((await storage.getTurn(turnId))!.planUnfinishedStepCount).toBeNull();
  });

  it('after a restart the loaded session shows the last turn\'s plan in its terminal snapshot, and the store lists every turn\'s plan [acc 4, 5]', async () => {
    const steps = [{ step: 'ship', status: 'in_progress' }];
    const h = await harness(storage, [{ toolCalls: [planCall(steps, 'why')] }, { text: 'paused' }]);
    const { turnId } = await h.run('plan');
    const live = planUpdates(h.updates)[0]!;
    // A reader that missed the event gets it again from the ring, after its commit.
    const missed = h.session.replayUpdates(0).map((e) => e.update).filter((u) => u.type === 'plan_updated');
    expect(missed).toEqual([live]);
    await h.core.shutdown();

    const core = await createCore({ storage, model: scriptedModel([]), plan: true, closeStorageOnShutdown: false, worldState: false });
    try {
      const loaded = await core.loadSession(h.session.sessionId);
      expect(loaded.snapshot().runtime).toMatchObject({ type: 'terminal', turnId, plan: { explanation: 'why', steps, updatedAt: live.updatedAt } });
    } finally {
      await core.shutdown();
    }
  });

  it('advertised exactly once with its prompt rules when turned on; absent, neither advertised nor dispatched [acc 12, 14]', async () => {
    const on = await harness(storage, [{ text: 'a' }]);
    await on.run('x');
    const request = on.model.requests[0]!;
    expect(request.tools.filter((t) => t.name === 'update_plan')).toHaveLength(1);
    expect(JSON.stringify(request.system)).toContain('## Task checklists');

    const off = await harness(storage, [{ toolCalls: [planCall([{ step: 'a', status: 'pending' }])] }, { text: 'b' }], { plan: false });
    await off.run('y');
    const offRequest = off.model.requests[0]!;
    expect(offRequest.tools.map((t) => t.name)).not.toContain('update_plan');
    expect(JSON.stringify(offRequest.system)).not.toContain('Task checklists');
    const result = off.updates.map((e) => e.update).find((u) => u.type === 'tool_call_finished');
    expect(result).toMatchObject({ toolName: 'update_plan', status: 'failed', error: { code: 'tool_not_found' } });
    expect(updateTypes(off.updates)).not.toContain('plan_updated');
  });

  it('a host tool named like a control tool fails construction with a typed configuration_invalid error [acc 12]', async () => {
    const impostor = defineTool({ name: 'update_plan', description: 'not the real one', parameters: z.object({}), async execute() { return 'x'; } });
    const attempt = createCore({ storage, model: scriptedModel([]), plan: true, tools: [echoTool, impostor], closeStorageOnShutdown: false });
    await expect(attempt).rejects.toBeInstanceOf(OpenworkError);
    await expect(attempt).rejects.toMatchObject({ code: 'configuration_invalid', message: expect.stringContaining('update_plan') });
    const twice = createCore({ storage, model: scriptedModel([]), tools: [echoTool, echoTool], closeStorageOnShutdown: false });
    await expect(twice).rejects.toMatchObject({ code: 'configuration_invalid' });
  });
});

describe('update_plan boundaries in the code (reference §6.11 acc 9-11, 24)', () => {
  const read = (path: string) => readFileSync(new URL(`../../../${path}`, import.meta.url), 'utf8');
  const sources = (dir: string) => readdirSync(new URL(`../../../${dir}`, import.meta.url)).filter((f) => f.endsWith('.ts')).map((f) => [`${dir}/${f}`, read(`${dir}/${f}`)] as const);

  it('no plan permission mode, no plan World State section, no plan version table; the request builder, Chat State and adapters never read plan storage', () => {
    expect(permissionModeSchema.options).toEqual(['auto', 'accept_edits']);
    expect(Object.keys(SECTION_SPECS).filter((id) => /plan/i.test(id))).toEqual([]);
    const ddl = readdirSync(new URL('../../../src/storage/migrations', import.meta.url)).map((f) => read(`src/storage/migrations/${f}`)).join('\n');
    expect([...ddl.matchAll(/CREATE TABLE (\w*plan\w*)/gi)].map((m) => m[1])).toEqual(['turn_plans']);
    // The model sees the plan only through the call's arguments and, after a compaction, the reminder
    // the runtime-state contributor renders from the plan it is handed (never from storage).
    for (const [path, text] of [...sources('src/services/context'), ...sources('src/services/model'), ...sources('src/services/compaction')]) {
      expect({ path, reads: /loadSessionTurnPlans|turn_plans/.test(text) }).toEqual({ path, reads: false });
    }
    // The contributor touches no storage (only a type import of the state's shape).
    expect(read('src/services/compaction/runtime-state.ts')).not.toMatch(/SessionStorage|storage\.[a-zA-Z]+\(|import \{[^}]*\} from '..\/..\/storage/);
    expect(read('src/services/compaction/runtime-state.ts')).toMatch(/export function collectRuntimeState\(\s*messages[^,]*,\s*previous[^,]*,\s*plan:/);
  });
});
