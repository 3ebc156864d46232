/**
 * Reference §3.5 (and §1: "Summary attempts | 3, each ≤ 120 s, 3 s wait between"): the summary
 * request is tried at most three times, each attempt limited to 120 s, with a 3 s pause after a
 * failed attempt; a timed-out attempt is classified `timeout` on its span. Run on a virtual clock
 * through the real runtime (createCore + a session + the scripted model), so nothing really waits.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Clock } from '../../src/services/clock.js';
import type { Timers } from '../../src/services/agents/signal.js';
import { DEFAULT_COMPACTION_OPTIONS } from '../../src/services/compaction/compaction.js';
import { pgliteStorage } from '../../src/storage/pglite.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { harness } from '../support/harness.js';
import { compactingModel, validSummary } from '../support/summaries.js';

interface Scheduled {
  at: number;
  ms: number;
  due: number;
  fn: () => void;
  state: 'pending' | 'fired' | 'cleared';
}

/** A clock and timers that move only when the test fires the next timer. */
class VirtualTime implements Clock, Timers {
  t = Date.parse('2026-03-01T00:00:00.000Z');
  readonly scheduled: Scheduled[] = [];

  now(): number {
    return this.t;
  }

  setTimeout(fn: () => void, ms: number): unknown {
    const entry: Scheduled = { at: this.t, ms, due: this.t + ms, fn, state: 'pending' };
    this.scheduled.push(entry);
    return entry;
  }

  clearTimeout(handle: unknown): void {
    const entry = handle as Scheduled;
    if (entry.state === 'pending') entry.state = 'cleared';
  }

  pending(): Scheduled[] {
    return this.scheduled.filter((s) => s.state === 'pending');
  }

  /**
   * Waits (really, briefly) until the runtime is quiet: a timer is pending and the pending set has
   * not changed for a few real milliseconds (so in-process work such as a model that answers at once
   * has run first, as it would long before any real 120 s limit). Then moves the clock to the
   * earliest due timer and fires it. Returns false when the work settled with nothing pending.
   */
  async fireNext(settled: () => boolean): Promise<boolean> {
    const deadline = Date.now() + 10_000;
    let stableSince = Date.now();
    let last = '';
    for (;;) {
      await new Promise((r) => setTimeout(r, 2));
      const pending = this.pending();
      const key = pending.map((s) => this.scheduled.indexOf(s)).join(',');
      if (key !== last) {
        last = key;
        stableSince = Date.now();
      }
      if (pending.length === 0 && settled()) return false;
      if (pending.length > 0 && Date.now() - stableSince >= 20) break;
      if (Date.now() > deadline) throw new Error('the runtime was not quiet with a timer pending within 10 s of real time');
    }
    const next = this.pending().sort((a, b) => a.due - b.due)[0]!;
    this.t = next.due;
    next.state = 'fired';
    next.fn();
    return true;
  }
}

/** Drives `work` to completion by firing virtual timers; returns its settlement. */
async function drive<T>(time: VirtualTime, work: Promise<T>): Promise<PromiseSettledResult<T>> {
  let settled = false;
  const result = work.then(
    (value) => ({ status: 'fulfilled' as const, value }),
    (reason: unknown) => ({ status: 'rejected' as const, reason }),
  );
  void result.then(() => (settled = true));
  while (await time.fireNext(() => settled));
  return result;
}

describe('summary attempts on a virtual clock (reference §3.5)', () => {
  let storage: SqlSessionStorage;
  beforeAll(async () => {
    storage = pgliteStorage();
    await storage.migrate();
  });
  afterAll(() => storage.close());

  it('the defaults are three attempts of at most 120 s, 3 s apart', () => {
    expect(DEFAULT_COMPACTION_OPTIONS).toMatchObject({ attempts: 3, attemptTimeoutMs: 120_000, retryDelayMs: 3_000 });
  });

  it('acc 3: three attempts that never answer each time out at 120 s, 3 s apart; the compaction fails with SummaryRetriesExhausted and no checkpoint', async () => {
    const time = new VirtualTime();
    const model = compactingModel([{ text: 'one' }], { summary: () => ({ hang: true }) });
    // Only the timers are injected: attempts, limit and pause are the defaults of reference §3.5.
    const h = await harness(storage, model, { clock: time, compaction: { timers: time } });
    await h.run('first');
    const before = h.session.inspectContext().conversation;
    const realStart = Date.now();
    const start = time.now();

    const outcome = await drive(time, h.session.compactConversation());

    expect(outcome.status).toBe('rejected');
    const error = (outcome as PromiseRejectedResult).reason as { code: string; message: string };
    expect(error.code).toBe('compaction_error');
    expect(error.message).toContain('the summary failed 3 times (SummaryRetriesExhausted): the summary attempt exceeded 120000 ms');
    expect(model.summaryRequests).toHaveLength(3);
    // Exactly: limit, pause, limit, pause, limit. Nothing after the third failure.
    expect(time.scheduled.map((s) => [s.at - start, s.ms, s.state])).toEqual([
      [0, 120_000, 'fired'],
      [120_000, 3_000, 'fired'],
      [123_000, 120_000, 'fired'],
      [243_000, 3_000, 'fired'],
      [246_000, 120_000, 'fired'],
    ]);
    expect(time.now() - start).toBe(366_000);
    expect(Date.now() - realStart, 'the test must not wait in real time').toBeLessThan(10_000);
    // The same request every time (no trimming, no model change across retries).
    expect(JSON.stringify(model.summaryRequests[1])).toBe(JSON.stringify(model.summaryRequests[0]));
    expect(JSON.stringify(model.summaryRequests[2])).toBe(JSON.stringify(model.summaryRequests[0]));
    expect(await h.session.checkpoints()).toEqual([]);
    expect(h.session.inspectContext().conversation).toEqual(before);

    await h.core.flushTrace();
    const spans = await storage.listTraceSpans({ sessionId: h.session.sessionId });
    const compaction = spans.find((s) => s.kind === 'compaction')!;
    expect(compaction).toMatchObject({ status: 'failed', errorCode: 'compaction_error', attemptCount: 3 });
    const attempts = spans.filter((s) => s.parentSpanId === compaction.id).sort((a, b) => (a.attributes.summaryAttempt as number) - (b.attributes.summaryAttempt as number));
    expect(attempts.map((s) => [s.attributes.summaryAttempt, s.status, s.errorCode])).toEqual([
      [1, 'timeout', 'timeout'],
      [2, 'timeout', 'timeout'],
      [3, 'timeout', 'timeout'],
    ]);
    const ms = (iso: string | null) => Date.parse(iso!) - start;
    // Each attempt lasted its 120 s limit; the next began 3 s after the previous one ended.
    expect(attempts.map((s) => [ms(s.startedAt), ms(s.endedAt)])).toEqual([
      [0, 120_000],
      [123_000, 243_000],
      [246_000, 366_000],
    ]);
    expect(attempts[0]!.errorMessage).toBe('the summary attempt exceeded 120000 ms');
  });

  it('acc 3: a timed-out attempt followed by a valid one is accepted after one 3 s pause, and the answered attempt clears its time limit', async () => {
    const time = new VirtualTime();
    let n = 0;
    const model = compactingModel([{ text: 'one' }], { summary: () => (++n === 1 ? { hang: true } : { text: validSummary('the retry') }) });
    const h = await harness(storage, model, { clock: time, compaction: { timers: time } });
    await h.run('first');
    const start = time.now();

    const outcome = await drive(time, h.session.compactConversation());

    if (outcome.status === "rejected") throw outcome.reason;
    const result = (outcome as PromiseFulfilledResult<Awaited<ReturnType<typeof h.session.compactConversation>>>).value;
    expect(result.checkpoint?.summary).toBe(validSummary('the retry'));
    expect(time.scheduled.map((s) => [s.at - start, s.ms, s.state])).toEqual([
      [0, 120_000, 'fired'],
      [120_000, 3_000, 'fired'],
      [123_000, 120_000, 'cleared'],
    ]);
    expect(time.pending()).toEqual([]);
    await h.core.flushTrace();
    const spans = await storage.listTraceSpans({ sessionId: h.session.sessionId });
    const compaction = spans.find((s) => s.kind === 'compaction')!;
    expect(compaction).toMatchObject({ status: 'succeeded', attemptCount: 2 });
    expect(spans.filter((s) => s.parentSpanId === compaction.id).map((s) => s.status).sort()).toEqual(['succeeded', 'timeout']);
  });

  it('a model that ends its stream quietly when the time limit aborts it is classified timeout, not transient', async () => {
    const time = new VirtualTime();
    // Emits nothing and returns (no throw) once its signal is aborted, like an adapter that swallows aborts.
    const model = compactingModel([{ text: 'one' }], {
      summary: () => ({ gate: new Promise(() => undefined), step: { events: [] } }),
    });
    const quiet = model.stream.bind(model);
    model.stream = (request, options) => {
      const inner = quiet(request, options);
      return (async function* () {
        try {
          yield* inner;
        } catch {
          // swallowed: the stream just ends
        }
      })();
    };
    const h = await harness(storage, model, { clock: time, compaction: { timers: time, attempts: 1 } });
    await h.run('first');
    const outcome = await drive(time, h.session.compactConversation());
    expect(outcome).toMatchObject({ status: 'rejected', reason: { code: 'compaction_error', message: expect.stringContaining('exceeded 120000 ms') } });
    await h.core.flushTrace();
    const spans = await storage.listTraceSpans({ sessionId: h.session.sessionId });
    expect(spans.filter((s) => s.kind === 'model_call' && s.parentSpanId !== null).map((s) => s.status)).toEqual(['timeout']);
  });

  it('a transient model error is retried after the 3 s pause and classified transient', async () => {
    const time = new VirtualTime();
    let n = 0;
    const model = compactingModel([{ text: 'one' }], { summary: () => (++n === 1 ? { error: new Error('connection reset') } : { text: validSummary() }) });
    const h = await harness(storage, model, { clock: time, compaction: { timers: time } });
    await h.run('first');
    const start = time.now();
    const outcome = await drive(time, h.session.compactConversation());
    if (outcome.status === "rejected") throw outcome.reason;
    expect(time.scheduled.map((s) => [s.at - start, s.ms, s.state])).toEqual([
      [0, 120_000, 'cleared'],
      [0, 3_000, 'fired'],
      [3_000, 120_000, 'cleared'],
    ]);
    await h.core.flushTrace();
    const spans = await storage.listTraceSpans({ sessionId: h.session.sessionId });
    const failed = spans.find((s) => s.kind === 'model_call' && s.attributes.summaryAttempt === 1)!;
    expect(failed).toMatchObject({ status: 'transient', errorCode: 'transient', errorMessage: 'connection reset' });
  });

  it('in a turn: cancelling during the 3 s pause ends the compaction at once; the pause timer is cleared and nothing is written', async () => {
    const time = new VirtualTime();
    const probe = await harness(storage, compactingModel([{ text: 'x' }]), {});
    const base = probe.session.inspectContext().estimate.estimatedInputTokens;
    const model = compactingModel([{ text: 'short' }, { toolCalls: [{ name: 'echo', arguments: { text: 'y'.repeat(3000) } }] }], {
      contextWindow: Math.ceil((base + 600) / 0.85) + 100,
      maxOutputTokens: 100,
      summary: () => ({ hang: true }),
    });
    const h = await harness(storage, model, { clock: time, compaction: { timers: time } });
    await h.run('small');
    const turnId = await h.start('now over the line');
    // The first attempt hangs until its 120 s limit; then the pause between attempts begins.
    expect(await time.fireNext(() => false)).toBe(true);
    const deadline = Date.now() + 10_000;
    while (!time.pending().some((t) => t.ms === 3_000)) {
      if (Date.now() > deadline) throw new Error('the pause was never scheduled');
      await new Promise((r) => setTimeout(r, 2));
    }
    const pauseTimer = time.pending().find((t) => t.ms === 3_000)!;
    await h.session.cancelTurn(turnId);
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
    expect(pauseTimer.state).toBe('cleared');
    expect(time.pending()).toEqual([]);
    expect(model.summaryRequests).toHaveLength(1);
    expect(await h.session.checkpoints()).toEqual([]);
    await h.core.flushTrace();
    const spans = await storage.listTraceSpans({ turnId });
    expect(spans.find((s) => s.kind === 'compaction')).toMatchObject({ status: 'cancelled', attemptCount: 1 });
    expect(spans.filter((s) => s.parentSpanId !== null && s.kind === 'model_call').map((s) => s.status)).toEqual(['timeout']);
  });
});
