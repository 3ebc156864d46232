/**
 * The end of a Turn whose actor failed keeps what that actor knew (integrity-paths point 2). Before,
 * the crashed turn's `turn_finished` carried zero usage (and the session's totals did not grow),
 * `plan_unfinished_step_count` was stored null, a model call the turn had reserved and never made
 * stayed counted, and `snapshot()` showed the turn in phase `starting` while its end was written.
 * Now the Session reads the failed actor's last snapshot (the context of its last completed step)
 * and ends the turn as the Turn's own `ending` would.
 *
 * The turn: model call 1 (usage 100 in / 20 out) asks for `update_plan` (three steps, one done) and
 * a tool; the tool's result is the batch's last, so it reserves model call 2 with the tool message.
 * Model call 2's `model.call_recorded` step then throws in the Turn's assign (`emptyDraft` made to
 * throw once the tool has run, as a bug there would), before the call is made. Everything else is
 * real: the core, the storage (both backends), the spans.
 */
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { defineTool } from '../../src/services/tools/define.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { harness } from '../support/harness.js';
import { backends, useBackend } from '../support/databases.js';
import { faultyStorage, within } from '../support/faults.js';
import { assertStoredInvariants } from '../support/invariants.js';

const fault = vi.hoisted(() => ({ armed: false }));

vi.mock('../../src/machines/turn/context.js', async (original) => {
  const actual = await original<typeof import('../../src/machines/turn/context.js')>();
  return {
    ...actual,
    emptyDraft: () => {
      if (fault.armed) {
        fault.armed = false;
        throw new Error('the draft could not be reset');
      }
      return actual.emptyDraft();
    },
  };
});

/** Arms the fault: the Turn's next `emptyDraft` (model call 2 being recorded) throws. */
const armingTool = defineTool({
  name: 'arming',
  description: 'Runs, and arms the fault for the next model call.',
  parameters: z.object({}),
  execute: () => {
    fault.armed = true;
    return 'armed';
  },
});

const plan = {
  explanation: 'three steps',
  plan: [
    { step: 'one', status: 'completed' },
    { step: 'two', status: 'in_progress' },
    { step: 'three', status: 'pending' },
  ],
};

for (const backend of backends) {
  describe(`the end of a crashed turn keeps what its actor knew (${backend.name})`, () => {
    let storage: SqlSessionStorage;
    useBackend(backend, (s) => (storage = s));

    it('usage in turn_finished and the session totals, the plan\'s unfinished steps, the reserved call taken back, the last phase while the end is written', async () => {
      const faulty = faultyStorage(storage);
      const h = await harness(
        faulty,
        [
          {
            toolCalls: [
              { name: 'update_plan', arguments: plan },
              { name: 'arming', arguments: {} },
            ],
            usage: { inputTokens: 100, outputTokens: 20, cachedInputTokens: 0, reasoningTokens: 0 },
          },
          { text: 'the next turn', usage: { inputTokens: 7, outputTokens: 3, cachedInputTokens: 0, reasoningTokens: 0 } },
        ],
        { tools: [armingTool] },
      );
      const held = faulty.hold('finishTurn');
      const turnId = await h.start('go');
      await within(5_000, 'the end write', held.reached);

      // While the end is written the turn is still the session's, in the phase it was in.
      const during = h.session.snapshot().runtime;
      expect(during).toMatchObject({ type: 'running', turnId, phase: 'running_model', pendingApprovals: [] });
      expect((during as { plan: { steps: unknown[] } | null }).plan?.steps).toHaveLength(3);
      held.release();

      const outcome = await within(5_000, 'the end of the turn', h.session.waitForTurn(turnId));
      expect(outcome).toMatchObject({ status: 'failed', code: 'actor_stopped' });
      expect(outcome.status === 'failed' && outcome.message).toMatch(/the draft could not be reset/);

      const finished = h.updates.filter((e) => e.turnId === turnId && e.update.type === 'turn_finished');
      expect(finished).toHaveLength(1);
      expect(finished[0]!.update).toMatchObject({ usage: { inputTokens: 100, outputTokens: 20 } });
      expect(h.session.snapshot().usage).toMatchObject({ inputTokens: 100, outputTokens: 20 });
      expect(h.session.snapshot().runtime).toMatchObject({ type: 'terminal', turnId, plan: { explanation: 'three steps' } });

      // The failed Turn's model-call actor was stopped with it: the reserved second call was never sent.
      expect(h.model.requests).toHaveLength(1);
      // One model call was made; the second, reserved by the tool's result, was taken back.
      expect(await storage.getTurn(turnId)).toMatchObject({
        status: 'failed',
        errorCode: 'actor_stopped',
        planUnfinishedStepCount: 2,
        modelCallCount: 1,
        modelSubmissionCount: 1,
      });

      const next = await h.run('again');
      expect(next.outcome).toMatchObject({ status: 'completed' });
      expect(h.session.snapshot().usage).toMatchObject({ inputTokens: 107, outputTokens: 23 });
      await assertStoredInvariants(storage, h.session.sessionId);
    });
  });
}
