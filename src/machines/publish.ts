/**
 * @module machines/publish
 * How a Turn or a tool-call machine hands its updates to the Session (issue 14 point 3): the
 * updates one macrostep of one actor announces (say `draft_cleared`, `phase_changed` and
 * `tool_call_started` after an answer is stored) go as ONE `session.publish` event carrying them in
 * the order the chart announced them. The Session still sequences and emits every update on its
 * own (machines/session/machine.ts, actions `sequence` and `published`), so what a host sees is unchanged; the Session takes
 * one macrostep for them instead of one each.
 *
 * The chart decides every update where it did before (each action that announces one calls
 * `batchUpdate`); only the carrying is grouped. The first update of a macrostep creates the batch
 * and the caller sends it (a deferred `sendParent`/`sendTo`, so it still leaves after the macrostep,
 * at the place of that first update among the actor's effects); the macrostep's later updates join
 * it before it leaves, because XState runs a macrostep's deferred effects only after every action
 * of the macrostep was resolved.
 *
 * A macrostep is told apart by the event it processes (XState gives every microstep of a
 * macrostep, its eventless transitions included, that same event object) together with the
 * snapshot it started from (what `self.getSnapshot()` answers while it resolves). An event object
 * sent twice (a static `sendTo` event) starts a new batch unless the macrostep between changed
 * nothing at all, and such a macrostep announces nothing in these machines.
 */
import type { AnyActorRef, EventObject } from 'xstate';
import type { SessionUpdate } from '../protocol/updates.js';

/** What a Turn or tool-call machine sends the Session: its updates of one macrostep, in order. */
export interface PublishEvent {
  type: 'session.publish';
  updates: SessionUpdate[];
}

interface OpenBatch {
  event: EventObject;
  snapshot: unknown;
  updates: SessionUpdate[];
}

// Keyed by the announcing actor, so that a batch goes away with its actor.
const openBatches = new WeakMap<AnyActorRef, OpenBatch>();
// The batches the Session has taken: nothing joins them any more, whatever the key says (a model
// of the charts that steps the same snapshot with the same event object twice relies on it).
const taken = new WeakSet<SessionUpdate[]>();

/** What the actor's macrostep started from; nothing yet while its initial state is entered. */
function snapshotOf(self: AnyActorRef): unknown {
  try {
    return self.getSnapshot();
  } catch {
    // XState refuses to read the snapshot of an actor that is still computing its initial state.
    return undefined;
  }
}

/**
 * Adds `update` to the batch of the macrostep that processes `event` in `self`. Returns the batch's
 * event when `update` opens it (the caller sends it, once), or null when it joined the batch that
 * an earlier action of this macrostep already sends.
 */
export function batchUpdate(self: AnyActorRef, event: EventObject, update: SessionUpdate): PublishEvent | null {
  const snapshot = snapshotOf(self);
  const open = openBatches.get(self);
  if (open !== undefined && open.event === event && open.snapshot === snapshot && !taken.has(open.updates)) {
    open.updates.push(update);
    return null;
  }
  const updates = [update];
  openBatches.set(self, { event, snapshot, updates });
  return { type: 'session.publish', updates };
}

/** The updates of a `session.publish`, as the Session takes them: the batch is closed from now on. */
export function takeUpdates(event: PublishEvent): readonly SessionUpdate[] {
  taken.add(event.updates);
  return event.updates;
}

/** Announces `update` to the parent (the Turn's parent is the Session): `batchUpdate`, then the send. */
export function announceToParent(enqueue: { sendParent(event: PublishEvent): void }, self: AnyActorRef, event: EventObject, update: SessionUpdate): void {
  const batch = batchUpdate(self, event, update);
  if (batch !== null) enqueue.sendParent(batch);
}
