/**
 * Seed 000 §7-§8 and seed 004: the update envelope, per-session sequences, the ring buffer and
 * replay, the snapshot (idle, running, terminal), the global stream and the host status.
 */
import { describe, expect, it } from 'vitest';
import { sessionUpdateEnvelopeSchema, type SessionUpdateEnvelope } from '../../src/protocol/updates.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { faultyStorage } from '../support/faults.js';
import { harness } from '../support/harness.js';
import { assertSequences } from '../support/invariants.js';
import { usePglite } from '../support/databases.js';

describe('updates, replay and snapshot', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  it('envelopes are version 7 with sessionId, turnId, a gap-free sequence from 1 and occurredAtMs', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'a' } }] }, { text: 'done' }], {
      clock: { now: () => 1_700_000_000_000 },
    });
    const { turnId } = await h.run('go');
    for (const e of h.updates) {
      expect(sessionUpdateEnvelopeSchema.parse(e)).toEqual(e);
      expect(e).toMatchObject({ version: 7, sessionId: h.session.sessionId, turnId, occurredAtMs: 1_700_000_000_000 });
    }
    expect(h.updates.map((e) => e.sequence)).toEqual(h.updates.map((_, i) => i + 1));
    expect(h.session.snapshot().lastUpdateSequence).toBe(h.updates.length);
  });

  it('a host that reads the snapshot while it is handed an update is told that update\'s sequence, and replay from it answers (one Turn step\'s updates are sequenced together, issue 14)', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'a' } }] }, { text: 'done' }]);
    const seen: Array<{ sequence: number; told: number; replayed: number | string }> = [];
    h.session.updates$.subscribe((e) => {
      const told = h.session.snapshot().lastUpdateSequence;
      let replayed: number | string;
      try {
        replayed = h.session.replayUpdates(told).length;
      } catch (error) {
        replayed = (error as { code: string }).code;
      }
      seen.push({ sequence: e.sequence, told, replayed });
    });
    await h.run('go');
    expect(seen.length).toBeGreaterThan(5);
    expect(seen).toEqual(seen.map((s) => ({ sequence: s.sequence, told: s.sequence, replayed: 0 })));
  });

  it('replays from any sequence still in the 512-entry buffer, and asks for the snapshot beyond it', async () => {
    const long = 'x'.repeat(700);
    const h = await harness(storage, [{ text: long, chunk: 1 }]);
    await h.run('stream a lot');
    const last = h.updates.at(-1)!.sequence;
    expect(last).toBeGreaterThan(512);
    const tail = h.session.replayUpdates(last - 10);
    expect(tail.map((e) => e.sequence)).toEqual(h.updates.slice(-10).map((e) => e.sequence));
    expect(tail).toEqual(h.updates.slice(-10));
    expect(h.session.replayUpdates(last)).toEqual([]);
    expect(h.session.replayUpdates(last - 512)).toHaveLength(512);
    expect(() => h.session.replayUpdates(last - 513)).toThrow(expect.objectContaining({ code: 'snapshot_required' }));
    expect(() => h.session.replayUpdates(0)).toThrow(expect.objectContaining({ code: 'snapshot_required' }));
    // A sequence from another actor incarnation (after a restart) is not ours either.
    expect(() => h.session.replayUpdates(last + 5)).toThrow(expect.objectContaining({ code: 'snapshot_required' }));
    expect(() => h.session.replayUpdates(-1)).toThrow(expect.objectContaining({ code: 'invalid_request' }));
  });

  it('the snapshot is idle, then running with phase, draft, tool calls and card, then terminal with the plan', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const h = await harness(storage, [
      { toolCalls: [{ name: 'update_plan', arguments: { explanation: 'why', plan: [{ step: 'one', status: 'in_progress' }, { step: 'two', status: 'pending' }] } }] },
      { toolCalls: [{ name: 'guarded', arguments: { action: 'a' }, callId: 'g' }] },
      { gate, step: { text: 'finished' } },
    ]);
    expect(h.session.snapshot()).toMatchObject({ version: 7, sessionId: h.session.sessionId, lastUpdateSequence: 0, permissionMode: 'auto', runtime: { type: 'idle' } });
    const turnId = await h.start('plan it', 'client-1');
    const requested = await h.waitFor((e) => e.update.type === 'permission_requested');
    const snap = h.session.snapshot();
    expect(snap.runtime).toMatchObject({
      type: 'running',
      turnId,
      clientRequestId: 'client-1',
      phase: 'waiting_permission',
      draft: { text: '', reasoning: '' },
      toolCalls: [{ providerCallId: 'g', toolName: 'guarded', status: 'waiting_permission' }],
      pendingApprovals: [{ toolCallId: (requested.update as { toolCallId: string }).toolCallId, card: { toolName: 'guarded', decisions: ['allow_once', 'deny', 'allow_for_turn', 'allow_for_session'] } }],
      plan: { explanation: 'why', steps: [{ step: 'one', status: 'in_progress' }, { step: 'two', status: 'pending' }] },
    });
    expect(snap.lastUpdateSequence).toBe(h.updates.at(-1)!.sequence);
    await h.session.resolvePermission(turnId, (requested.update as { toolCallId: string }).toolCallId, 'allow_once');
    await h.waitFor((e) => e.update.type === 'phase_changed' && e.update.phase === 'running_model' && e.sequence > requested.sequence);
    release();
    await h.session.waitForTurn(turnId);
    expect(h.session.snapshot().runtime).toMatchObject({
      type: 'terminal',
      turnId,
      clientRequestId: 'client-1',
      outcome: { status: 'completed', finalText: 'finished' },
      plan: { explanation: 'why' },
    });
    // The plan's updatedAt is the same in the update, the snapshot and the database.
    const planUpdate = h.updates.find((e) => e.update.type === 'plan_updated')!.update as { updatedAt: string };
    const stored = await storage.loadSessionTurnPlans(h.session.sessionId);
    expect(stored[0]!.updatedAt).toBe(planUpdate.updatedAt);
    expect((h.session.snapshot().runtime as { plan: { updatedAt: string } }).plan.updatedAt).toBe(planUpdate.updatedAt);
    expect((await storage.getTurn(turnId))!.planUnfinishedStepCount).toBe(2);
  });

  it('a reloaded session shows the last terminal outcome from storage', async () => {
    const h = await harness(storage, [{ text: 'stored answer' }]);
    const { turnId } = await h.run('remember');
    const sessionId = h.session.sessionId;
    await h.session.shutdown();
    const again = await h.core.loadSession(sessionId);
    expect(again.snapshot().runtime).toMatchObject({ type: 'terminal', turnId, outcome: { status: 'completed', finalText: 'stored answer' } });
    expect(again.acceptedTurn(h.updates[0]!.update.type === 'turn_started' ? (h.updates[0]!.update as { clientRequestId: string }).clientRequestId : '')).toBe(turnId);
  });

  it('every loaded session publishes on the global stream with its own sequences', async () => {
    const h = await harness(storage, [{ text: 'one' }, { text: 'two' }]);
    const seen: SessionUpdateEnvelope[] = [];
    const sub = h.core.updates$.subscribe((e) => seen.push(e));
    const other = await h.core.createSession({ workingDirectory: '/tmp' });
    await h.run('first');
    const { turnId } = await other.startTurn({ clientRequestId: 'x', input: [{ type: 'text', text: 'second' }] });
    await other.waitForTurn(turnId);
    sub.unsubscribe();
    expect(new Set(seen.map((e) => e.sessionId))).toEqual(new Set([h.session.sessionId, other.sessionId]));
    assertSequences(seen);
    expect(seen.filter((e) => e.sessionId === other.sessionId)[0]!.sequence).toBe(1);
  });

  it('a subscriber that throws does not change the turn', async () => {
    const h = await harness(storage, [{ text: 'still fine' }]);
    const errors: unknown[] = [];
    const { config } = await import('rxjs');
    const previous = config.onUnhandledError;
    config.onUnhandledError = (e) => errors.push(e);
    h.session.updates$.subscribe(() => {
      throw new Error('bad host');
    });
    const { outcome } = await h.run('go');
    await new Promise((r) => setTimeout(r, 20)); // RxJS reports subscriber errors on a later macrotask.
    config.onUnhandledError = previous;
    expect(outcome).toEqual({ status: 'completed', finalText: 'still fine' });
    expect(errors.length).toBeGreaterThan(0);
  });

  it('host status: idle, active with waiting_on_approval, system_error when the end of a turn cannot be written', async () => {
    const faulty = faultyStorage(storage);
    const h = await harness(faulty, [{ toolCalls: [{ name: 'guarded', arguments: { action: 'x' } }] }, { text: 'again' }]);
    expect(h.session.status()).toEqual({ type: 'idle' });
    expect(h.core.status('nope')).toEqual({ type: 'not_loaded' });
    const turnId = await h.start('go');
    expect(h.session.status()).toEqual({ type: 'active', activeFlags: [] });
    const requested = await h.waitFor((e) => e.update.type === 'permission_requested');
    expect(h.session.status()).toEqual({ type: 'active', activeFlags: ['waiting_on_approval'] });
    faulty.failOn('finishTurn', 1);
    // A cancelled turn's end is written on its own (a final answer carries its end in its own statement).
    await h.session.cancelTurn(turnId);
    expect(await h.session.waitForTurn(turnId)).toMatchObject({ status: 'cancelled' });
    expect(h.session.status()).toMatchObject({ type: 'system_error' });
    // The next turn writes the end that could not be written, runs, and the status is idle again.
    expect((await h.run('again')).outcome).toEqual({ status: 'completed', finalText: 'again' });
    expect(h.session.status()).toEqual({ type: 'idle' });
    expect((await faulty.getTurn(turnId))?.status).toBe('cancelled');
  });

  it('a stopped session answers actor_stopped', async () => {
    const h = await harness(storage, scriptedModel([]));
    await h.session.shutdown();
    await expect(h.session.startTurn({ clientRequestId: 'late', input: [{ type: 'text', text: 'x' }] })).rejects.toMatchObject({ code: 'actor_stopped' });
    await expect(h.session.cancelTurn('t')).rejects.toMatchObject({ code: 'actor_stopped' });
    expect(h.session.status()).toEqual({ type: 'not_loaded' });
  });
});
