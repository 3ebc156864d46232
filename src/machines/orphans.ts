/**
 * @module machines/orphans
 * The actors a failed machine leaves running. XState v5 does not stop the children of an actor
 * whose transition threw (its own comment in `Actor._stopProcedure`: children "are being stopped
 * within the machine's transition but that could throw and leave us with orphaned active actors").
 * A failed Turn's model call or tool run, or a failed tool-call machine's tool, would go on: a bash
 * command kept running, a model call was still sent. The machine that catches the failure (the
 * Session for a Turn, the Turn for a tool-call machine) reads the failed actor's children from its
 * last snapshot and stops them with `stopOrphans`, as leaving the state that invoked them would have.
 */
import { fromCallback, type AnyActorRef, type EventObject } from 'xstate';

/** The children of a failed actor, from its last snapshot (which keeps the children it had). */
export function orphansOf(failed: AnyActorRef | undefined): AnyActorRef[] {
  const snapshot = failed?.getSnapshot() as { children?: Record<string, AnyActorRef | undefined> } | undefined;
  return Object.values(snapshot?.children ?? {}).filter((ref): ref is AnyActorRef => ref !== undefined);
}

/**
 * Stops actors whose parent failed: xstate's internal `_stop`, which its `stopChild` action calls
 * (a child's own `stop()` refuses a non-root actor). A machine stopped so stops its own children.
 */
export function stopOrphanActors(orphans: readonly AnyActorRef[]): void {
  for (const ref of orphans) (ref as unknown as { _stop?: () => void })._stop?.();
}

/** The effect as an actor a chart invokes: it stops the orphans as it starts, and does nothing after. */
export const stopOrphans = fromCallback<EventObject, { orphans: readonly AnyActorRef[] }>(({ input }) => {
  stopOrphanActors(input.orphans);
});
