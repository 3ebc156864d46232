/**
 * @module services/agents/signal
 * Which sessions have agent messages waiting (delivered, not yet drained into the conversation),
 * so that `wait_agent` returns at once when one is already there and wakes when one arrives.
 */

import { globalTimers, startWait, type Timers } from '../abortable.js';

// The timers' shape lives with the waits now; this keeps the old import path working.
export type { Timers } from '../abortable.js';

export class MailboxSignal {
  private readonly pending = new Map<string, number>();
  private readonly waiters = new Map<string, Set<() => void>>();

  /** `timers` is injected so that tests can run wait_agent's 10 s minimum fast. */
  constructor(private readonly timers: Timers = globalTimers) {}

  /** A message entered the session's mailbox. */
  delivered(sessionId: string): void {
    this.pending.set(sessionId, (this.pending.get(sessionId) ?? 0) + 1);
    for (const wake of this.waiters.get(sessionId) ?? []) wake();
  }

  /** Messages left the mailbox for the conversation. */
  drained(sessionId: string, count: number): void {
    const left = Math.max(0, (this.pending.get(sessionId) ?? 0) - count);
    if (left === 0) this.pending.delete(sessionId);
    else this.pending.set(sessionId, left);
  }

  count(sessionId: string): number {
    return this.pending.get(sessionId) ?? 0;
  }

  /** Resolves true when a message is (or becomes) waiting, false after `timeoutMs`; rejects on abort. */
  wait(sessionId: string, timeoutMs: number, signal: AbortSignal): Promise<boolean> {
    if (this.count(sessionId) > 0) return Promise.resolve(true);
    // The timeout is the delay chart's `after` transition; a delivery wakes it early.
    const wait = startWait(timeoutMs, this.timers, signal);
    const set = this.waiters.get(sessionId) ?? new Set<() => void>();
    this.waiters.set(sessionId, set);
    const wake = () => wait.wake();
    set.add(wake);
    const forget = () => {
      set.delete(wake);
      if (set.size === 0 && this.waiters.get(sessionId) === set) this.waiters.delete(sessionId);
    };
    return wait.ended.then(
      (end) => {
        forget();
        return end === 'woken';
      },
      (reason: unknown) => {
        forget();
        throw reason instanceof Error ? reason : new Error('wait_agent was cancelled');
      },
    );
  }
}
