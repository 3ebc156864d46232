/**
 * @module protocol/trace-signals
 * What the trace recorder queues and the storage writes: span starts and ends (reference §11.1).
 * The shapes sit in the protocol because the storage persists what the services record.
 */
import type { ContentBlock } from './content.js';
import type { ModelMessage, SystemPart } from './model-messages.js';

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

/**
 * What a span carried in and out, by reference, for a span sink that exports contents (OpenTelemetry
 * with `captureContent`). It is never stored: the stored trace keeps contents as messages and
 * payloads, and the recorder strips this before the stored trace sees the signal.
 */
export interface SpanContent {
  /** A model call: the system context and the messages as sent. */
  system?: readonly SystemPart[];
  inputMessages?: readonly ModelMessage[];
  /** A model call: the assistant's output blocks as stored. */
  outputBlocks?: readonly ContentBlock[];
  /** A tool call: the raw arguments the model sent, and the result text the model will see. */
  toolArguments?: string;
  toolResult?: string;
}

export type TraceSignal =
  | { type: 'span_started'; span: SpanData; payloads?: SpanPayload[]; content?: SpanContent }
  | { type: 'span_ended'; span: SpanData; payloads?: SpanPayload[]; content?: SpanContent };
