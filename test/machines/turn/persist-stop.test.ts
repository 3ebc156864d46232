/**
 * One model actor streams the call and commits its answer (`running_model.streaming.persisting`,
 * branch perf-fold-model). A cancel or a stop that arrives while the assistant message is being
 * committed must not cut that commit off: the message is stored once, its update comes only after
 * its commit, and the tool call it carries is recorded cancelled and never run. Real runtime, real
 * storage (PGlite), the scripted model; the commit is held at the storage.
 */
import { describe, expect, it } from 'vitest';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { usePglite } from '../../support/databases.js';
import { faultyStorage, spyTool, within } from '../../support/faults.js';
import { harness } from '../../support/harness.js';

describe('a cancel or stop while the assistant message is committed', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  for (const command of ['cancel', 'stop'] as const) {
    it(`${command}: the commit finishes once, draft_cleared follows it, and the call it carries is recorded cancelled, never run`, async () => {
      const faulty = faultyStorage(storage);
      const held = faulty.hold('commitAssistantMessage');
      const ran: number[] = [];
      const h = await harness(faulty, [{ toolCalls: [{ name: 'spy', arguments: { n: 1 }, callId: 'c1' }] }], { tools: [spyTool(ran)] });
      const turnId = await h.start('go');
      await within(10_000, 'the assistant message write', held.reached);
      const snapshot = h.session.snapshot();
      expect(snapshot.runtime).toMatchObject({ type: 'running', turnId });
      // Cancel: the host's command; stop: the session is shut down (the Turn is told `turn.stop`).
      const ended = command === 'cancel' ? h.session.cancelTurn(turnId) : h.core.shutdown();
      await new Promise((resolve) => setTimeout(resolve, 50));
      // Nothing of the answer is announced while its write is in flight.
      expect(h.updates.filter((e) => e.update.type === 'draft_cleared')).toEqual([]);
      held.release();
      await held.settled;
      await within(10_000, `the ${command}`, Promise.resolve(ended));
      if (command === 'cancel') expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
      const commits = faulty.calls.filter((c) => c.method === 'commitAssistantMessage');
      expect(commits).toHaveLength(1);
      const messages = await storage.listMessages(h.session.sessionId);
      const assistant = messages.filter((m) => m.role === 'assistant');
      expect(assistant).toHaveLength(1);
      expect(assistant[0]!.content).toEqual([{ type: 'tool_call', callId: 'c1', name: 'spy', arguments: '{"n":1}' }]);
      expect(ran).toEqual([]);
      // The call the stored answer carries has its result: cancelled before it ran.
      const tool = messages.filter((m) => m.role === 'tool');
      expect(tool.map((m) => m.content)).toEqual([[expect.objectContaining({ type: 'tool_result', callId: 'c1', status: 'cancelled' })]]);
      // The answer's update only after its commit, then the call's end, then the turn's.
      expect(h.updates.map((e) => e.update.type).slice(-4)).toEqual(['draft_cleared', 'tool_call_finished', 'phase_changed', 'turn_finished']);
      expect(h.updates.find((e) => e.update.type === 'draft_cleared')!.update).toEqual({ type: 'draft_cleared', reason: 'committed' });
      expect(await storage.getTurn(turnId)).toMatchObject(
        command === 'cancel' ? { status: 'cancelled', toolCallCount: 1 } : { status: 'failed', errorCode: 'actor_stopped', toolCallCount: 1 },
      );
    });
  }
});
