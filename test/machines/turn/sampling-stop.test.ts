/**
 * World State is sampled by the model-call actor (branch step-node): a cancel noted while the Turn is
 * in `running_model.streaming.sampling` must end the turn there, before the model call's counters are
 * written and before the model is asked, as it did when sampling was an actor of its own.
 */
import type { AnyActorRef, InspectionEvent } from 'xstate';
import { describe, expect, it } from 'vitest';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { usePglite } from '../../support/databases.js';
import { harness } from '../../support/harness.js';

describe('a cancel while World State is sampled', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  it('ends the turn in sampling: no model-call counter is written and the model is never asked', async () => {
    let cancel: ((turnId: string) => void) | null = null;
    let cancelled = false;
    const inspect = (e: InspectionEvent) => {
      if (cancelled || e.type !== '@xstate.snapshot' || (e.actorRef as AnyActorRef).id !== 'turn') return;
      const snapshot = e.snapshot as unknown as { value: unknown; context: { turnId: string } };
      if (JSON.stringify(snapshot.value) !== JSON.stringify({ running_model: { streaming: 'sampling' } })) return;
      cancelled = true;
      // The command goes out from the very step that entered `sampling`, as a host's could.
      cancel!(snapshot.context.turnId);
    };
    // The counters' write itself is watched: the database would refuse it once the turn has ended,
    // which would hide a call made after the stop.
    const recorded: string[] = [];
    const record = storage.recordModelCallStart.bind(storage);
    storage.recordModelCallStart = (id, index) => {
      recorded.push(id);
      return record(id, index);
    };
    // No scripted step: a model request would fail the harness's check that every step was played.
    const h = await harness(storage, [], { inspect });
    cancel = (turnId) => void h.session.cancelTurn(turnId);
    const turnId = await h.start('go');
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
    expect(cancelled).toBe(true);
    const turn = await storage.getTurn(turnId);
    expect(turn).toMatchObject({ status: 'cancelled', modelCallCount: 0, modelSubmissionCount: 0 });
    expect(h.model.requests).toHaveLength(0);
    expect(recorded).toEqual([]);
  });
});
