/**
 * Our `enqueueActions` (src/machines/enqueue.ts, branch perf-xstate) against xstate's: the same
 * machines, one with each, driven through the same events, must reach the same snapshots and send,
 * emit and raise the same events in the same order, nested `enqueueActions` included. It also fails
 * if a new version of xstate stops resolving our action as a built-in one.
 */
import { describe, expect, it } from 'vitest';
import { createActor, enqueueActions as xstateEnqueueActions, fromCallback, setup, type AnyEventObject } from 'xstate';
import { assign } from '../../src/machines/assign.js';
import { enqueueActions as ourEnqueueActions } from '../../src/machines/enqueue.js';

type Ctx = { n: number; seen: string[] };
type Ev = { type: 'ping'; by: number } | { type: 'raised' } | { type: 'echo'; text: string } | { type: 'go' };

function machineWith(enqueueActions: typeof xstateEnqueueActions, received: AnyEventObject[]) {
  const child = fromCallback<AnyEventObject>(({ receive, sendBack }) => {
    receive((event) => {
      received.push(event);
      if (event.type === 'ask') sendBack({ type: 'echo', text: `echo ${String(event.n)}` });
    });
  });
  return setup({
    types: {} as { context: Ctx; events: Ev; emitted: { type: 'out'; n: number } },
    actors: { child },
    actions: {
      // Nested: an enqueueActions that enqueues another, which enqueues an assign.
      inner: enqueueActions(({ enqueue, context }) => {
        enqueue.assign({ seen: [...context.seen, 'inner'] });
      }),
      outer: enqueueActions(({ enqueue, context, event }) => {
        if (event.type !== 'ping') return;
        enqueue.assign({ n: context.n + event.by });
        enqueue('inner' as never);
        enqueue.emit({ type: 'out', n: context.n + event.by });
        enqueue.sendTo('kid', { type: 'ask', n: context.n + event.by });
        if (context.n + event.by > 3) enqueue.raise({ type: 'raised' });
      }),
    },
  }).createMachine({
    context: { n: 0, seen: [] },
    invoke: { id: 'kid', src: 'child' },
    initial: 'a',
    states: {
      a: {
        on: {
          ping: { actions: 'outer' },
          raised: { target: 'b', actions: assign(({ context }) => ({ seen: [...context.seen, 'raised'] })) },
          echo: { actions: assign(({ context, event }) => ({ seen: [...context.seen, event.text] })) },
        },
      },
      b: {
        entry: enqueueActions(({ enqueue, context }) => enqueue.assign({ seen: [...context.seen, `b at ${context.n}`] })),
        on: { go: 'a' },
      },
    },
  });
}

const EVENTS: Ev[] = [{ type: 'ping', by: 1 }, { type: 'ping', by: 2 }, { type: 'go' }, { type: 'ping', by: 5 }];

function run(enqueueActions: typeof xstateEnqueueActions) {
  const received: AnyEventObject[] = [];
  const actor = createActor(machineWith(enqueueActions, received)).start();
  const emitted: unknown[] = [];
  actor.on('out', (e) => void emitted.push(e));
  const trace: unknown[] = [];
  for (const event of EVENTS) {
    actor.send(event);
    const s = actor.getSnapshot();
    trace.push({ value: s.value, context: s.context, keys: Object.keys(s) });
  }
  actor.stop();
  return { trace, emitted, received };
}

describe('machines/enqueue', () => {
  it('resolves, sends, emits and raises what xstate`s enqueueActions does, in the same order', () => {
    const ours = run(ourEnqueueActions);
    const theirs = run(xstateEnqueueActions);
    expect(ours).toEqual(theirs);
    // The actions did run (a protocol change in xstate would leave the context at its start).
    expect(ours.trace.at(-1)).toMatchObject({ value: 'b', context: { n: 8 } });
    expect(ours.emitted).toEqual([{ type: 'out', n: 1 }, { type: 'out', n: 3 }, { type: 'out', n: 8 }]);
    expect(ours.received.map((e) => e.n)).toEqual([1, 3, 8]);
  });

  it('refuses an enqueue after its action was resolved, and check', () => {
    let kept: ((action: never) => void) | null = null;
    const machine = setup({ types: {} as { events: { type: 'keep' } | { type: 'check' } } }).createMachine({
      on: {
        keep: { actions: ourEnqueueActions(({ enqueue }) => void (kept = enqueue as never)) },
        check: { actions: ourEnqueueActions(({ check }) => void check(() => true)) },
      },
    });
    const actor = createActor(machine).start();
    actor.send({ type: 'keep' });
    expect(() => kept!('anything' as never)).toThrow(/after its enqueueActions action was resolved/);
    actor.subscribe({ error: () => {} });
    actor.send({ type: 'check' });
    expect(String(actor.getSnapshot().error)).toMatch(/check is not available/);
  });
});
