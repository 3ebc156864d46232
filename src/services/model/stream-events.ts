/**
 * @module services/model/stream-events
 * The model port is a trust boundary (issue 13, point 3): any `ModelPort`, including one a host
 * writes, may yield anything. Every event is parsed here before the runtime consumes it, and an event
 * that does not fit ends the call as `model_protocol_error` before any tool runs. A valid event comes
 * back with its text made storable (NUL and unpaired surrogates replaced, see `protocol/storable-text`).
 */
import { z } from 'zod';
import { ModelError } from '../../errors.js';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../../protocol/json-depth.js';
import { storableText, storableValue } from '../../protocol/storable-text.js';
import type { FinishReason, ModelStreamEvent } from './port.js';

/**
 * The largest arguments text of one tool call, in UTF-16 characters (4 Mi: about a million tokens,
 * past any real model's output, and four times `write`'s own content limit). A hostile or broken
 * port sending more used to carry the whole text through storage, every later request copy and the
 * trace (200 MB took two minutes and 3.7 GB of memory); now the call keeps only a small marker,
 * and validation answers it with `invalid_arguments`, so the turn goes on and the model can retry
 * smaller.
 */
export const MAX_TOOL_ARGUMENTS_CHARS = 4 * 1024 * 1024;

/**
 * The most text one model response may carry in all (text, reasoning and tool-call arguments
 * together, in UTF-16 characters). Past it the call ends as `model_protocol_error`: no real
 * response is this large, and an endless stream would otherwise grow the runtime's memory until it
 * failed.
 */
export const MAX_RESPONSE_CHARS = 16 * 1024 * 1024;
/**
 * The most characters one live `text_delta` or `reasoning_delta` update carries. A provider may send
 * its whole answer as one delta (up to `MAX_RESPONSE_CHARS`); it became one update of that size for
 * every reader, the SSE and inspector streams, and a slot of the session's 512-update replay ring,
 * so a few such responses held gigabytes there. Split into pieces of this size, the ring holds at
 * most 512 of them (16 MiB of UTF-16), and a reader gets the same text in order. What is stored is
 * unchanged: the message is the whole text.
 */
export const MAX_DELTA_CHARS = 16 * 1024;

/** `delta` in pieces of at most `MAX_DELTA_CHARS`, never splitting a surrogate pair. */
export function deltaPieces(delta: string, max = MAX_DELTA_CHARS): string[] {
  if (delta.length <= max) return [delta];
  const pieces: string[] = [];
  for (let start = 0; start < delta.length; ) {
    let end = Math.min(delta.length, start + max);
    const code = delta.charCodeAt(end - 1);
    // A high surrogate at the cut goes with its low half into the next piece.
    if (end < delta.length && code >= 0xd800 && code <= 0xdbff) end -= 1;
    pieces.push(delta.slice(start, end));
    start = end;
  }
  return pieces;
}

/**
 * The most tool calls one model response may make. Each call runs serially and its result (up to
 * 32,000 bytes) enters every later request, so thousands of distinct calls in one response wedged
 * the turn for minutes and grew the next request past any context window. Past it the call ends as
 * `model_protocol_error` before any of its tools runs.
 */
export const MAX_TOOL_CALLS_PER_RESPONSE = 256;

/** Tool names and call ids longer than this end the call as `model_protocol_error` (providers use at most 64 and a few dozen). */
export const MAX_TOOL_CALL_ID_CHARS = 1024;

const OVERSIZED_KEY = 'openwork_oversized_arguments';

/** The arguments a tool call keeps in place of a text over `MAX_TOOL_ARGUMENTS_CHARS`. */
export function oversizedArguments(chars: number): string {
  return JSON.stringify({ [OVERSIZED_KEY]: chars });
}

/** The length of the arguments the marker stands for, or null when `text` is not the marker. */
export function oversizedArgumentsChars(text: string): number | null {
  if (text.length > 64 || !text.startsWith(`{"${OVERSIZED_KEY}":`)) return null;
  try {
    const value = (JSON.parse(text) as Record<string, unknown>)[OVERSIZED_KEY];
    return typeof value === 'number' ? value : null;
  } catch {
    return null;
  }
}

/** A token count: a finite, non-negative integer (NaN, Infinity and fractions are refused). */
const tokenCount = z.number().int().nonnegative();

const finishReasons = ['stop', 'tool_use', 'length', 'content_filter', 'refusal', 'incomplete', 'unknown'] as const satisfies readonly FinishReason[];

export const modelStreamEventSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text_delta'), delta: z.string(), newBlock: z.literal(true).optional(), phase: z.string().optional() }),
  z.object({ type: z.literal('reasoning_delta'), delta: z.string() }),
  z.object({
    type: z.literal('tool_call'),
    callId: z.string().trim().min(1, 'a tool call needs a call id'),
    name: z.string().trim().min(1, 'a tool call needs a tool name'),
    arguments: z.string(),
  }),
  z.object({ type: z.literal('provider_opaque'), provider: z.string().min(1), data: z.unknown() }),
  z.object({
    type: z.literal('completed'),
    usage: z.object({
      inputTokens: tokenCount,
      outputTokens: tokenCount,
      cachedInputTokens: tokenCount,
      reasoningTokens: tokenCount,
    }),
    responseId: z.string().optional(),
    finishReason: z.enum(finishReasons).optional(),
    actualModel: z.string().optional(),
  }),
  z.object({ type: z.literal('retry'), attempt: z.number().int().positive(), reason: z.string(), delayMs: z.number().nonnegative().optional() }),
]);

// The schema and the port's event type must describe the same events.
type Parsed = z.infer<typeof modelStreamEventSchema>;
const _sameShape: [Parsed extends ModelStreamEvent ? true : false, ModelStreamEvent extends Parsed ? true : false] = [true, true];
void _sameShape;

/** "a text_delta event", or "an event" when it has no type to name. */
export function describeEvent(event: unknown): string {
  return event !== null && typeof event === 'object' && typeof (event as { type?: unknown }).type === 'string'
    ? `a ${JSON.stringify((event as { type: string }).type.slice(0, 64))} event`
    : `an event (${event === null ? 'null' : typeof event})`;
}

const finishReasonSet: ReadonlySet<unknown> = new Set(finishReasons);

/** A plain object (an object literal or `JSON.parse` output): the only kind `fitsPlainly` reads. */
function isPlainRecord(value: unknown): value is Record<string, unknown> {
  if (value === null || typeof value !== 'object') return false;
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}

const isCount = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0;
/** An optional key: absent, or present with a value `check` accepts (present as undefined is left to zod). */
const optional = (record: Record<string, unknown>, key: string, check: (value: unknown) => boolean): boolean =>
  !(key in record) || check(record[key]);
const isString = (value: unknown): value is string => typeof value === 'string';

/**
 * The event as `modelStreamEventSchema` would return it, for the plain shapes a model port sends
 * every step, or undefined to let the schema decide (anything unusual, and every event it refuses).
 * zod's parse was the largest item of the model-call actor's own CPU per step (issue 14 point 2);
 * this reads the same fields, accepts only what the schema accepts, and returns the same object (the
 * known keys in the schema's order, names trimmed as the schema trims them), which
 * `test/services/model/stream-events.test.ts` checks against the schema itself.
 */
export function fitsPlainly(event: unknown): ModelStreamEvent | undefined {
  if (!isPlainRecord(event)) return undefined;
  switch (event.type) {
    case 'text_delta': {
      if (!isString(event.delta) || !optional(event, 'newBlock', (v) => v === true) || !optional(event, 'phase', isString)) return undefined;
      return {
        type: 'text_delta',
        delta: event.delta,
        ...('newBlock' in event ? { newBlock: true as const } : {}),
        ...('phase' in event ? { phase: event.phase as string } : {}),
      };
    }
    case 'reasoning_delta':
      return isString(event.delta) ? { type: 'reasoning_delta', delta: event.delta } : undefined;
    case 'tool_call': {
      if (!isString(event.callId) || !isString(event.name) || !isString(event.arguments)) return undefined;
      const callId = event.callId.trim();
      const name = event.name.trim();
      if (callId === '' || name === '') return undefined;
      return { type: 'tool_call', callId, name, arguments: event.arguments };
    }
    case 'completed': {
      const usage = event.usage;
      if (
        !isPlainRecord(usage) ||
        !isCount(usage.inputTokens) ||
        !isCount(usage.outputTokens) ||
        !isCount(usage.cachedInputTokens) ||
        !isCount(usage.reasoningTokens) ||
        !optional(event, 'responseId', isString) ||
        !optional(event, 'finishReason', (v) => finishReasonSet.has(v)) ||
        !optional(event, 'actualModel', isString)
      ) {
        return undefined;
      }
      return {
        type: 'completed',
        usage: {
          inputTokens: usage.inputTokens,
          outputTokens: usage.outputTokens,
          cachedInputTokens: usage.cachedInputTokens,
          reasoningTokens: usage.reasoningTokens,
        },
        ...('responseId' in event ? { responseId: event.responseId as string } : {}),
        ...('finishReason' in event ? { finishReason: event.finishReason as FinishReason } : {}),
        ...('actualModel' in event ? { actualModel: event.actualModel as string } : {}),
      };
    }
    default:
      // provider_opaque and retry are rare: the schema reads them.
      return undefined;
  }
}

/**
 * The event, checked; throws `model_protocol_error` when it does not fit. Deltas are returned as
 * they came: the caller makes them storable with a `StorableTextStream`, which keeps a surrogate
 * pair split across two deltas intact. Every other string is made storable here.
 */
export function checkModelStreamEvent(event: unknown, semanticOutput: boolean): ModelStreamEvent {
  const fast = fitsPlainly(event);
  const parsed = fast !== undefined ? { success: true as const, data: fast } : modelStreamEventSchema.safeParse(event);
  if (!parsed.success) {
    throw new ModelError(
      'model_protocol_error',
      storableText(`the model stream sent ${describeEvent(event)} that does not fit the model port: ${parsed.error.issues.map((i) => `${i.path.join('.') || 'event'}: ${i.message}`).join('; ')}`),
      { semanticOutput },
    );
  }
  const checked = parsed.data;
  switch (checked.type) {
    case 'text_delta':
      return checked.phase !== undefined ? { ...checked, phase: storableText(checked.phase) } : checked;
    case 'reasoning_delta':
      return checked;
    case 'completed':
      return {
        ...checked,
        ...(checked.responseId !== undefined ? { responseId: storableText(checked.responseId) } : {}),
        ...(checked.actualModel !== undefined ? { actualModel: storableText(checked.actualModel) } : {}),
      };
    case 'retry':
      return { ...checked, reason: storableText(checked.reason) };
    case 'tool_call': {
      if (checked.callId.length > MAX_TOOL_CALL_ID_CHARS || checked.name.length > MAX_TOOL_CALL_ID_CHARS) {
        throw new ModelError(
          'model_protocol_error',
          `the model stream sent a tool call whose ${checked.callId.length > MAX_TOOL_CALL_ID_CHARS ? 'call id' : 'name'} is longer than ${MAX_TOOL_CALL_ID_CHARS} characters`,
          { semanticOutput },
        );
      }
      const args = checked.arguments.length > MAX_TOOL_ARGUMENTS_CHARS ? oversizedArguments(checked.arguments.length) : storableText(checked.arguments);
      return { type: 'tool_call', callId: storableText(checked.callId), name: storableText(checked.name), arguments: args };
    }
    case 'provider_opaque':
      // Stored, hashed and sent back whole: a value nested past the bound would overflow the stack there.
      if (nestsDeeperThan(checked.data, MAX_JSON_DEPTH)) {
        throw new ModelError('model_protocol_error', `the model stream sent provider data nested deeper than ${MAX_JSON_DEPTH} levels`, { semanticOutput });
      }
      return { type: 'provider_opaque', provider: storableText(checked.provider), data: storableValue(checked.data) };
    default: {
      const never: never = checked;
      throw new ModelError('model_protocol_error', `unknown model stream event ${JSON.stringify(never)}`);
    }
  }
}
