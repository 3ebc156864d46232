/**
 * @module machines/assign
 * `assign` for our charts: xstate's `assign`, with one cost of it removed (issue 14 points 2-3,
 * branch perf-xstate).
 *
 * xstate 5.33's `assign` resolves to `cloneMachineSnapshot(snapshot, { context, children })`, which
 * builds a whole new snapshot through `createMachineSnapshot`: the spread of the old one, then the
 * state value recomputed from the active state nodes (`getStateValue`: a `Set`, two adjacency `Map`s,
 * the value's objects) and a new tags `Set`. An `assign` never changes the active state nodes, so that
 * value and those tags are the ones the snapshot already has, and the intermediate snapshot of an
 * action list is read only for its context by the next action (the microstep makes the snapshot that
 * leaves the interpreter, with its own `_nodes`). A tool step runs about ten of them on the Turn alone.
 *
 * This action is the same `assign` in every other respect: the same arguments to the assigner
 * (`context`, `event`, `self`, `system`, and `params`), the same `Object.assign({}, context, patch)`
 * copy (so the context keeps its shape: machines/turn/context.ts), no effect to execute, so nothing
 * for inspection. It reuses the snapshot's `value` and `tags` and builds the snapshot with the fields
 * of `createMachineSnapshot` in its order, so every snapshot keeps one hidden class.
 *
 * It works through xstate's protocol for its built-in actions (an action function with a `resolve`
 * member is resolved, not executed), which xstate does not document. xstate is pinned to one version
 * (package.json) and test/machines/assign.test.ts holds this action to xstate's `assign` on the
 * snapshots and contexts it makes; it fails if a new version of xstate stops resolving it.
 * `spawn` inside an assigner is not offered (our charts invoke or `spawnChild` instead): an assigner
 * that calls it throws.
 */
import { assign as xstateAssign, type AnyActorScope, type AnyMachineSnapshot, type EventObject } from 'xstate';

type Assignment = ((args: AssignArgs, params: unknown) => object) | Record<string, unknown>;

interface AssignArgs {
  context: unknown;
  event: EventObject;
  spawn: () => never;
  self: AnyActorScope['self'];
  system: AnyActorScope['system'];
}

function noSpawn(): never {
  throw new Error('spawn is not available in this assign (machines/assign.ts): use invoke or spawnChild');
}

/** The next snapshot of an `assign`: the old one with `context` replaced, its value and tags kept. */
function resolveAssign(
  actorScope: AnyActorScope,
  snapshot: AnyMachineSnapshot,
  actionArgs: { event: EventObject },
  actionParams: unknown,
  { assignment }: { assignment: Assignment },
): [AnyMachineSnapshot, undefined, undefined] {
  if (!snapshot.context) {
    throw new Error('Cannot assign to undefined `context`. Ensure that `context` is defined in the machine config.');
  }
  const args: AssignArgs = { context: snapshot.context, event: actionArgs.event, spawn: noSpawn, self: actorScope.self, system: actorScope.system };
  let patch: object;
  if (typeof assignment === 'function') {
    patch = assignment(args, actionParams);
  } else {
    const partial: Record<string, unknown> = {};
    for (const key of Object.keys(assignment)) {
      const value = assignment[key];
      partial[key] = typeof value === 'function' ? (value as (a: AssignArgs, p: unknown) => unknown)(args, actionParams) : value;
    }
    patch = partial;
  }
  const s = snapshot as AnyMachineSnapshot & { _nodes: unknown; historyValue: unknown; getMeta: unknown; toJSON: unknown; can: unknown };
  // The fields and their order of xstate's createMachineSnapshot (one hidden class for every snapshot).
  const next = {
    status: s.status,
    output: s.output,
    error: s.error,
    machine: s.machine,
    context: Object.assign({}, s.context, patch),
    _nodes: s._nodes,
    value: s.value,
    tags: s.tags,
    children: s.children,
    historyValue: s.historyValue || {},
    matches: s.matches,
    hasTag: s.hasTag,
    can: s.can,
    getMeta: s.getMeta,
    toJSON: s.toJSON,
  };
  return [next as unknown as AnyMachineSnapshot, undefined, undefined];
}

/** xstate's `assign`, typed as it is; see the module comment for what it does not recompute. */
export const assign: typeof xstateAssign = ((assignment: Assignment) => {
  function assign(_args: unknown, _params: unknown): never {
    throw new Error("This isn't supposed to be called");
  }
  assign.type = 'xstate.assign';
  assign.assignment = assignment;
  assign.resolve = resolveAssign;
  return assign;
}) as never;
