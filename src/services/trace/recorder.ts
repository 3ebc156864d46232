/**
 * @module services/trace/recorder
 * The bounded trace queue (reference §11.1): capacity 1,024, batches of at most 64, one writer.
 * Nothing here ever throws into the agent loop; losses are counted, not raised.
 */
import type { TraceSignal } from '../../protocol/trace-signals.js';
import type { SessionStorage } from '../../storage/storage.js';

export interface TraceStats {
  /**
   * Every signal that will never be stored: refused because the queue was full or the recorder
   * itself failed, and those the database refused (seed 000 §11: "database failure: the loop
   * continues, dropped_signals increases").
   */
  droppedSignals: number;
  /** Of those, the signals whose batch or payload write the database refused. */
  writeFailures: number;
  written: number;
  queued: number;
}

export interface FlushResult extends TraceStats {
  flushed: boolean;
}

export interface TraceRecorder {
  /** Enqueues without waiting; never throws. */
  record(signal: TraceSignal): void;
  /** Waits (at most `timeoutMs`) until everything queued so far is written or dropped. */
  flush(timeoutMs?: number): Promise<FlushResult>;
  stats(): TraceStats;
  close(): Promise<void>;
}

export interface QueueTraceRecorderOptions {
  capacity?: number;
  batchSize?: number;
  /**
   * How long the writer waits to fill a batch before writing (default 200 ms; `flush` cuts it
   * short, and a full batch of 64 goes at once). Long enough that a turn's spans mostly share one
   * batch (the runtime flushes at each turn's end): one trace commit per turn instead of about one
   * per step, and a span's start and end become one row (issue 14). The trace is lossy by design, so
   * a crash losing 200 ms of queued signals instead of 25 ms changes nothing it promises.
   */
  lingerMs?: number;
}

export class QueueTraceRecorder implements TraceRecorder {
  private readonly queue: TraceSignal[] = [];
  private readonly capacity: number;
  private readonly batchSize: number;
  private readonly lingerMs: number;
  private writing: Promise<void> | null = null;
  private wake: (() => void) | null = null;
  private closed = false;
  /** Flushes waiting: while any is, the writer writes at once instead of lingering. */
  private flushing = 0;
  private readonly counters = { droppedSignals: 0, writeFailures: 0, written: 0 };

  constructor(
    private readonly storage: Pick<SessionStorage, 'writeTraceSignals'>,
    options: QueueTraceRecorderOptions = {},
  ) {
    this.capacity = options.capacity ?? 1024;
    this.batchSize = Math.min(options.batchSize ?? 64, 64);
    this.lingerMs = options.lingerMs ?? 200;
  }

  record(signal: TraceSignal): void {
    if (this.closed || this.queue.length >= this.capacity) {
      this.counters.droppedSignals += 1;
      return;
    }
    this.queue.push(signal);
    this.writing ??= this.drain();
    if (this.queue.length >= this.batchSize) this.wake?.();
  }

  /** Waits up to `lingerMs` for a full batch; the loop that queued the signal goes on at once. */
  private linger(): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, this.lingerMs);
      timer.unref?.();
      const self = this;
      function done() {
        clearTimeout(timer);
        self.wake = null;
        resolve();
      }
      this.wake = done;
    });
  }

  /**
   * The one writer. It waits up to `lingerMs` for a full batch before EVERY write, not only the
   * first: signals that arrive while a write is in flight wait for company instead of going out as
   * a batch of one. A span's start and end then mostly land in one batch, where they become one
   * inserted row instead of an insert and an update (issue 14: most of the trace's WAL and commits
   * per step). `flush` cuts every wait short.
   */
  private async drain(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        if (this.queue.length < this.batchSize && this.flushing === 0) await this.linger();
        const batch = this.queue.splice(0, this.batchSize);
        try {
          const report = await this.storage.writeTraceSignals(batch);
          this.counters.written += report.written;
          this.refused(report.failed);
        } catch {
          this.refused(batch.length);
        }
      }
    } finally {
      this.writing = null;
    }
  }

  /** Signals the database refused are lost: dropped, and counted apart as write failures. */
  private refused(count: number): void {
    this.counters.writeFailures += count;
    this.counters.droppedSignals += count;
  }

  async flush(timeoutMs = 2000): Promise<FlushResult> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), timeoutMs);
      timer.unref?.();
    });
    this.flushing += 1;
    const done = (async () => {
      try {
        while (this.writing) {
          this.wake?.();
          await this.writing;
        }
        return true as const;
      } finally {
        this.flushing -= 1;
      }
    })();
    const flushed = await Promise.race([done, timeout]);
    clearTimeout(timer);
    return { flushed, ...this.stats() };
  }

  stats(): TraceStats {
    return { ...this.counters, queued: this.queue.length };
  }

  async close(): Promise<void> {
    await this.flush();
    this.closed = true;
  }
}

/** Wraps any recorder so that a recorder that throws only counts as dropped signals. */
export function guardRecorder(inner: TraceRecorder): TraceRecorder {
  let dropped = 0;
  return {
    record(signal) {
      try {
        inner.record(signal);
      } catch {
        dropped += 1;
      }
    },
    async flush(timeoutMs) {
      try {
        const result = await inner.flush(timeoutMs);
        return { ...result, droppedSignals: result.droppedSignals + dropped };
      } catch {
        return { flushed: false, droppedSignals: dropped, writeFailures: 0, written: 0, queued: 0 };
      }
    },
    stats() {
      try {
        const s = inner.stats();
        return { ...s, droppedSignals: s.droppedSignals + dropped };
      } catch {
        return { droppedSignals: dropped, writeFailures: 0, written: 0, queued: 0 };
      }
    },
    async close() {
      try {
        await inner.close();
      } catch {
        // A failing recorder must not block shutdown.
      }
    },
  };
}
