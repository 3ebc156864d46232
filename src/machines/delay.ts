/**
 * @module machines/delay
 * One wait as a statechart: `waiting` ends by its `after` delay (`elapsed`) or by a `delay.wake`
 * event (`woken`). The services' waits (a sleep between summary attempts, a summary attempt's time
 * limit, `wait_agent` until a message arrives) run this chart instead of calling `setTimeout`, so
 * the delay is a transition the chart owns and the clock it is measured on is the one the actor was
 * created with (`createActor(delayMachine, { clock })`; a test passes xstate's `SimulatedClock`).
 */
import { assign, setup } from 'xstate';

/** How long to wait, in milliseconds of the actor's clock. */
export interface DelayInput {
  ms: number;
}

/** How the wait ended. */
export type DelayEnd = 'elapsed' | 'woken';

export const delayMachine = setup({
  types: {
    input: {} as DelayInput,
    context: {} as { ms: number; end: DelayEnd | null },
    events: {} as { type: 'delay.wake' },
    output: {} as DelayEnd,
  },
  delays: { limit: ({ context }) => context.ms },
}).createMachine({
  id: 'delay',
  context: ({ input }) => ({ ms: input.ms, end: null }),
  initial: 'waiting',
  states: {
    waiting: {
      after: { limit: { target: 'elapsed', actions: assign({ end: 'elapsed' }) } },
      on: { 'delay.wake': { target: 'woken', actions: assign({ end: 'woken' }) } },
    },
    elapsed: { type: 'final' },
    woken: { type: 'final' },
  },
  output: ({ context }) => context.end!,
});
