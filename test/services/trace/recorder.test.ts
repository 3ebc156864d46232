/**
 * The bounded trace queue of reference §11.1: capacity 1,024 (`try_send`, drops counted in
 * `dropped_signals`), one writer, at most 64 signals per batch, and a writer that fails never
 * throws into whoever records. The writer is a stand-in that the test holds and releases, so the
 * queue's limits are seen exactly.
 */
import { describe, expect, it } from 'vitest';
import { QueueTraceRecorder, guardRecorder, type TraceRecorder } from '../../../src/services/trace/recorder.js';
import type { TraceSignal } from '../../../src/services/trace/signals.js';
import type { TraceWriteReport } from '../../../src/storage/storage.js';

function signal(n: number): TraceSignal {
  return {
    type: 'span_started',
    span: {
      id: `span_${n}`,
      traceId: 'trace',
      sessionId: 'ses',
      turnId: 'turn',
      parentSpanId: null,
      kind: 'tool_call',
      name: 'tool.call',
      status: 'running',
      startedAt: new Date(0).toISOString(),
      attributes: {},
    },
  };
}

/** A writer whose calls wait until the test opens it; every batch it received is kept. */
function heldWriter() {
  const batches: string[][] = [];
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  const called: Array<() => void> = [];
  return {
    batches,
    release: () => open(),
    /** Resolves once the writer has been called `n` times. */
    calls(n: number): Promise<void> {
      if (batches.length >= n) return Promise.resolve();
      return new Promise((resolve) => called.push(() => batches.length >= n && resolve()));
    },
    async writeTraceSignals(signals: readonly TraceSignal[]): Promise<TraceWriteReport> {
      batches.push(signals.map((s) => s.span.id));
      for (const c of [...called]) c();
      await opened;
      return { written: signals.length, failed: 0 };
    },
  };
}

describe('QueueTraceRecorder (reference §11.1)', () => {
  it('holds at most 1,024 signals while the writer is busy and counts every refused one as dropped', async () => {
    const writer = heldWriter();
    const recorder = new QueueTraceRecorder(writer);
    for (let i = 0; i < 1_100; i += 1) recorder.record(signal(i));
    // Recording never waits: all 1,100 calls returned, 1,024 are queued, 76 refused.
    expect(recorder.stats()).toEqual({ droppedSignals: 76, writeFailures: 0, written: 0, queued: 1_024 });

    // The writer takes its first batch (64) and is held there: room for 64 more, no more.
    await writer.calls(1);
    expect(writer.batches[0]).toHaveLength(64);
    expect(recorder.stats().queued).toBe(960);
    for (let i = 1_100; i < 1_200; i += 1) recorder.record(signal(i));
    expect(recorder.stats()).toMatchObject({ droppedSignals: 76 + 36, queued: 1_024 });

    writer.release();
    const result = await recorder.flush();
    expect(result).toEqual({ flushed: true, droppedSignals: 112, writeFailures: 0, written: 1_088, queued: 0 });
    // One writer, batches of at most 64, in recording order, each accepted signal exactly once.
    expect(Math.max(...writer.batches.map((b) => b.length))).toBe(64);
    expect(writer.batches.every((b) => b.length <= 64)).toBe(true);
    const accepted = [...Array.from({ length: 1_024 }, (_, i) => `span_${i}`), ...Array.from({ length: 64 }, (_, i) => `span_${1_100 + i}`)];
    expect(writer.batches.flat()).toEqual(accepted);
    expect(writer.batches).toHaveLength(17);
  });

  it('signals recorded while a write is in flight wait for company instead of going out one by one (issue 14)', async () => {
    const writer = heldWriter();
    const recorder = new QueueTraceRecorder(writer, { lingerMs: 200 });
    recorder.record(signal(1));
    // The first batch goes out after its linger and is held in the writer.
    await writer.calls(1);
    recorder.record(signal(2));
    writer.release();
    // Signal 2 was queued during the write; signal 3 arrives just after it. With a linger before
    // every batch they are one batch (one statement, one commit); without it, two.
    await new Promise((resolve) => setTimeout(resolve, 20));
    recorder.record(signal(3));
    const result = await recorder.flush();
    expect(result).toMatchObject({ flushed: true, written: 3, droppedSignals: 0 });
    expect(writer.batches).toEqual([['span_1'], ['span_2', 'span_3']]);
  });

  it('flush cuts every linger short, also the one before a later batch', async () => {
    const writer = heldWriter();
    const recorder = new QueueTraceRecorder(writer, { lingerMs: 60_000 });
    recorder.record(signal(1));
    const started = Date.now();
    const flushed = recorder.flush(5_000);
    await writer.calls(1);
    // Queued during the held write: the writer must not linger for it while a flush waits.
    recorder.record(signal(2));
    writer.release();
    expect(await flushed).toMatchObject({ flushed: true, written: 2 });
    expect(writer.batches).toEqual([['span_1'], ['span_2']]);
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('never writes more than 64 signals in one batch, whatever batch size is asked for', async () => {
    const writer = heldWriter();
    writer.release();
    const recorder = new QueueTraceRecorder(writer, { batchSize: 500, lingerMs: 1 });
    for (let i = 0; i < 300; i += 1) recorder.record(signal(i));
    expect(await recorder.flush()).toMatchObject({ flushed: true, written: 300, droppedSignals: 0 });
    expect(writer.batches.map((b) => b.length)).toEqual([64, 64, 64, 64, 44]);
  });

  it('a smaller capacity is honoured too (the option the runtime passes through)', async () => {
    const writer = heldWriter();
    const recorder = new QueueTraceRecorder(writer, { capacity: 10 });
    for (let i = 0; i < 25; i += 1) recorder.record(signal(i));
    expect(recorder.stats()).toMatchObject({ droppedSignals: 15, queued: 10 });
    writer.release();
    expect(await recorder.flush()).toMatchObject({ flushed: true, written: 10, droppedSignals: 15 });
  });

  it('a writer that throws or reports failures never throws into the recording side; losses are counted', async () => {
    let calls = 0;
    const recorder = new QueueTraceRecorder(
      {
        async writeTraceSignals(signals) {
          calls += 1;
          if (calls === 1) throw new Error('database down');
          return { written: signals.length - 1, failed: 1 };
        },
      },
      { lingerMs: 1 },
    );
    for (let i = 0; i < 100; i += 1) expect(() => recorder.record(signal(i))).not.toThrow();
    const result = await recorder.flush();
    // The first batch (64) failed whole; the second (36) lost one signal. Refused signals are
    // dropped signals too (seed 000 §11, issue 13.6).
    expect(result).toEqual({ flushed: true, droppedSignals: 65, writeFailures: 65, written: 35, queued: 0 });
  });

  it('flush gives up after its timeout while the writer hangs, and says so', async () => {
    const writer = heldWriter();
    const recorder = new QueueTraceRecorder(writer, { lingerMs: 1 });
    recorder.record(signal(1));
    await writer.calls(1);
    const result = await recorder.flush(50);
    expect(result.flushed).toBe(false);
    writer.release();
    expect(await recorder.flush()).toMatchObject({ flushed: true, written: 1 });
  });

  it('after close, signals are refused and counted as dropped', async () => {
    const writer = heldWriter();
    writer.release();
    const recorder = new QueueTraceRecorder(writer, { lingerMs: 1 });
    recorder.record(signal(1));
    await recorder.close();
    recorder.record(signal(2));
    expect(recorder.stats()).toEqual({ droppedSignals: 1, writeFailures: 0, written: 1, queued: 0 });
  });
});

describe('guardRecorder', () => {
  it('turns a recorder that throws everywhere into dropped signals', async () => {
    const broken: TraceRecorder = {
      record: () => {
        throw new Error('down');
      },
      flush: () => Promise.reject(new Error('down')),
      stats: () => {
        throw new Error('down');
      },
      close: () => Promise.reject(new Error('down')),
    };
    const guarded = guardRecorder(broken);
    guarded.record(signal(1));
    guarded.record(signal(2));
    expect(guarded.stats()).toEqual({ droppedSignals: 2, writeFailures: 0, written: 0, queued: 0 });
    expect(await guarded.flush()).toEqual({ flushed: false, droppedSignals: 2, writeFailures: 0, written: 0, queued: 0 });
    await expect(guarded.close()).resolves.toBeUndefined();
  });

  it('adds its own drops to those of a working recorder', async () => {
    const writer = heldWriter();
    writer.release();
    const inner = new QueueTraceRecorder(writer, { capacity: 1, lingerMs: 1 });
    const guarded = guardRecorder(inner);
    guarded.record(signal(1));
    guarded.record(signal(2));
    expect(guarded.stats()).toMatchObject({ droppedSignals: 1, queued: 1 });
    expect(await guarded.flush()).toMatchObject({ flushed: true, written: 1, droppedSignals: 1 });
  });
});
