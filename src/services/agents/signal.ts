/**
 * @module services/agents/signal
 * Which sessions have agent messages waiting (delivered, not yet drained into the conversation),
 * so that `wait_agent` returns at once when one is already there and wakes when one arrives.
 */

export interface Timers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const realTimers: Timers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

export class MailboxSignal {
  private readonly pending = new Map<string, number>();
  private readonly waiters = new Map<string, Set<() => void>>();

  /** `timers` is injected so that tests can run wait_agent's 10 s minimum fast. */
  constructor(private readonly timers: Timers = realTimers) {}

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
    return new Promise<boolean>((resolve, reject) => {
      const set = this.waiters.get(sessionId) ?? new Set<() => void>();
      this.waiters.set(sessionId, set);
      const done = (value: boolean | Error) => {
        this.timers.clearTimeout(timer);
        set.delete(wake);
        if (set.size === 0) this.waiters.delete(sessionId);
        signal.removeEventListener('abort', onAbort);
        if (value instanceof Error) reject(value);
        else resolve(value);
      };
      const wake = () => done(true);
      const onAbort = () => done(signal.reason instanceof Error ? signal.reason : new Error('wait_agent was cancelled'));
      const timer = this.timers.setTimeout(() => done(false), timeoutMs);
      set.add(wake);
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    });
  }
}
