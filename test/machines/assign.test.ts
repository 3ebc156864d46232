/**
 * Our `assign` (src/machines/assign.ts, branch perf-xstate) against xstate's: the same machine, one
 * with each, driven through the same events, must make the same snapshots (value, tags, context,
 * status, children, and the snapshot's fields in the same order), and the assigners must see the same
 * arguments. It also fails if a new version of xstate stops resolving our action as a built-in one
 * (the context would not change, or xstate would call the action and it throws).
 */
import { describe, expect, it } from 'vitest';
import { assign as xstateAssign, createActor, enqueueActions, setup, type AnyActorRef } from 'xstate';
import { assign as ourAssign } from '../../src/machines/assign.js';

type Ctx = { count: number; log: string[]; nested: { a: number } };
type Ev = { type: 'inc'; by: number } | { type: 'go' } | { type: 'back' } | { type: 'many' };

function machineWith(assign: typeof xstateAssign) {
  return setup({
    types: {} as { context: Ctx; events: Ev },
    actions: {
      bump: assign({ count: ({ context }) => context.count + 1 }),
      note: assign(({ context }, params: { text: string }) => ({ log: [...context.log, params.text] })),
      viaEnqueue: enqueueActions(({ enqueue, context }) => {
        enqueue(assign({ nested: { a: context.nested.a + 10 } }));
      }),
    },
  }).createMachine({
    id: 'probe',
    context: { count: 0, log: [], nested: { a: 0 } },
    initial: 'idle',
    entry: 'bump',
    states: {
      idle: {
        tags: ['resting'],
        on: {
          inc: { actions: assign({ count: ({ context, event }) => context.count + event.by }) },
          go: { target: 'busy.first', actions: [{ type: 'note', params: { text: 'go' } }, 'bump'] },
        },
      },
      busy: {
        tags: ['working'],
        entry: 'viaEnqueue',
        initial: 'first',
        states: {
          first: {
            on: {
              // Three assigns in one transition: each one's context is what the next one reads.
              many: { target: 'second', actions: ['bump', 'bump', { type: 'note', params: ({ context }: { context: Ctx }) => ({ text: `at ${context.count}` }) }] },
            },
          },
          second: { always: { target: '#probe.idle', guard: ({ context }) => context.count > 100 } },
        },
        on: { back: { target: 'idle', actions: assign(({ context, self }) => ({ log: [...context.log, `back from ${(self as AnyActorRef).id}`] })) } },
      },
    },
  });
}

const EVENTS: Ev[] = [{ type: 'inc', by: 2 }, { type: 'go' }, { type: 'many' }, { type: 'back' }, { type: 'inc', by: 200 }, { type: 'go' }, { type: 'many' }];

function run(assign: typeof xstateAssign) {
  const actor = createActor(machineWith(assign), { id: 'probe-actor' }).start();
  const snapshots = [actor.getSnapshot()];
  for (const event of EVENTS) {
    actor.send(event);
    snapshots.push(actor.getSnapshot());
  }
  actor.stop();
  return snapshots;
}

describe('machines/assign', () => {
  it('makes the snapshots xstate`s assign makes, event by event', () => {
    const ours = run(ourAssign);
    const theirs = run(xstateAssign);
    expect(ours.length).toBe(theirs.length);
    for (let i = 0; i < ours.length; i += 1) {
      const [o, t] = [ours[i]!, theirs[i]!];
      expect(Object.keys(o)).toEqual(Object.keys(t));
      expect(o.value).toEqual(t.value);
      expect([...o.tags]).toEqual([...t.tags]);
      expect(o.context).toEqual(t.context);
      expect(Object.keys(o.context)).toEqual(Object.keys(t.context));
      expect(o.status).toBe(t.status);
      expect(Object.keys(o.children)).toEqual(Object.keys(t.children));
      expect(o.historyValue).toEqual(t.historyValue);
      expect(o.hasTag('working')).toBe(t.hasTag('working'));
      expect(o.matches('idle')).toBe(t.matches('idle'));
    }
    // The assigns did run (a protocol change in xstate would leave the context at its start).
    expect(ours.at(-1)!.context).toEqual({ count: 209, log: ['go', 'at 6', 'back from probe-actor', 'go', 'at 209'], nested: { a: 20 } });
    expect(ours.at(-1)!.value).toBe('idle');
  });

  it('is resolved by xstate, never called as an action', () => {
    const action = ourAssign({ count: 1 }) as unknown as (...args: unknown[]) => unknown;
    expect(() => action({}, undefined)).toThrow("This isn't supposed to be called");
    expect((action as unknown as { type: string }).type).toBe('xstate.assign');
  });

  it('refuses spawn inside an assigner', () => {
    const machine = setup({ types: {} as { context: { x: unknown }; events: { type: 'spawn' } } }).createMachine({
      context: { x: null },
      on: { spawn: { actions: ourAssign({ x: ({ spawn }) => (spawn as unknown as () => unknown)() }) } },
    });
    const actor = createActor(machine).start();
    actor.subscribe({ error: () => {} });
    actor.send({ type: 'spawn' });
    expect(actor.getSnapshot().status).toBe('error');
    expect(String(actor.getSnapshot().error)).toMatch(/spawn is not available/);
  });
});
