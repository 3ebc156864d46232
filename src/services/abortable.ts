/**
 * @module services/abortable
 * Waiting on an injected clock that an AbortSignal ends at once, with the signal's reason. Every
 * wait runs the delay chart (`machines/delay.ts`): the delay is its `after` transition, measured on
 * the clock the chart's actor is created with.
 */
import { createActor } from 'xstate';
import { delayMachine, type DelayEnd } from '../machines/delay.js';

/**
 * The timers a wait is measured on: xstate's `Clock` (`SimulatedClock` in a test), which is also
 * the shape of the global `setTimeout` / `clearTimeout` pair.
 */
export interface Timers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** The global timers, looked up when called so that test fake timers installed later apply. */
export const globalTimers: Timers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/** A running wait: `ended` settles when it elapses or is woken, and rejects with an abort's reason. */
export interface Wait {
  readonly ended: Promise<DelayEnd>;
  /** Ends the wait early as `woken` (no effect once it ended). */
  wake(): void;
  /** Stops the wait; `ended` stays unsettled (the caller has moved on). */
  cancel(): void;
}

/** Starts a wait of `ms` on `timers`, which `signal` aborts with its reason. */
export function startWait(ms: number, timers: Timers = globalTimers, signal?: AbortSignal): Wait {
  const actor = createActor(delayMachine, { input: { ms }, clock: timers });
  let settle: { resolve(end: DelayEnd): void; reject(reason: unknown): void } | null = null;
  const ended = new Promise<DelayEnd>((resolve, reject) => (settle = { resolve, reject }));
  const release = () => {
    settle = null;
    subscription.unsubscribe();
    signal?.removeEventListener('abort', onAbort);
    actor.stop();
  };
  const finish = (end: DelayEnd | { reason: unknown }) => {
    const pending = settle;
    if (!pending) return;
    release();
    if (typeof end === 'string') pending.resolve(end);
    else pending.reject(end.reason);
  };
  const onAbort = () => finish({ reason: signal!.reason });
  const subscription = actor.subscribe((snapshot) => {
    if (snapshot.status === 'done') finish(snapshot.output!);
  });
  if (signal?.aborted) {
    finish({ reason: signal.reason });
  } else {
    signal?.addEventListener('abort', onAbort, { once: true });
    actor.start();
  }
  return {
    ended,
    wake: () => {
      if (settle) actor.send({ type: 'delay.wake' });
    },
    cancel: () => {
      if (settle) release();
    },
  };
}

/** Resolves after `ms`, or rejects with `signal.reason` as soon as the signal aborts. */
export async function sleep(ms: number, signal?: AbortSignal, timers: Timers = globalTimers): Promise<void> {
  await startWait(ms, timers, signal).ended;
}
