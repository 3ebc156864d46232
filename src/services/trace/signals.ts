/**
 * @module services/trace/signals
 * The trace signal shapes moved down to `protocol/trace-signals.ts`; this keeps the old import path
 * working for the actor files that still name it.
 */
export { modelCallSpan, type PayloadSlot, type SpanContent, type SpanData, type SpanKind, type SpanPayload, type SpanStatus, type TraceSignal } from '../../protocol/trace-signals.js';
