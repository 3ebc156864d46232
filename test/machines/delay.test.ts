/**
 * The delay chart (issue 19 point 1): waits are `after` transitions measured on an injected clock.
 * Driven by xstate's `SimulatedClock`, directly and through the two services that wait on it
 * (`sleep`, used between summary attempts, and `MailboxSignal.wait`, behind `wait_agent`).
 */
import { describe, expect, it } from 'vitest';
import { createActor, SimulatedClock } from 'xstate';
import { delayMachine } from '../../src/machines/delay.js';
import { sleep, startWait } from '../../src/services/abortable.js';
import { MailboxSignal } from '../../src/services/agents/signal.js';

/** Lets promise callbacks run (the waits settle in microtasks after the clock moves). */
const settled = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('delay chart', () => {
  it('elapses by its after transition only when the simulated clock reaches the delay', () => {
    const clock = new SimulatedClock();
    const actor = createActor(delayMachine, { input: { ms: 10_000 }, clock }).start();
    clock.increment(9_999);
    expect(actor.getSnapshot().value).toBe('waiting');
    clock.increment(1);
    expect(actor.getSnapshot().value).toBe('elapsed');
    expect(actor.getSnapshot().output).toBe('elapsed');
  });

  it('a wake event ends it early, and the delay no longer fires', () => {
    const clock = new SimulatedClock();
    const actor = createActor(delayMachine, { input: { ms: 5_000 }, clock }).start();
    actor.send({ type: 'delay.wake' });
    expect(actor.getSnapshot().output).toBe('woken');
    clock.increment(10_000);
    expect(actor.getSnapshot().value).toBe('woken');
  });
});

describe('waits on an injected clock', () => {
  it('sleep resolves when the simulated clock passes the delay, not before', async () => {
    const clock = new SimulatedClock();
    let done = false;
    void sleep(3_000, undefined, clock).then(() => (done = true));
    clock.increment(2_999);
    await settled();
    expect(done).toBe(false);
    clock.increment(1);
    await settled();
    expect(done).toBe(true);
  });

  it('sleep rejects with the abort reason at once, and a later tick does nothing', async () => {
    const clock = new SimulatedClock();
    const controller = new AbortController();
    const slept = sleep(3_000, controller.signal, clock);
    const reason = new Error('stop now');
    controller.abort(reason);
    await expect(slept).rejects.toBe(reason);
    clock.increment(5_000);
  });

  it('a cancelled wait never settles', async () => {
    const clock = new SimulatedClock();
    const wait = startWait(1_000, clock);
    let settledWith: unknown = 'nothing';
    wait.ended.then((end) => (settledWith = end));
    wait.cancel();
    clock.increment(2_000);
    await settled();
    expect(settledWith).toBe('nothing');
  });

  it('wait_agent: times out on the simulated clock, and a delivery wakes a wait early', async () => {
    const clock = new SimulatedClock();
    const mailbox = new MailboxSignal(clock);
    const signal = new AbortController().signal;
    const timedOut = mailbox.wait('s1', 10_000, signal);
    let first: boolean | null = null;
    void timedOut.then((value) => (first = value));
    clock.increment(9_000);
    await settled();
    expect(first).toBe(null);
    clock.increment(1_000);
    expect(await timedOut).toBe(false);

    const woken = mailbox.wait('s1', 10_000, signal);
    mailbox.delivered('s1');
    expect(await woken).toBe(true);
    // A message is waiting now: the next wait answers at once without a timer.
    expect(await mailbox.wait('s1', 10_000, signal)).toBe(true);
  });
});
