/**
 * @module inspection/trace
 * `turnTrace`: the stored trace of one turn, read back from the trace tables for the inspector's
 * trace view. Model calls come with the request that was sent (rebuilt from the request slot's
 * message pointers and the message rows, reference §9.2 principle 5), the system context, the
 * tool definitions' names, the response, tokens, latency, retries and the finish reason; tool
 * calls with their arguments, result, duration and permission decision. Everything comes from
 * storage: a turn of an earlier process, or one loaded from Postgres, shows the same.
 */
import { InspectionError } from '../../errors.js';
import type { ContentBlock, StoredMessage } from '../../protocol/content.js';
import type { SessionStorage, TraceSpanPayloadRecord, TraceSpanRecord, TurnRecord } from '../../storage/storage.js';

/** One message of a model request as the trace view shows it. */
export interface TraceRequestMessage {
  /** The stored message's sequence; null for one synthesised into the request only. */
  sequence: number | null;
  role: string;
  kind: string | null;
  toolName: string | null;
  content: unknown;
}

/** What every span of the trace view carries, whatever its kind. */
export interface TraceSpanTimes {
  spanId: string;
  parentSpanId: string | null;
  status: string;
  startedAt: string;
  endedAt: string | null;
  durationMs: number | null;
}

export interface TraceModelCall extends TraceSpanTimes {
  kind: 'model_call';
  name: string;
  modelCallIndex: number | null;
  attempts: number | null;
  /** Attempts after the first: the adapter's retries of this submission. */
  retries: number;
  inputTokens: number | null;
  outputTokens: number | null;
  finishReason: string | null;
  /** Time to the first token and the whole stream, as the call measured them. */
  ttftMs: number | null;
  streamMs: number | null;
  errorCode: string | null;
  errorMessage: string | null;
  request: { messages: TraceRequestMessage[]; maxOutputTokens: number | null; truncated: boolean } | null;
  systemContext: unknown;
  toolNames: string[];
  response: { messageId: string | null; content: unknown } | null;
  attributes: Record<string, unknown>;
}

export interface TraceToolCall extends TraceSpanTimes {
  kind: 'tool_call';
  toolName: string;
  providerCallId: string | null;
  /** The arguments as the model wrote them (parsed when they are JSON). */
  arguments: unknown;
  result: { status: string; text: string; error: unknown } | null;
  permissionDecision: string | null;
  permissionDecisionSource: string | null;
  permissionWaitMs: number | null;
  errorCode: string | null;
  errorMessage: string | null;
  attributes: Record<string, unknown>;
}

export interface TraceCompaction extends TraceSpanTimes {
  kind: 'compaction';
  name: string;
  errorCode: string | null;
  errorMessage: string | null;
  attributes: Record<string, unknown>;
}

export type TraceEntry = TraceModelCall | TraceToolCall | TraceCompaction;

/**
 * How much of a turn's trace was captured (reference §4.14, §11.1 `TraceCompleteness`), derived at
 * read time from the turn's own counters, which the business writes keep apart from the trace:
 * expected model calls = `model_submission_count`, expected tool calls = `tool_call_count`; captured
 * = root-level model spans (summary attempts hang under their compaction) and every tool span.
 * `none`: something was expected and nothing captured; `complete`: the turn is not running, both
 * counts match and no span is orphaned, running or `outcome_unknown`; otherwise `partial`.
 */
export interface TraceCompleteness {
  state: 'complete' | 'partial' | 'none';
  expectedModelCalls: number;
  capturedModelCalls: number;
  expectedToolCalls: number;
  capturedToolCalls: number;
  /** Tool spans whose parent span is not in the trace. */
  orphanToolSpans: number;
  runningSpans: number;
  outcomeUnknownSpans: number;
}

export function traceCompleteness(turn: Pick<TurnRecord, 'status' | 'modelSubmissionCount' | 'toolCallCount'>, spans: readonly TraceSpanRecord[]): TraceCompleteness {
  const ids = new Set(spans.map((s) => s.id));
  const models = spans.filter((s) => s.kind === 'model_call' && s.parentSpanId === null);
  const tools = spans.filter((s) => s.kind === 'tool_call');
  const counts = {
    expectedModelCalls: turn.modelSubmissionCount,
    capturedModelCalls: models.length,
    expectedToolCalls: turn.toolCallCount,
    capturedToolCalls: tools.length,
    orphanToolSpans: tools.filter((s) => s.parentSpanId !== null && !ids.has(s.parentSpanId)).length,
    runningSpans: spans.filter((s) => s.status === 'running').length,
    outcomeUnknownSpans: spans.filter((s) => s.status === 'outcome_unknown').length,
  };
  const expected = counts.expectedModelCalls + counts.expectedToolCalls;
  const captured = counts.capturedModelCalls + counts.capturedToolCalls;
  const complete =
    turn.status !== 'running' &&
    counts.capturedModelCalls === counts.expectedModelCalls &&
    counts.capturedToolCalls === counts.expectedToolCalls &&
    counts.orphanToolSpans === 0 &&
    counts.runningSpans === 0 &&
    counts.outcomeUnknownSpans === 0;
  return { state: expected > 0 && captured === 0 ? 'none' : complete ? 'complete' : 'partial', ...counts };
}

export interface TurnTrace {
  turn: {
    turnId: string;
    sequence: number;
    status: string;
    model: string;
    startedAt: string;
    endedAt: string | null;
    durationMs: number | null;
    inputTokens: number | null;
    outputTokens: number | null;
    cachedInputTokens: number | null;
    reasoningTokens: number | null;
    modelCallCount: number;
    toolCallCount: number;
    errorCode: string | null;
    errorMessage: string | null;
  };
  spans: TraceEntry[];
  completeness: TraceCompleteness;
}

/** A turn of the list the trace view picks from. */
export interface TurnSummary {
  turnId: string;
  sequence: number;
  status: string;
  startedAt: string;
  endedAt: string | null;
  modelCallCount: number;
  toolCallCount: number;
}

function durationOf(startedAt: string, endedAt: string | null): number | null {
  return endedAt === null ? null : Math.max(0, Date.parse(endedAt) - Date.parse(startedAt));
}

/**
 * A span's status and times, as every kind of span view shows them. The views spread it where these
 * four fields stood, so that their JSON keeps its order.
 */
function spanTimes(span: TraceSpanRecord): Pick<TraceSpanTimes, 'status' | 'startedAt' | 'endedAt' | 'durationMs'> {
  return { status: span.status, startedAt: span.startedAt, endedAt: span.endedAt, durationMs: durationOf(span.startedAt, span.endedAt) };
}

function numberAttr(attributes: Record<string, unknown>, key: string): number | null {
  const value = attributes[key];
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

function stringAttr(attributes: Record<string, unknown>, key: string): string | null {
  const value = attributes[key];
  return typeof value === 'string' ? value : null;
}

function parseArguments(text: string): unknown {
  try {
    return text.trim() === '' ? {} : (JSON.parse(text) as unknown);
  } catch {
    return text;
  }
}

function requestMessage(m: StoredMessage): TraceRequestMessage {
  return { sequence: m.sequence, role: m.role, kind: m.kind, toolName: m.toolName ?? null, content: m.content };
}

/**
 * The request slot holds pointers (`[from, to]` sequence ranges of stored messages, or a
 * synthesised message); a truncated slot holds only a preview, which is shown as it is.
 */
function rebuildRequest(payload: TraceSpanPayloadRecord | undefined, bySequence: Map<number, StoredMessage>): TraceModelCall['request'] {
  if (!payload) return null;
  const body = payload.body as { format?: unknown; messages?: unknown; maxOutputTokens?: unknown } | null;
  if (payload.truncated || !body || body.format !== 'openwork.request-pointers/1' || !Array.isArray(body.messages)) {
    return { messages: [{ sequence: null, role: 'preview', kind: null, toolName: null, content: payload.body }], maxOutputTokens: null, truncated: true };
  }
  const messages: TraceRequestMessage[] = [];
  for (const part of body.messages as unknown[]) {
    if (Array.isArray(part) && typeof part[0] === 'number' && typeof part[1] === 'number') {
      for (let sequence = part[0]; sequence <= part[1]; sequence += 1) {
        const m = bySequence.get(sequence);
        if (m) messages.push(requestMessage(m));
      }
    } else if (part && typeof part === 'object' && 'synthetic' in part) {
      const synthetic = (part as { synthetic: { role?: unknown; content?: unknown } }).synthetic;
      messages.push({ sequence: null, role: typeof synthetic?.role === 'string' ? synthetic.role : 'synthetic', kind: 'synthetic', toolName: null, content: synthetic?.content ?? synthetic });
    }
  }
  return { messages, maxOutputTokens: typeof body.maxOutputTokens === 'number' ? body.maxOutputTokens : null, truncated: false };
}

function toolNamesOf(payload: TraceSpanPayloadRecord | undefined): string[] {
  if (!payload || !Array.isArray(payload.body)) return [];
  return (payload.body as unknown[]).map((t) => (t && typeof t === 'object' && typeof (t as { name?: unknown }).name === 'string' ? (t as { name: string }).name : '?'));
}

function modelCallOf(span: TraceSpanRecord, slots: Map<string, TraceSpanPayloadRecord>, bySequence: Map<number, StoredMessage>, byId: Map<string, StoredMessage>): TraceModelCall {
  const a = span.attributes;
  const responseMessage = span.responseMessageId ? byId.get(span.responseMessageId) : undefined;
  const responseSlot = slots.get('response');
  return {
    kind: 'model_call',
    spanId: span.id,
    parentSpanId: span.parentSpanId,
    name: span.name,
    ...spanTimes(span),
    modelCallIndex: numberAttr(a, 'modelCallIndex'),
    attempts: span.attemptCount,
    retries: Math.max(0, (span.attemptCount ?? 1) - 1),
    inputTokens: span.inputTokens,
    outputTokens: span.outputTokens,
    finishReason: stringAttr(a, 'finishReason'),
    ttftMs: numberAttr(a, 'ttftMs'),
    streamMs: numberAttr(a, 'streamMs'),
    errorCode: span.errorCode,
    errorMessage: span.errorMessage,
    request: rebuildRequest(slots.get('request'), bySequence),
    systemContext: slots.get('system_context')?.body ?? null,
    toolNames: toolNamesOf(slots.get('tool_definitions')),
    response: responseMessage
      ? { messageId: responseMessage.id, content: responseMessage.content }
      : responseSlot
        ? { messageId: null, content: responseSlot.body }
        : null,
    attributes: a,
  };
}

function toolCallOf(span: TraceSpanRecord, turnMessages: StoredMessage[]): TraceToolCall {
  const callId = span.providerCallId;
  let args: unknown = null;
  let result: TraceToolCall['result'] = null;
  for (const m of turnMessages) {
    for (const block of m.content as ContentBlock[]) {
      if (block.type === 'tool_call' && block.callId === callId && args === null) args = parseArguments(block.arguments);
      if (block.type === 'tool_result' && block.callId === callId) result = { status: block.status, text: block.text, error: block.error ?? null };
    }
  }
  const a = span.attributes;
  return {
    kind: 'tool_call',
    spanId: span.id,
    parentSpanId: span.parentSpanId,
    ...spanTimes(span),
    toolName: span.resolvedToolName ?? span.requestedToolName ?? span.name,
    providerCallId: callId,
    arguments: args,
    result,
    permissionDecision: stringAttr(a, 'permissionDecision'),
    permissionDecisionSource: stringAttr(a, 'permissionDecisionSource'),
    permissionWaitMs: span.permissionWaitMs,
    errorCode: span.errorCode,
    errorMessage: span.errorMessage,
    attributes: a,
  };
}

export function turnSummary(turn: TurnRecord): TurnSummary {
  return {
    turnId: turn.id,
    sequence: turn.sequence,
    status: turn.status,
    startedAt: turn.startedAt,
    endedAt: turn.endedAt,
    modelCallCount: turn.modelCallCount,
    toolCallCount: turn.toolCallCount,
  };
}

/**
 * The trace of `turnId`, which must belong to `sessionId` (`turn_not_found` otherwise: a page
 * cannot read another session's turn through this one's address).
 *
 * @example
 * const trace = await turnTrace(core.storage, sessionId, turnId);
 * trace.spans.filter((s) => s.kind === 'model_call').map((s) => s.finishReason);
 */
export async function turnTrace(storage: SessionStorage, sessionId: string, turnId: string): Promise<TurnTrace> {
  const turn = await storage.getTurn(turnId);
  if (!turn || turn.sessionId !== sessionId) {
    throw new InspectionError('turn_not_found', `session ${sessionId} has no turn ${turnId}`);
  }
  const [spans, messages] = await Promise.all([storage.listTraceSpans({ turnId }), storage.listMessages(sessionId)]);
  const payloads = await storage.listTraceSpanPayloads(spans.map((s) => s.id));
  const slotsBySpan = new Map<string, Map<string, TraceSpanPayloadRecord>>();
  for (const p of payloads) {
    if (!slotsBySpan.has(p.spanId)) slotsBySpan.set(p.spanId, new Map());
    slotsBySpan.get(p.spanId)!.set(p.slot, p);
  }
  const bySequence = new Map(messages.map((m) => [m.sequence, m]));
  const byId = new Map(messages.map((m) => [m.id, m]));
  const turnMessages = messages.filter((m) => m.turnId === turnId);
  const entries: TraceEntry[] = spans.map((span) => {
    const slots = slotsBySpan.get(span.id) ?? new Map<string, TraceSpanPayloadRecord>();
    switch (span.kind) {
      case 'model_call':
        return modelCallOf(span, slots, bySequence, byId);
      case 'tool_call':
        return toolCallOf(span, turnMessages);
      case 'compaction':
        return {
          kind: 'compaction',
          spanId: span.id,
          parentSpanId: span.parentSpanId,
          name: span.name,
          ...spanTimes(span),
          errorCode: span.errorCode,
          errorMessage: span.errorMessage,
          attributes: span.attributes,
        };
      default: {
        const never: never = span.kind;
        throw new InspectionError('trace_unreadable', `unknown span kind ${String(never)}`);
      }
    }
  });
  return {
    turn: {
      turnId: turn.id,
      sequence: turn.sequence,
      status: turn.status,
      model: turn.resolvedModelName,
      startedAt: turn.startedAt,
      endedAt: turn.endedAt,
      durationMs: durationOf(turn.startedAt, turn.endedAt),
      inputTokens: turn.inputTokens,
      outputTokens: turn.outputTokens,
      cachedInputTokens: turn.cachedInputTokens,
      reasoningTokens: turn.reasoningTokens,
      modelCallCount: turn.modelCallCount,
      toolCallCount: turn.toolCallCount,
      errorCode: turn.errorCode,
      errorMessage: turn.errorMessage,
    },
    spans: entries,
    completeness: traceCompleteness(turn, spans),
  };
}
