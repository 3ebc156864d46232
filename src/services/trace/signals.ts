/**
 * @module services/trace/signals
 * What the trace recorder queues and the storage writes: span starts and ends (reference §11.1).
 */

export type SpanKind = 'model_call' | 'tool_call' | 'compaction';
export type SpanStatus = 'running' | 'succeeded' | 'failed' | 'denied' | 'cancelled' | 'outcome_unknown';
export type PayloadSlot = 'request' | 'system_context' | 'tool_definitions' | 'response';

export interface SpanData {
  id: string;
  traceId: string;
  sessionId: string;
  turnId: string | null;
  parentSpanId: string | null;
  kind: SpanKind;
  name: string;
  status: SpanStatus;
  startedAt: string;
  endedAt?: string | null;
  modelId?: string | null;
  resolvedModelName?: string | null;
  providerRequestId?: string | null;
  providerCallId?: string | null;
  requestedToolName?: string | null;
  resolvedToolName?: string | null;
  attemptCount?: number | null;
  inputTokens?: number | null;
  outputTokens?: number | null;
  cachedInputTokens?: number | null;
  reasoningTokens?: number | null;
  responseMessageId?: string | null;
  permissionWaitMs?: number | null;
  errorCode?: string | null;
  errorMessage?: string | null;
  attributes: Record<string, unknown>;
}

/**
 * A `model.call` span as it starts: a turn's model submission or a compaction's summary attempt.
 * `attributes` are the call's own; `schemaVersion` is added here.
 */
export function modelCallSpan(input: {
  id: string;
  traceId: string;
  sessionId: string;
  turnId: string | null;
  parentSpanId: string | null;
  startedAt: string;
  model: { id: string; model: string };
  attributes: Record<string, unknown>;
}): SpanData {
  return {
    id: input.id,
    traceId: input.traceId,
    sessionId: input.sessionId,
    turnId: input.turnId,
    parentSpanId: input.parentSpanId,
    kind: 'model_call',
    name: 'model.call',
    status: 'running',
    startedAt: input.startedAt,
    modelId: input.model.id,
    resolvedModelName: input.model.model,
    attemptCount: 1,
    attributes: { schemaVersion: 1, ...input.attributes },
  };
}

export interface SpanPayload {
  slot: PayloadSlot;
  body: unknown;
}

export type TraceSignal =
  | { type: 'span_started'; span: SpanData; payloads?: SpanPayload[] }
  | { type: 'span_ended'; span: SpanData; payloads?: SpanPayload[] };
