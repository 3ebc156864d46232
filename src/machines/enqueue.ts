/**
 * @module machines/enqueue
 * `enqueueActions` for our charts: xstate's, without the closures it builds at every call (issue 14
 * points 2-3, branch perf-xstate).
 *
 * xstate 5.33 resolves an `enqueueActions` action by building, at each call, an `enqueue` function
 * with eight arrow functions attached (`assign`, `sendTo`, `sendParent`, `emit`, ...) and a `check`
 * closure, about 1 kB a call; a Turn tool step runs seven of them (`enterPhase`, `stopEffect`, `emit`,
 * `announceDirectFinished`, ...), the largest allocation site of the interpreter after its `Set`s.
 * Here one `enqueue`, with its methods, serves every call: while a collect function runs it adds to
 * that call's list, and the list is handed to xstate exactly as xstate's own resolution hands it (the
 * actions are then resolved in order, after the collect function returned). Calling `enqueue` after
 * its collect function returned throws, where xstate's would have added to a list nobody reads.
 *
 * The enqueued actions are xstate's action creators, except `assign`, which is ours
 * (machines/assign.ts). `check` is not offered (our collect functions decide with plain code): a
 * collect function that calls it throws. Like machines/assign.ts this works through xstate's
 * undocumented protocol for built-in actions (`resolve`); test/machines/enqueue.test.ts holds it to
 * xstate's `enqueueActions`.
 */
import {
  cancel,
  emit,
  enqueueActions as xstateEnqueueActions,
  raise,
  sendParent,
  sendTo,
  spawnChild,
  stopChild,
  type AnyActorScope,
  type AnyMachineSnapshot,
  type EventObject,
} from 'xstate';
import { assign } from './assign.js';

type Creator = (...args: never[]) => unknown;

/** The list of the collect function running now; null between calls. */
let current: unknown[] | null = null;

function listOrThrow(): unknown[] {
  if (current === null) throw new Error('enqueue was called after its enqueueActions action was resolved (machines/enqueue.ts)');
  return current;
}

const via =
  (creator: Creator) =>
  (...args: unknown[]): void => {
    listOrThrow().push((creator as (...a: unknown[]) => unknown)(...args));
  };

/** The one `enqueue` every call gets: `enqueue(action)` and its methods add to the running call's list. */
const enqueue = Object.assign((action: unknown): void => void listOrThrow().push(action), {
  assign: via(assign as unknown as Creator),
  cancel: via(cancel as unknown as Creator),
  raise: via(raise as unknown as Creator),
  sendTo: via(sendTo as unknown as Creator),
  sendParent: via(sendParent as unknown as Creator),
  spawnChild: via(spawnChild as unknown as Creator),
  stopChild: via(stopChild as unknown as Creator),
  emit: via(emit as unknown as Creator),
});

function noCheck(): never {
  throw new Error('check is not available in this enqueueActions (machines/enqueue.ts): decide with the context and event');
}

type Collect = (args: { context: unknown; event: EventObject; enqueue: typeof enqueue; check: () => never; self: unknown; system: unknown }, params: unknown) => void;

function resolveEnqueueActions(
  actorScope: AnyActorScope,
  snapshot: AnyMachineSnapshot,
  args: { context: unknown; event: EventObject },
  actionParams: unknown,
  { collect }: { collect: Collect },
): [AnyMachineSnapshot, undefined, unknown[]] {
  const actions: unknown[] = [];
  const outer = current;
  current = actions;
  try {
    collect({ context: args.context, event: args.event, enqueue, check: noCheck, self: actorScope.self, system: actorScope.system }, actionParams);
  } finally {
    current = outer;
  }
  return [snapshot, undefined, actions];
}

/** xstate's `enqueueActions`, typed as it is; see the module comment for what it does not build. */
export const enqueueActions: typeof xstateEnqueueActions = ((collect: Collect) => {
  function enqueueActions(_args: unknown, _params: unknown): never {
    throw new Error("This isn't supposed to be called");
  }
  enqueueActions.type = 'xstate.enqueueActions';
  enqueueActions.collect = collect;
  enqueueActions.resolve = resolveEnqueueActions;
  return enqueueActions;
}) as never;
