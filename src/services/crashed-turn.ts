/**
 * @module services/crashed-turn
 * The effect of the Session's `ending_crashed_turn` (attack round 3): the end of a turn whose actor
 * failed. No actor of that turn is left to end the spans its calls opened, so they end here as
 * `outcome_unknown` with `actor_stopped`; then the end is written by the Turn's own `finishTurn`
 * logic, run as an actor of its own, so that its bookkeeping holds (an end the database refuses is
 * kept and written by the session's next start, as for any turn).
 */
import { createActor, fromPromise, toPromise, type PromiseActorLogic } from 'xstate';
import type { FinishInput } from '../machines/turn/ports.js';
import type { OpenSpans } from './trace/open-spans.js';

export function finishCrashedTurnActor(spans: OpenSpans, finishTurn: PromiseActorLogic<boolean, FinishInput>) {
  return fromPromise<boolean, FinishInput>(({ input }) => {
    spans.endTurn(input.turnId, { status: 'outcome_unknown', errorCode: 'actor_stopped' });
    return toPromise(createActor(finishTurn, { input }).start());
  });
}
