/**
 * @module services/telemetry/otel
 * OpenTelemetry export (issue 16 point 2): a span sink that turns the stored trace's spans into
 * OpenTelemetry spans on a host's `Tracer`, with the GenAI semantic conventions.
 *
 * - A turn is an `invoke_agent` span; its model calls are `chat <model>` spans under it; a tool call
 *   is an `execute_tool <tool>` span under the model call that asked for it; a compaction is an
 *   `openwork.compact` span under the turn, its summary attempts `chat` spans under it. That is the
 *   nesting of the stored trace (`parent_span_id`, `trace_id` = the turn), with the turn added as
 *   the root the stored trace keeps in `turns`.
 * - Parents are set through explicit contexts, never the ambient one: whatever the host has active
 *   when an actor happens to run is unrelated to the turn. A host that wants its own span above the
 *   turn returns it from `parentContext`; a sub-agent's first turn nests under the tool call that
 *   spawned it.
 * - Start and end times are the stored trace's own (the runtime's clock), not the time of export.
 * - Message contents are attributes (`gen_ai.input.messages`, `gen_ai.output.messages`,
 *   `gen_ai.system_instructions`, `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`) as JSON
 *   text, and only with `captureContent: true`.
 * - Every call into the tracer is contained: a tracer that throws loses spans, never a turn.
 */
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace as otelTrace, type AttributeValue, type Attributes, type Context, type Span, type Tracer } from '@opentelemetry/api';
import type { ContentBlock } from '../../protocol/content.js';
import type { SessionUpdateEnvelope, TurnOutcome } from '../../protocol/updates.js';
import type { ModelMessage, SystemPart } from '../model/port.js';
import type { SpanSink } from '../trace/sink.js';
import type { SpanContent, SpanData, TraceSignal } from '../../protocol/trace-signals.js';

export interface TelemetryOptions {
  /** An `@opentelemetry/api` tracer, e.g. `trace.getTracer('openwork-core')` of the host's provider. */
  tracer: Tracer;
  /**
   * Record message contents (prompts, completions, tool arguments and results) as span attributes
   * (default false: they may hold personal data and secrets).
   */
  captureContent?: boolean;
  /**
   * The parent of a turn's span. Default: none (each turn is the root of its own OpenTelemetry
   * trace). The ambient context is never used, because actors run long after the call that started
   * the turn; a host that wants the turn under its request span keeps that span's context by
   * `clientRequestId` and returns it here.
   */
  parentContext?: (turn: { sessionId: string; turnId: string; clientRequestId: string }) => Context | undefined;
  /** Hears of every failure of the tracer (or of `parentContext`); default: one console warning. */
  onError?: (error: unknown) => void;
}

/** The GenAI name of the span's operation, or our own for a compaction. */
const OPERATION = { model_call: 'chat', tool_call: 'execute_tool', compaction: 'openwork.compact' } as const;

/** Stored attributes given their own name below, or of no use outside the store. */
const MAPPED = new Set(['schemaVersion', 'modelCallIndex', 'maxOutputTokens', 'finishReason', 'responseId', 'actualModel', 'permissionDecision', 'permissionDecisionSource', 'trigger']);

interface OpenSpan {
  span: Span;
  /** The context whose active span is this span: its children's parent. */
  context: Context;
  open: boolean;
}

/** One stored trace: a turn, or a compaction or rewind outside any turn. */
interface TraceEntry {
  turn: Span | null;
  turnContext: Context;
  turnEnded: boolean;
  spans: Map<string, OpenSpan>;
  open: number;
  usage: { input: number; output: number };
  modelNamed: boolean;
}

export class OtelSpanSink implements SpanSink {
  private readonly traces = new Map<string, TraceEntry>();
  /** The trace of every span still held, so that a sub-agent's turn finds the call that spawned it. */
  private readonly traceOfSpan = new Map<string, string>();
  private readonly captureContent: boolean;
  private warned = false;
  /** After `close`, late ends (a held span's microtask) belong to nothing and are let go. */
  private closed = false;

  constructor(private readonly options: TelemetryOptions) {
    this.captureContent = options.captureContent === true;
  }

  /** Reports a failure of the tracer or of a host callback; reporting itself never throws. */
  readonly fail = (error: unknown): void => {
    try {
      if (this.options.onError) this.options.onError(error);
      else if (!this.warned) {
        this.warned = true;
        console.warn('openwork-core: the OpenTelemetry tracer failed; spans are being lost', error);
      }
    } catch {
      // A failing error handler is the last thing that may reach the loop.
    }
  };

  signal(signal: TraceSignal): void {
    if (this.closed) return;
    try {
      if (signal.type === 'span_started') this.started(signal.span, signal.content);
      else this.ended(signal.span, signal.content);
    } catch (error) {
      this.fail(error);
    }
  }

  update(envelope: SessionUpdateEnvelope): void {
    if (this.closed) return;
    try {
      const { update, turnId } = envelope;
      if (turnId === null) return;
      if (update.type === 'turn_started') this.turnEntry(turnId, envelope.sessionId, envelope.occurredAtMs, update.clientRequestId);
      else if (update.type === 'turn_finished') this.turnFinished(turnId, envelope, update.outcome);
    } catch (error) {
      this.fail(error);
    }
  }

  close(): void {
    this.closed = true;
    for (const [traceId, entry] of [...this.traces]) {
      for (const open of entry.spans.values()) {
        if (!open.open) continue;
        this.guard(() => {
          open.span.setAttributes({ 'error.type': 'actor_stopped', 'openwork.status': 'outcome_unknown' });
          open.span.setStatus({ code: SpanStatusCode.ERROR, message: 'the runtime shut down before the span ended' });
          open.span.end();
        });
      }
      if (entry.turn && !entry.turnEnded) {
        const turn = entry.turn;
        this.guard(() => {
          turn.setAttributes({ 'error.type': 'actor_stopped', 'openwork.turn.outcome': 'failed' });
          turn.setStatus({ code: SpanStatusCode.ERROR, message: 'the runtime shut down before the turn ended' });
          turn.end();
        });
      }
      this.drop(traceId, entry);
    }
  }

  private guard(effect: () => void): void {
    try {
      effect();
    } catch (error) {
      this.fail(error);
    }
  }

  /** The entry of a turn, with its `invoke_agent` span started at `startMs` if it is new. */
  private turnEntry(turnId: string, sessionId: string, startMs: number, clientRequestId: string | null): TraceEntry {
    const known = this.traces.get(turnId);
    if (known) return known;
    const parent = this.turnParent(sessionId, turnId, clientRequestId);
    const attributes: Attributes = {
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.conversation.id': sessionId,
      'openwork.session.id': sessionId,
      'openwork.turn.id': turnId,
      ...(clientRequestId !== null ? { 'openwork.turn.client_request_id': clientRequestId } : {}),
    };
    const entry: TraceEntry = { turn: null, turnContext: parent, turnEnded: false, spans: new Map(), open: 0, usage: { input: 0, output: 0 }, modelNamed: false };
    this.traces.set(turnId, entry);
    // A tracer that throws here leaves the entry without a turn span; its spans still nest in `parent`.
    this.guard(() => {
      entry.turn = this.options.tracer.startSpan('invoke_agent', { kind: SpanKind.INTERNAL, startTime: startMs, attributes }, parent);
      entry.turnContext = otelTrace.setSpan(parent, entry.turn);
    });
    return entry;
  }

  private turnParent(sessionId: string, turnId: string, clientRequestId: string | null): Context {
    if (clientRequestId !== null && this.options.parentContext) {
      try {
        const chosen = this.options.parentContext({ sessionId, turnId, clientRequestId });
        if (chosen) return chosen;
      } catch (error) {
        this.fail(error);
      }
    }
    // A sub-agent's first turn is started by `spawn_agent` with the spawning call's span in its id.
    const spawn = clientRequestId?.startsWith('spawn:') ? clientRequestId.slice('spawn:'.length) : null;
    const spawnTrace = spawn !== null ? this.traceOfSpan.get(spawn) : undefined;
    const spawner = spawnTrace !== undefined ? this.traces.get(spawnTrace)?.spans.get(spawn!) : undefined;
    return spawner?.context ?? ROOT_CONTEXT;
  }

  private turnFinished(turnId: string, envelope: SessionUpdateEnvelope, outcome: TurnOutcome): void {
    const entry = this.turnEntry(turnId, envelope.sessionId, envelope.occurredAtMs, null);
    const turn = entry.turn;
    entry.turnEnded = true;
    if (turn) {
      this.guard(() => {
        turn.setAttributes({
          'openwork.turn.outcome': outcome.status,
          'gen_ai.usage.input_tokens': entry.usage.input,
          'gen_ai.usage.output_tokens': entry.usage.output,
        });
        if (outcome.status === 'failed') {
          turn.setAttributes({ 'error.type': outcome.code });
          turn.setStatus({ code: SpanStatusCode.ERROR, message: outcome.message });
        }
        if (outcome.status === 'completed' && this.captureContent) {
          turn.setAttribute('gen_ai.output.messages', JSON.stringify([{ role: 'assistant', parts: [{ type: 'text', content: outcome.finalText }], finish_reason: 'stop' }]));
        }
        turn.end(envelope.occurredAtMs);
      });
    }
    this.dropIfDone(turnId, entry);
  }

  private traceEntry(span: SpanData): TraceEntry {
    const known = this.traces.get(span.traceId);
    if (known) return known;
    // A span of a turn whose start this sink did not see (it may have been added late): the turn's
    // span starts with it. A compaction or rewind outside any turn is a root of its own.
    if (span.turnId !== null && span.turnId === span.traceId) return this.turnEntry(span.turnId, span.sessionId, Date.parse(span.startedAt), null);
    const entry: TraceEntry = { turn: null, turnContext: ROOT_CONTEXT, turnEnded: true, spans: new Map(), open: 0, usage: { input: 0, output: 0 }, modelNamed: true };
    this.traces.set(span.traceId, entry);
    return entry;
  }

  private started(span: SpanData, content: SpanContent | undefined): OpenSpan | null {
    const entry = this.traceEntry(span);
    const parent = (span.parentSpanId !== null ? entry.spans.get(span.parentSpanId)?.context : undefined) ?? entry.turnContext;
    const attributes = { ...this.startAttributes(span), ...(this.captureContent && content ? contentAttributes(content) : {}) };
    const otelSpan = this.options.tracer.startSpan(spanName(span), { kind: span.kind === 'model_call' ? SpanKind.CLIENT : SpanKind.INTERNAL, startTime: Date.parse(span.startedAt), attributes }, parent);
    const open: OpenSpan = { span: otelSpan, context: otelTrace.setSpan(parent, otelSpan), open: true };
    entry.spans.set(span.id, open);
    this.traceOfSpan.set(span.id, span.traceId);
    entry.open += 1;
    if (span.kind === 'model_call' && !entry.modelNamed && entry.turn) {
      // The turn's span names the model of its first call (the session's model).
      entry.modelNamed = true;
      const provider = providerOf(span);
      entry.turn.setAttributes({
        ...(span.resolvedModelName ? { 'gen_ai.request.model': span.resolvedModelName } : {}),
        ...(provider ? { 'gen_ai.provider.name': provider, 'gen_ai.system': provider } : {}),
      });
    }
    return open;
  }

  private ended(span: SpanData, content: SpanContent | undefined): void {
    const entry = this.traceEntry(span);
    // An end without a start this sink saw (the tracer threw at the start): the span is made whole.
    const open = entry.spans.get(span.id) ?? this.started(span, undefined);
    if (!open || !open.open) return;
    open.open = false;
    entry.open -= 1;
    if (span.kind === 'model_call') {
      entry.usage.input += span.inputTokens ?? 0;
      entry.usage.output += span.outputTokens ?? 0;
    }
    this.guard(() => {
      open.span.setAttributes({ ...this.endAttributes(span), ...(this.captureContent && content ? contentAttributes(content, span) : {}) });
      if (span.status === 'failed' || span.status === 'outcome_unknown') {
        open.span.setAttribute('error.type', span.errorCode ?? span.status);
        open.span.setStatus({ code: SpanStatusCode.ERROR, ...(span.errorMessage ? { message: span.errorMessage } : {}) });
      }
      open.span.end(span.endedAt ? Date.parse(span.endedAt) : undefined);
    });
    this.dropIfDone(span.traceId, entry);
  }

  private dropIfDone(traceId: string, entry: TraceEntry): void {
    if (entry.turnEnded && entry.open === 0) this.drop(traceId, entry);
  }

  private drop(traceId: string, entry: TraceEntry): void {
    if (this.traces.get(traceId) !== entry) return;
    this.traces.delete(traceId);
    for (const id of entry.spans.keys()) this.traceOfSpan.delete(id);
  }

  private startAttributes(span: SpanData): Attributes {
    const a = span.attributes;
    const attributes: Attributes = {
      'gen_ai.operation.name': OPERATION[span.kind],
      'gen_ai.conversation.id': span.sessionId,
      'openwork.session.id': span.sessionId,
      'openwork.span.id': span.id,
      ...(span.turnId !== null ? { 'openwork.turn.id': span.turnId } : {}),
    };
    if (span.kind === 'model_call') {
      const provider = providerOf(span);
      Object.assign(attributes, {
        ...(provider ? { 'gen_ai.provider.name': provider, 'gen_ai.system': provider } : {}),
        ...(span.resolvedModelName ? { 'gen_ai.request.model': span.resolvedModelName } : {}),
        ...(typeof a.maxOutputTokens === 'number' ? { 'gen_ai.request.max_tokens': a.maxOutputTokens } : {}),
        ...(typeof a.modelCallIndex === 'number' ? { 'openwork.model.call_index': a.modelCallIndex } : {}),
        ...(span.modelId ? { 'openwork.model.id': span.modelId } : {}),
      });
    } else if (span.kind === 'tool_call') {
      Object.assign(attributes, {
        'gen_ai.tool.type': 'function',
        ...(span.requestedToolName ? { 'gen_ai.tool.name': span.requestedToolName } : {}),
        ...(span.providerCallId ? { 'gen_ai.tool.call.id': span.providerCallId } : {}),
      });
    } else if (typeof a.trigger === 'string') {
      attributes['openwork.compaction.trigger'] = a.trigger;
    }
    return attributes;
  }

  private endAttributes(span: SpanData): Attributes {
    const a = span.attributes;
    const attributes: Attributes = { 'openwork.status': span.status };
    for (const [key, value] of Object.entries(a)) {
      if (MAPPED.has(key)) continue;
      const plain = attributeValue(value);
      if (plain !== undefined) attributes[`openwork.${snakeCase(key)}`] = plain;
    }
    if (span.permissionWaitMs != null) attributes['openwork.permission.wait_ms'] = span.permissionWaitMs;
    if (span.kind === 'model_call') {
      const model = typeof a.actualModel === 'string' ? a.actualModel : span.resolvedModelName;
      Object.assign(attributes, {
        ...(model ? { 'gen_ai.response.model': model } : {}),
        ...(span.providerRequestId ? { 'gen_ai.response.id': span.providerRequestId } : {}),
        ...(typeof a.finishReason === 'string' ? { 'gen_ai.response.finish_reasons': [finishReason(a.finishReason)] } : {}),
        ...(span.inputTokens != null ? { 'gen_ai.usage.input_tokens': span.inputTokens } : {}),
        ...(span.outputTokens != null ? { 'gen_ai.usage.output_tokens': span.outputTokens } : {}),
        ...(span.cachedInputTokens != null ? { 'openwork.usage.cached_input_tokens': span.cachedInputTokens } : {}),
        ...(span.reasoningTokens != null ? { 'openwork.usage.reasoning_tokens': span.reasoningTokens } : {}),
        ...(span.attemptCount != null ? { 'openwork.model.attempts': span.attemptCount, 'openwork.model.retries': Math.max(0, span.attemptCount - 1) } : {}),
      });
    } else if (span.kind === 'tool_call') {
      const name = span.resolvedToolName ?? span.requestedToolName;
      Object.assign(attributes, {
        ...(name ? { 'gen_ai.tool.name': name } : {}),
        'openwork.tool.status': span.status,
        ...(typeof a.permissionDecision === 'string' ? { 'openwork.permission.decision': a.permissionDecision } : {}),
        ...(typeof a.permissionDecisionSource === 'string' ? { 'openwork.permission.source': a.permissionDecisionSource } : {}),
      });
    } else if (span.attemptCount != null) {
      attributes['openwork.compaction.attempts'] = span.attemptCount;
    }
    return attributes;
  }
}

function spanName(span: SpanData): string {
  if (span.kind === 'model_call') return span.resolvedModelName ? `chat ${span.resolvedModelName}` : 'chat';
  if (span.kind === 'tool_call') return span.requestedToolName ? `execute_tool ${span.requestedToolName}` : 'execute_tool';
  return 'openwork.compact';
}

/** `<provider>/<model>`: the provider half, as `gen_ai.provider.name`. */
function providerOf(span: SpanData): string | null {
  const id = span.modelId ?? '';
  const slash = id.indexOf('/');
  return slash > 0 ? id.slice(0, slash) : null;
}

/** Our finish reasons in the GenAI convention's words where it has one. */
function finishReason(reason: string): string {
  return reason === 'tool_use' ? 'tool_call' : reason;
}

function snakeCase(key: string): string {
  return key.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase();
}

/** Strings, numbers, booleans and arrays of one of them; anything else is left to the stored trace. */
function attributeValue(value: unknown): AttributeValue | undefined {
  if (typeof value === 'string' || typeof value === 'boolean') return value;
  if (typeof value === 'number') return Number.isFinite(value) ? value : undefined;
  if (Array.isArray(value) && value.length > 0) {
    const kind = typeof value[0];
    if ((kind === 'string' || kind === 'number' || kind === 'boolean') && value.every((v) => typeof v === kind)) return value as AttributeValue;
  }
  return undefined;
}

/** The GenAI content attributes, as JSON text (span attributes hold no structured values). */
function contentAttributes(content: SpanContent, span?: SpanData): Attributes {
  const attributes: Attributes = {};
  if (content.system) attributes['gen_ai.system_instructions'] = JSON.stringify(content.system.map((part: SystemPart) => ({ type: 'text', content: part.content })));
  if (content.inputMessages) attributes['gen_ai.input.messages'] = JSON.stringify(content.inputMessages.map(inputMessage));
  if (content.outputBlocks) {
    const reason = typeof span?.attributes.finishReason === 'string' ? finishReason(span.attributes.finishReason) : 'stop';
    attributes['gen_ai.output.messages'] = JSON.stringify([{ role: 'assistant', parts: content.outputBlocks.flatMap(blockParts), finish_reason: reason }]);
  }
  if (content.toolArguments !== undefined) attributes['gen_ai.tool.call.arguments'] = content.toolArguments;
  if (content.toolResult !== undefined) attributes['gen_ai.tool.call.result'] = content.toolResult;
  return attributes;
}

function inputMessage(message: ModelMessage): Record<string, unknown> {
  if (message.role === 'tool') return { role: 'tool', parts: [{ type: 'tool_call_response', id: message.callId, response: message.text }] };
  return { role: message.role, parts: (message.content as readonly ContentBlock[]).flatMap(blockParts) };
}

function blockParts(block: ContentBlock): Array<Record<string, unknown>> {
  switch (block.type) {
    case 'text':
      return [{ type: 'text', content: block.text }];
    case 'reasoning':
      return [{ type: 'reasoning', content: block.text }];
    case 'tool_call':
      return [{ type: 'tool_call', id: block.callId, name: block.name, arguments: parsedArguments(block.arguments) }];
    case 'tool_result':
      return [{ type: 'tool_call_response', id: block.callId, response: block.text }];
    default:
      // Provider-opaque items (encrypted reasoning) are not content a reader can use.
      return [];
  }
}

function parsedArguments(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
