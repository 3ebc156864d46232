/**
 * @module services/model/openai-responses
 * The Responses API wire format: a `ModelRequest` as a `responses.create` body, and a decoder that
 * turns the stream's events into `ModelStreamEvent`s. Pure: no SDK import, no I/O; `openai.ts`
 * sends the body and feeds the decoder.
 */
import { z } from 'zod';
import type { TokenUsage } from '../../storage/storage.js';
import { protocolError, providerFailure, systemText, toolResultText, userText } from './openai-wire.js';
import type { FinishReason, ModelRequest, ModelStreamEvent } from './port.js';
import { BoundedArguments, ResponseBudget } from './response-budget.js';

/**
 * The most output items (messages, reasoning, calls, built-in tools' items) one response may
 * announce. Each keeps a little state while the stream lasts; a real response has a handful.
 */
export const MAX_OUTPUT_ITEMS = 4096;

/** The `provider` of the opaque blocks this format stores (reasoning items, sent back verbatim). */
export const RESPONSES_OPAQUE_PROVIDER = 'openai.responses';

export interface ResponsesSettings {
  model: string;
  reasoningEffort?: string;
  reasoningSummary?: 'auto' | 'concise' | 'detailed' | null;
  /** Ask for encrypted reasoning items so that a stateless conversation keeps the model's reasoning. */
  encryptedReasoning: boolean;
  /** Whether the provider keeps the response (`store`); false keeps the history ours alone. */
  store: boolean;
  maxOutputTokens?: number;
}

type InputItem = Record<string, unknown>;

function opaqueItem(data: unknown, store: boolean): InputItem | null {
  if (!data || typeof data !== 'object' || !('item' in data)) return null;
  const item = (data as { item: unknown }).item;
  if (!item || typeof item !== 'object') return null;
  const copy = { ...(item as InputItem) };
  if (!store) {
    // Without `store`, an item id refers to nothing the provider kept: only the encrypted content
    // carries the item, and an item without it cannot be sent back at all.
    if (typeof copy.encrypted_content !== 'string') return null;
    delete copy.id;
  }
  delete copy.status;
  return copy;
}

/** The `responses.create` body of a request (without `stream`, which the caller sets). */
export function encodeResponsesRequest(request: ModelRequest, settings: ResponsesSettings): Record<string, unknown> {
  const input: InputItem[] = [];
  for (const message of request.messages) {
    switch (message.role) {
      case 'user':
        input.push({ type: 'message', role: 'user', content: [{ type: 'input_text', text: userText(message.content) }] });
        break;
      case 'assistant': {
        const texts: InputItem[] = [];
        const calls: InputItem[] = [];
        for (const block of message.content) {
          if (block.type === 'provider_opaque') {
            const item = block.provider === RESPONSES_OPAQUE_PROVIDER ? opaqueItem(block.data, settings.store) : null;
            if (item) input.push(item);
          } else if (block.type === 'text') {
            // Each output message goes back as its own message, with its phase, as the provider sent it.
            if (block.text !== '') texts.push({ role: 'assistant', content: block.text, ...(block.phase !== undefined ? { phase: block.phase } : {}) });
          } else if (block.type === 'tool_call') {
            calls.push({ type: 'function_call', call_id: block.callId, name: block.name, arguments: block.arguments });
          }
          // Reasoning text travels inside the opaque reasoning item; alone it cannot be sent back.
        }
        input.push(...texts, ...calls);
        break;
      }
      case 'tool':
        input.push({ type: 'function_call_output', call_id: message.callId, output: toolResultText(message) });
        break;
      default: {
        const never: never = message;
        throw new Error(`unknown message role ${JSON.stringify(never)}`);
      }
    }
  }
  const body: Record<string, unknown> = { model: settings.model, input, store: settings.store };
  if (request.system.length > 0) body.instructions = systemText(request.system);
  if (request.tools.length > 0) {
    body.tools = request.tools.map((t) => ({ type: 'function', name: t.name, description: t.description, parameters: t.parameters, strict: false }));
    body.tool_choice = 'auto';
  }
  const effort = request.reasoningEffort ?? settings.reasoningEffort;
  if (effort !== undefined) {
    body.reasoning = { effort, ...(settings.reasoningSummary !== null ? { summary: settings.reasoningSummary ?? 'auto' } : {}) };
  }
  if (settings.encryptedReasoning) body.include = ['reasoning.encrypted_content'];
  const maxOutput = request.maxOutputTokens ?? settings.maxOutputTokens;
  if (maxOutput !== undefined) body.max_output_tokens = maxOutput;
  if (request.responseFormat) {
    body.text = { format: { type: 'json_schema', name: request.responseFormat.name, schema: request.responseFormat.schema, strict: false } };
  }
  return body;
}

// The events the decoder reads; every other event type is ignored (the API adds types over time).
// Output items are read as `unknown`: only the items this port uses (function calls, messages,
// reasoning) are validated, each by its own schema, so that a built-in tool's item (web search,
// tool search with object arguments, MCP, items added later) is ignored whatever its shape.
const functionCallSchema = z.looseObject({
  type: z.literal('function_call'),
  id: z.string().nullish(),
  call_id: z.string().nullish(),
  name: z.string().nullish(),
  arguments: z.string().nullish(),
});
const messageItemSchema = z.looseObject({
  type: z.literal('message'),
  id: z.string().nullish(),
  phase: z.string().nullish(),
  content: z.array(z.unknown()).nullish(),
});
const reasoningItemSchema = z.looseObject({
  type: z.literal('reasoning'),
  id: z.string().nullish(),
  summary: z.array(z.unknown()).nullish(),
  content: z.array(z.unknown()).nullish(),
});
const textPartSchema = z.looseObject({ type: z.string(), text: z.string().nullish(), refusal: z.string().nullish() });
const usageSchema = z
  .object({
    input_tokens: z.number().nullish(),
    output_tokens: z.number().nullish(),
    input_tokens_details: z.object({ cached_tokens: z.number().nullish() }).nullish(),
    output_tokens_details: z.object({ reasoning_tokens: z.number().nullish() }).nullish(),
  })
  .nullish();
const errorBodySchema = z.object({ code: z.union([z.string(), z.number()]).nullish(), message: z.string().nullish(), type: z.string().nullish() });
const responseSchema = z.object({
  id: z.string().nullish(),
  model: z.string().nullish(),
  status: z.string().nullish(),
  usage: usageSchema,
  incomplete_details: z.object({ reason: z.string().nullish() }).nullish(),
  error: errorBodySchema.nullish(),
  output: z.unknown(),
});
const itemEventSchema = z.object({ item: z.unknown() });
const deltaSchema = z.object({ item_id: z.string().nullish(), delta: z.string() });
const eventSchemas = {
  'response.created': z.object({ response: responseSchema }),
  'response.in_progress': z.object({ response: responseSchema }),
  'response.completed': z.object({ response: responseSchema }),
  'response.incomplete': z.object({ response: responseSchema }),
  'response.failed': z.object({ response: responseSchema }),
  'response.output_item.added': itemEventSchema,
  'response.output_item.done': itemEventSchema,
  'response.output_text.delta': deltaSchema,
  'response.refusal.delta': deltaSchema,
  'response.reasoning_summary_text.delta': deltaSchema.extend({ summary_index: z.number().nullish() }),
  'response.reasoning_text.delta': deltaSchema.extend({ content_index: z.number().nullish() }),
  'response.function_call_arguments.delta': deltaSchema,
  'response.function_call_arguments.done': z.object({ item_id: z.string().nullish(), arguments: z.string() }),
  // The reference documents the fields at the top level; OpenAI's streams nest them under `error`.
  error: errorBodySchema.extend({ error: errorBodySchema.nullish() }),
} as const;
type EventType = keyof typeof eventSchemas;
type Parsed<T extends EventType> = z.infer<(typeof eventSchemas)[T]>;
type Response = z.infer<typeof responseSchema>;
type FunctionCallItem = z.infer<typeof functionCallSchema>;

/** The `type` of an output item, if it has one. */
function itemType(item: unknown): string | undefined {
  const type = item && typeof item === 'object' ? (item as { type?: unknown }).type : undefined;
  return typeof type === 'string' ? type : undefined;
}

function usageOf(response: Response): TokenUsage {
  const u = response.usage;
  return {
    inputTokens: u?.input_tokens ?? 0,
    outputTokens: u?.output_tokens ?? 0,
    cachedInputTokens: u?.input_tokens_details?.cached_tokens ?? 0,
    reasoningTokens: u?.output_tokens_details?.reasoning_tokens ?? 0,
  };
}

/**
 * Decodes one Responses stream. `push` returns the events an SSE event produces (tool calls only
 * once their item is done); `finish` returns the completion, which it holds back until the stream
 * has ended so that a second completion is caught. Both throw `ModelError` on protocol faults.
 * `complete` decodes a whole Response object, for a server that answered without streaming.
 */
export class ResponsesDecoder {
  /** True once text, reasoning or a tool call has been produced. */
  semantic = false;
  private terminal: { response: Response; finishReason: FinishReason } | null = null;
  private responseId: string | undefined;
  private model: string | undefined;
  private readonly calls = new Map<string, { callId: string | null; name: string | null; arguments: BoundedArguments }>();
  /** The response's bounds, counted as its deltas arrive, before any is assembled. */
  private readonly budget = new ResponseBudget();
  /** Output items the stream announced; each keeps a little state here (see `MAX_OUTPUT_ITEMS`). */
  private items = 0;
  private readonly emittedCalls = new Set<string>();
  private reasoningPart: string | null = null;
  private refused = false;
  /** The `phase` of each message item (commentary or final answer), sent back with its text. */
  private readonly phases = new Map<string, string>();
  /** The message item the last text came from; `undefined` before any text. */
  private textItem: string | null | undefined = undefined;

  push(raw: unknown): ModelStreamEvent[] {
    const type = (raw as { type?: unknown } | null)?.type;
    if (typeof type !== 'string' || !(type in eventSchemas)) return [];
    const parsed = eventSchemas[type as EventType].safeParse(raw);
    if (!parsed.success) throw protocolError(`malformed ${type} event: ${parsed.error.issues[0]?.message ?? 'invalid'}`, this.semantic);
    return this.handle(type as EventType, parsed.data);
  }

  /**
   * A whole Response object (a server that ignored `stream: true`): its output items in order, as
   * the stream would have delivered them, then its completion. `finish` still returns the completion.
   */
  complete(raw: unknown): ModelStreamEvent[] {
    const parsed = responseSchema.safeParse(raw);
    if (!parsed.success) throw protocolError(`malformed response: ${parsed.error.issues[0]?.message ?? 'invalid'}`, this.semantic);
    const response = parsed.data;
    if (response.status === 'failed') return this.handle('response.failed', { response });
    const out: ModelStreamEvent[] = this.handle('response.created', { response });
    for (const [index, item] of (Array.isArray(response.output) ? response.output : []).entries()) {
      const type = itemType(item);
      const itemId = (item as { id?: unknown }).id;
      // An item without an id still keeps its text apart from the other items' text.
      const id = typeof itemId === 'string' ? itemId : `item_${index}`;
      out.push(...this.handle('response.output_item.added', { item }));
      if (type === 'message') {
        for (const part of messageItemSchema.safeParse(item).data?.content ?? []) {
          const p = textPartSchema.safeParse(part).data;
          const delta = p?.type === 'output_text' ? p.text : p?.type === 'refusal' ? p.refusal : null;
          if (delta) out.push(...this.handle(p!.type === 'refusal' ? 'response.refusal.delta' : 'response.output_text.delta', { item_id: id, delta }));
        }
      } else if (type === 'reasoning') {
        const reasoning = reasoningItemSchema.safeParse(item).data;
        const summary = (reasoning?.summary ?? []).map((part) => textPartSchema.safeParse(part).data?.text ?? '');
        const content = (reasoning?.content ?? []).map((part) => textPartSchema.safeParse(part).data?.text ?? '');
        // The summary is what a stream shows; the raw reasoning text only where there is no summary.
        const parts = summary.some((t) => t !== '') ? summary : content;
        for (const [partIndex, delta] of parts.entries()) out.push(...this.handle('response.reasoning_summary_text.delta', { item_id: id, summary_index: partIndex, delta }));
      }
      out.push(...this.handle('response.output_item.done', { item }));
    }
    out.push(...this.handle(response.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response }));
    return out;
  }

  private handle(type: EventType, event: Parsed<EventType>): ModelStreamEvent[] {
    switch (type) {
      case 'response.created':
      case 'response.in_progress': {
        const { response } = event as Parsed<'response.created'>;
        this.responseId = response.id ?? this.responseId;
        this.model = response.model ?? this.model;
        return [];
      }
      case 'response.output_text.delta':
      case 'response.refusal.delta': {
        const { delta, item_id } = event as Parsed<'response.output_text.delta'>;
        if (type === 'response.refusal.delta') this.refused = true;
        if (delta === '') return [];
        this.budget.count(delta.length, this.semantic);
        this.semantic = true;
        // Each output message is its own text block: the first delta of another item opens one.
        const item = item_id ?? null;
        if (this.textItem !== undefined && item === this.textItem) return [{ type: 'text_delta', delta }];
        const phase = item !== null ? this.phases.get(item) : undefined;
        const opens = this.textItem !== undefined;
        this.textItem = item;
        return [{ type: 'text_delta', delta, ...(opens ? { newBlock: true as const } : {}), ...(phase ? { phase } : {}) }];
      }
      case 'response.reasoning_summary_text.delta':
      case 'response.reasoning_text.delta': {
        const e = event as Parsed<'response.reasoning_summary_text.delta'> & { content_index?: number | null };
        if (e.delta === '') return [];
        this.budget.count(e.delta.length, this.semantic);
        // Summary parts are separate paragraphs: keep them apart in the one reasoning text.
        const part = `${e.item_id ?? ''}:${e.summary_index ?? e.content_index ?? 0}`;
        const separator = this.reasoningPart !== null && this.reasoningPart !== part ? '\n\n' : '';
        this.reasoningPart = part;
        this.semantic = true;
        return [{ type: 'reasoning_delta', delta: separator + e.delta }];
      }
      case 'response.output_item.added': {
        const { item } = event as Parsed<'response.output_item.added'>;
        const kind = itemType(item);
        this.items += 1;
        if (this.items > MAX_OUTPUT_ITEMS) throw protocolError(`the response announced more than ${MAX_OUTPUT_ITEMS} output items`, this.semantic);
        if (kind === 'function_call') {
          const call = this.functionCall(item);
          if (call.id && !this.calls.has(call.id)) this.budget.openCall(this.semantic);
          if (call.id) this.calls.set(call.id, { callId: call.call_id ?? null, name: call.name ?? null, arguments: new BoundedArguments(call.arguments ?? '') });
        } else if (kind === 'message') {
          const message = messageItemSchema.safeParse(item).data;
          if (message?.id && message.phase) this.phases.set(message.id, message.phase);
        }
        return [];
      }
      case 'response.function_call_arguments.delta': {
        const e = event as Parsed<'response.function_call_arguments.delta'>;
        const call = e.item_id ? this.calls.get(e.item_id) : undefined;
        if (!call) return [];
        this.budget.count(e.delta.length, this.semantic);
        call.arguments.append(e.delta);
        return [];
      }
      case 'response.function_call_arguments.done': {
        const e = event as Parsed<'response.function_call_arguments.done'>;
        const call = e.item_id ? this.calls.get(e.item_id) : undefined;
        if (call) call.arguments.set(e.arguments);
        return [];
      }
      case 'response.output_item.done': {
        const { item } = event as Parsed<'response.output_item.done'>;
        const kind = itemType(item);
        if (kind === 'function_call') return this.completeCall(this.functionCall(item));
        if (kind === 'reasoning') return [{ type: 'provider_opaque', provider: RESPONSES_OPAQUE_PROVIDER, data: { item } }];
        return [];
      }
      case 'response.completed':
      case 'response.incomplete': {
        const { response } = event as Parsed<'response.completed'>;
        if (this.terminal) throw protocolError('the response completed twice', this.semantic);
        const out: ModelStreamEvent[] = [];
        // A call the stream never closed with `output_item.done` is complete in the final output.
        for (const item of Array.isArray(response.output) ? response.output : []) {
          if (itemType(item) !== 'function_call') continue;
          const call = this.functionCall(item);
          if (!this.emittedCalls.has(call.call_id ?? call.id ?? '')) out.push(...this.completeCall(call));
        }
        this.terminal = { response, finishReason: this.finishReason(type, response) };
        return out;
      }
      case 'response.failed': {
        const { response } = event as Parsed<'response.failed'>;
        throw providerFailure({ ...response.error, message: response.error?.message ?? 'the response failed' }, this.semantic);
      }
      case 'error': {
        const e = event as Parsed<'error'>;
        const body = e.error ?? e;
        throw providerFailure({ ...body, message: body.message ?? 'the provider reported an error in the stream' }, this.semantic);
      }
      default: {
        const never: never = type;
        return never;
      }
    }
  }

  /** A function call item, validated strictly: the one item kind whose fields this port relies on. */
  private functionCall(item: unknown): FunctionCallItem {
    const parsed = functionCallSchema.safeParse(item);
    if (!parsed.success) throw protocolError(`malformed function_call item: ${parsed.error.issues[0]?.message ?? 'invalid'}`, this.semantic);
    return parsed.data;
  }

  private completeCall(item: FunctionCallItem): ModelStreamEvent[] {
    const assembled = item.id ? this.calls.get(item.id) : undefined;
    const callId = item.call_id ?? assembled?.callId ?? null;
    const name = item.name ?? assembled?.name ?? null;
    if (!callId || !name) throw protocolError(`a function call arrived without ${callId ? 'a name' : 'a call id'}`, this.semantic);
    if (this.emittedCalls.has(callId)) return [];
    // A call never announced (only in the final output) counts here; an announced one counted then.
    if (!assembled) this.budget.openCall(this.semantic);
    this.emittedCalls.add(callId);
    this.semantic = true;
    const args = item.arguments ?? assembled?.arguments.value() ?? '';
    return [{ type: 'tool_call', callId, name, arguments: args }];
  }

  private finishReason(type: 'response.completed' | 'response.incomplete', response: Response): FinishReason {
    if (type === 'response.incomplete') {
      const reason = response.incomplete_details?.reason;
      return reason === 'max_output_tokens' ? 'length' : reason === 'content_filter' ? 'content_filter' : 'incomplete';
    }
    if (this.emittedCalls.size > 0) return 'tool_use';
    return this.refused ? 'refusal' : 'stop';
  }

  /** The completion, once the stream has ended; a stream without one is a protocol error. */
  finish(): ModelStreamEvent[] {
    if (!this.terminal) throw protocolError('the stream ended without a completed response', this.semantic);
    const { response, finishReason } = this.terminal;
    const responseId = response.id ?? this.responseId;
    const actualModel = response.model ?? this.model;
    return [
      {
        type: 'completed',
        usage: usageOf(response),
        finishReason,
        ...(responseId ? { responseId } : {}),
        ...(actualModel ? { actualModel } : {}),
      },
    ];
  }
}
