/**
 * @module services/crashed-turn
 * The effect of the Session's `ending_crashed_turn` (attack round 3): the end of a turn whose actor
 * failed. XState does not stop the children of a machine that fails (its own comment: they "are
 * being stopped within the machine's transition but that could throw and leave us with orphaned
 * active actors"), so the failed Turn's model call, tool run or tool-call machine would go on: a
 * bash command kept running, a model call was still sent. They are stopped here first, as leaving
 * the state that invoked them would have (integrity-paths; machines/orphans.ts). No actor of that turn is left to end the
 * spans its calls opened, so they end here as `outcome_unknown` with `actor_stopped`; then the end
 * is written by the Turn's own `finishTurn` logic, run as an actor of its own, so that its
 * bookkeeping holds (an end the database refuses is kept and written by the session's next start,
 * as for any turn).
 */
import { createActor, fromPromise, toPromise, type AnyActorRef, type PromiseActorLogic } from 'xstate';
import { stopOrphanActors } from '../machines/orphans.js';
import type { FinishInput } from '../machines/turn/ports.js';
import type { OpenSpans } from './trace/open-spans.js';

/** The crashed turn's end, and the actors its failed Turn left running. */
export interface CrashedTurnInput extends FinishInput {
  orphans?: readonly AnyActorRef[];
}

export function finishCrashedTurnActor(spans: OpenSpans, finishTurn: PromiseActorLogic<boolean, FinishInput>) {
  return fromPromise<boolean, CrashedTurnInput>(({ input }) => {
    const { orphans = [], ...end } = input;
    stopOrphanActors(orphans);
    // A reserved call whose span is open was sent before the actor failed: it was made, not taken back.
    const made = end.unmadeModelCall > 0 && spans.hasOpen(end.turnId, (span) => span.kind === 'model_call' && span.attributes?.modelCallIndex === end.unmadeModelCall);
    spans.endTurn(end.turnId, { status: 'outcome_unknown', errorCode: 'actor_stopped' });
    return toPromise(createActor(finishTurn, { input: made ? { ...end, unmadeModelCall: 0 } : end }).start());
  });
}
