/**
 * `createCore({ plan: true, conversationHistory: true, agents: true, inspect })` reaches every actor of every session, and the actor tracker turns the
 * inspection events into a small, JSON-safe actor tree per session with its transitions.
 */
import { describe, expect, it } from 'vitest';
import type { AnyActorRef, InspectionEvent } from 'xstate';
import { createActorTracker, type TrackedActor, type TrackerChange } from '../../../src/inspector/server/actor-tracker.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { harness } from '../../support/harness.js';
import { usePglite } from '../../support/databases.js';

function byActorId(actors: TrackedActor[], actorId: string): TrackedActor[] {
  return actors.filter((a) => a.actorId === actorId);
}

describe('inspection of sessions', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  it('the inspect observer sees @xstate.actor events of the session, turn and tool-call actors, and their effects', async () => {
    const events: InspectionEvent[] = [];
    // An echo runs as the Turn's own actors; the plan update (a control tool) gets a tool-call machine.
    const plan = { explanation: 'why', plan: [{ step: 'one', status: 'in_progress' }] };
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'a' } }] }, { toolCalls: [{ name: 'update_plan', arguments: plan }] }, { text: 'done' }], {
      inspect: (e) => events.push(e),
    });
    await h.run('go');
    const created = events
      .filter((e) => e.type === '@xstate.actor')
      .map((e) => {
        const ref = e.actorRef as AnyActorRef & { logic: { config?: { id?: string }; root?: unknown } };
        const machine = ref.logic.root !== undefined && typeof ref.logic.config?.id === 'string' ? ref.logic.config.id : null;
        return { id: ref.id, machine, parent: ref._parent?.id ?? null };
      });
    expect(created.filter((c) => c.machine !== null)).toEqual([
      { id: `session:${h.session.sessionId}`, machine: 'session', parent: null },
      { id: 'turn', machine: 'turn', parent: `session:${h.session.sessionId}` },
      { id: 'toolCall', machine: 'toolCall', parent: 'turn' },
    ]);
    // Every invoked effect is an actor of the same system too.
    expect(new Set(created.filter((c) => c.machine === null).map((c) => c.id))).toEqual(
      new Set(['beginTurn', 'effects', 'commitPlan', 'finishTurn']),
    );
    // The model calls and the echo's run (and the plan update's validation) are slots of the Turn's
    // one effects actor: no actor of their own; the tool-call machine runs only the plan's commit.
    expect(created.filter((c) => ['effects', 'callModel', 'run', 'execute', 'record'].includes(c.id)).map((c) => `${c.id}<${c.parent}`)).toEqual(['effects<turn']);
    expect(created.find((c) => c.id === 'commitPlan')!.parent).toBe('toolCall');
    const snapshots = events.filter((e) => e.type === '@xstate.snapshot').map((e) => (e.actorRef as AnyActorRef).id);
    expect(snapshots).toContain('toolCall');
    expect(snapshots).toContain('turn');
  });

  it('keeps the live tree of a session: Session → Turn → tool call, with state values and small fields', async () => {
    const tracker = createActorTracker();
    const h = await harness(storage, [{ toolCalls: [{ name: 'guarded', arguments: { action: 'x' }, callId: 'g1' }] }, { text: 'ok' }], {
      inspect: tracker.inspect,
    });
    const turnId = await h.start('go');
    const requested = await h.waitFor((e) => e.update.type === 'permission_requested');
    const live = tracker.actors(h.session.sessionId).filter((a) => a.status === 'active');
    const [session] = byActorId(live, `session:${h.session.sessionId}`);
    const [turn] = byActorId(live, 'turn');
    const [toolCall] = byActorId(live, 'toolCall');
    // The Turn's effects actor (its model calls and the calls it runs itself) lives as long as the turn.
    expect(live.map((a) => a.actorId)).toEqual([`session:${h.session.sessionId}`, 'turn', 'effects', 'toolCall']);
    expect(byActorId(live, 'effects')[0]).toMatchObject({ parentKey: turn!.key, src: 'turnEffects' });
    expect(session).toMatchObject({ parentKey: null, machine: 'session', systemId: 'session', value: 'active', status: 'active', sessionId: h.session.sessionId });
    expect(session!.fields).toMatchObject({ sessionId: h.session.sessionId, permissionMode: 'auto', sequence: requested.sequence });
    expect(turn).toMatchObject({ parentKey: session!.key, machine: 'turn', src: 'turn', systemId: null, value: { tools: { call: 'waiting_permission' } } });
    expect(turn!.fields).toMatchObject({ turnId, phase: 'waiting_permission', toolCallCount: 1 });
    expect(toolCall).toMatchObject({ parentKey: turn!.key, machine: 'toolCall', value: 'waiting_permission' });
    // Only short primitives leave the tracker: the whole tree is plain JSON.
    for (const actor of tracker.actors()) {
      expect(JSON.parse(JSON.stringify(actor))).toEqual(actor);
      for (const value of Object.values(actor.fields)) expect(['string', 'number', 'boolean'].includes(typeof value) || value === null).toBe(true);
    }
    await h.session.resolvePermission(turnId, (requested.update as { toolCallId: string }).toolCallId, 'allow_once');
    await h.session.waitForTurn(turnId);
    const after = tracker.actors(h.session.sessionId);
    expect(byActorId(after, 'turn')[0]).toMatchObject({ status: 'done', value: 'completed' });
    expect(byActorId(after, `session:${h.session.sessionId}`)[0]).toMatchObject({ status: 'active', value: 'idle' });
  });

  it('reports each phase change of the Turn as a transition with the event that caused it', async () => {
    const tracker = createActorTracker();
    const changes: TrackerChange[] = [];
    tracker.changes$.subscribe((c) => changes.push(c));
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'a' } }] }, { text: 'done' }], { inspect: tracker.inspect });
    await h.run('go');
    const turnMoves = tracker
      .transitions(h.session.sessionId)
      .filter((t) => t.actorId === 'turn')
      .map((t) => [t.from, t.to, t.event]);
    // The model actor samples World State in `sampling`. The turn's first fact reserved the call, so
    // it has no counters to write: it assembles its request and reports it with its sampling, and the
    // Turn goes from `sampling` to `receiving` on that one event (`requesting` shows a call's own write).
    expect(turnMoves.slice(0, 3)).toEqual([
      [null, 'starting', 'xstate.init'],
      ['starting', { running_model: { streaming: 'sampling' } }, 'xstate.done.actor.beginTurn'],
      [{ running_model: { streaming: 'sampling' } }, { running_model: { streaming: 'receiving' } }, 'model.call_recorded'],
    ]);
    expect(turnMoves.filter((m) => m[2] === 'model.sampled')).toEqual([]);
    // The model actor that streamed stores the answer too: `persisting` is a state of `streaming`.
    expect(turnMoves).toContainEqual([{ running_model: { streaming: 'receiving' } }, { running_model: { streaming: 'persisting' } }, 'model.completed']);
    expect(turnMoves).toContainEqual([{ running_model: { streaming: 'persisting' } }, { tools: { run: 'validating' } }, 'model.persisted']);
    expect(turnMoves).toContainEqual([{ tools: { run: 'authorizing' } }, { tools: { run: { executing: 'running' } } }, 'tool.authorized']);
    expect(turnMoves).toContainEqual([{ tools: { run: { executing: 'running' } } }, { tools: { run: 'recording' } }, 'tool.finished']);
    expect(turnMoves).toContainEqual([{ tools: { run: 'recording' } }, { running_model: { streaming: 'sampling' } }, 'tool.recorded']);
    expect(turnMoves.at(-1)).toEqual(['ending', 'completed', 'xstate.done.actor.finishTurn']);
    // The phase field follows the chart, and every change was published in order.
    const phases = changes
      .filter((c): c is Extract<TrackerChange, { type: 'actor' }> => c.type === 'actor' && c.actor.actorId === 'turn')
      .map((c) => c.actor.fields.phase)
      .filter((p, i, all) => p !== undefined && p !== all[i - 1]);
    expect(phases).toEqual(['starting', 'running_model', 'running_tools', 'running_model', 'completed']);
  });

  it('keeps the actors of two sessions apart, each under its own session id', async () => {
    const tracker = createActorTracker();
    const a = await harness(storage, [{ text: 'one' }], { inspect: tracker.inspect });
    const b = await a.core.createSession({ workingDirectory: process.cwd() });
    a.model.push({ text: 'two' });
    await a.run('first');
    const { turnId } = await b.startTurn({ clientRequestId: 'b-1', input: [{ type: 'text', text: 'second' }] });
    await b.waitForTurn(turnId);
    expect(new Set(tracker.sessions())).toEqual(new Set([a.session.sessionId, b.sessionId]));
    const actorsA = tracker.actors(a.session.sessionId);
    const actorsB = tracker.actors(b.sessionId);
    expect(actorsA[0]).toMatchObject({ actorId: `session:${a.session.sessionId}`, parentKey: null });
    expect(actorsB[0]).toMatchObject({ actorId: `session:${b.sessionId}`, parentKey: null });
    expect(actorsA.every((x) => x.sessionId === a.session.sessionId && x.key.startsWith(`${a.session.sessionId}/`))).toBe(true);
    expect(actorsB.every((x) => x.sessionId === b.sessionId && x.key.startsWith(`${b.sessionId}/`))).toBe(true);
    expect(byActorId(actorsB, 'turn')[0]!.parentKey).toBe(actorsB[0]!.key);
  });

  it('prunes finished actors beyond keepFinished but keeps the tree connected', async () => {
    const tracker = createActorTracker({ keepFinished: 1 });
    const removed: string[] = [];
    tracker.changes$.subscribe((c) => {
      if (c.type === 'actor_removed') removed.push(c.key);
    });
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'a' } }] }, { text: 'done' }], { inspect: tracker.inspect });
    await h.run('go');
    const kept = tracker.actors(h.session.sessionId);
    // Four finished (the Turn, its begin, its effects actor, which made both model calls and ran
    // the call, and the end): three pruned past the one kept.
    expect(removed.length).toBeGreaterThanOrEqual(3);
    expect(kept.filter((a) => a.status !== 'active').length).toBeLessThanOrEqual(1);
    const keys = new Set(kept.map((a) => a.key));
    for (const actor of kept) if (actor.parentKey !== null) expect(keys.has(actor.parentKey)).toBe(true);
  });

  it('never throws into the actors: a failure inside the tracker goes to onError', () => {
    const failures: unknown[] = [];
    const tracker = createActorTracker({ onError: (e) => failures.push(e) });
    const broken = {
      type: '@xstate.actor',
      rootId: 'x:0',
      actorRef: {
        get id(): string {
          throw new Error('boom');
        },
        _parent: undefined,
        system: {},
        sessionId: 'x:0',
      },
    } as unknown as InspectionEvent;
    expect(() => tracker.inspect.next?.(broken)).not.toThrow();
    expect(failures).toHaveLength(1);
    tracker.complete();
    expect(() => tracker.inspect.next?.(broken)).not.toThrow();
    expect(failures).toHaveLength(1);
  });
});
