/**
 * @module services/trace/sink
 * A span sink: a second reader of every span the trace recorder receives (OpenTelemetry export,
 * issue 16 point 2). The recorder is the one seam: whatever the stored trace is told, the sink is
 * told in the same call, so the two cannot disagree on which spans exist, how they nest, or how they
 * ended. Turns are not spans of the stored trace (they are rows of `turns`); the sink learns of them
 * from the session updates `turn_started` and `turn_finished`.
 */
import type { SessionUpdateEnvelope } from '../../protocol/updates.js';
import type { TraceRecorder } from './recorder.js';
import type { TraceSignal } from '../../protocol/trace-signals.js';

export interface SpanSink {
  /** Every span start and end, as the stored trace receives it, plus its `content` by reference. */
  signal(signal: TraceSignal): void;
  /** Every session update of every loaded session; a sink reads the turn's start and end from them. */
  update(envelope: SessionUpdateEnvelope): void;
  /** Ends whatever is still open (the runtime shuts down) and flushes nothing itself. */
  close(): void;
}

/**
 * Feeds `sink` beside `inner`. The stored trace gets the signal without its `content` (contents
 * live in messages and payloads there), and a sink that throws is contained: neither the stored
 * trace nor the loop that recorded ever sees its failure. `onError` hears of each failure.
 */
export function withSpanSink(inner: TraceRecorder, sink: SpanSink, onError: (error: unknown) => void): TraceRecorder {
  return {
    record(signal) {
      if (signal.content === undefined) inner.record(signal);
      else {
        const { content: _content, ...stored } = signal;
        inner.record(stored);
      }
      try {
        sink.signal(signal);
      } catch (error) {
        onError(error);
      }
    },
    flush: (timeoutMs) => inner.flush(timeoutMs),
    stats: () => inner.stats(),
    close: () => inner.close(),
  };
}
