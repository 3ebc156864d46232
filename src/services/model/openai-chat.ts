/**
 * @module services/model/openai-chat
 * The Chat Completions wire format, as OpenAI and the compatible servers (vLLM, Ollama, llama.cpp,
 * LM Studio) speak it: a `ModelRequest` as a `chat.completions.create` body, and a decoder that
 * assembles tool calls from their indexed fragments. Pure: no SDK import, no I/O.
 */
import { z } from 'zod';
import { TEXT_BLOCK_SEPARATOR } from '../../protocol/content.js';
import type { TokenUsage } from '../../storage/storage.js';
import { errorBodyOf, protocolError, providerFailure, systemText, toolResultText, userText } from './openai-wire.js';
import type { FinishReason, ModelRequest, ModelStreamEvent } from './port.js';
import { BoundedArguments, ResponseBudget } from './response-budget.js';

export interface ChatSettings {
  model: string;
  reasoningEffort?: string;
  maxOutputTokens?: number;
  /** OpenAI takes `max_completion_tokens`; several compatible servers only read `max_tokens`. */
  maxTokensField: 'max_completion_tokens' | 'max_tokens';
  /** Ask for the final usage chunk (`stream_options.include_usage`). */
  includeUsage: boolean;
}

type ChatMessage = Record<string, unknown>;

/** The `chat.completions.create` body of a request (without `stream`, which the caller sets). */
export function encodeChatRequest(request: ModelRequest, settings: ChatSettings): Record<string, unknown> {
  const messages: ChatMessage[] = [];
  // One system message: several chat templates of local servers accept only one, and only first.
  if (request.system.length > 0) messages.push({ role: 'system', content: systemText(request.system) });
  for (const message of request.messages) {
    switch (message.role) {
      case 'user':
        messages.push({ role: 'user', content: userText(message.content) });
        break;
      case 'assistant': {
        const texts: string[] = [];
        const calls: ChatMessage[] = [];
        for (const block of message.content) {
          // One assistant message holds one text here: its output messages as paragraphs.
          if (block.type === 'text') texts.push(block.text);
          else if (block.type === 'tool_call') calls.push({ id: block.callId, type: 'function', function: { name: block.name, arguments: block.arguments } });
          // Reasoning and other providers' opaque items are not part of this format's history.
        }
        const text = texts.filter((t) => t !== '').join(TEXT_BLOCK_SEPARATOR);
        messages.push({ role: 'assistant', content: text === '' && calls.length > 0 ? null : text, ...(calls.length > 0 ? { tool_calls: calls } : {}) });
        break;
      }
      case 'tool':
        messages.push({ role: 'tool', tool_call_id: message.callId, content: toolResultText(message) });
        break;
      default: {
        const never: never = message;
        throw new Error(`unknown message role ${JSON.stringify(never)}`);
      }
    }
  }
  const body: Record<string, unknown> = { model: settings.model, messages };
  if (request.tools.length > 0) {
    body.tools = request.tools.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.parameters } }));
    body.tool_choice = 'auto';
  }
  const effort = request.reasoningEffort ?? settings.reasoningEffort;
  if (effort !== undefined) body.reasoning_effort = effort;
  const maxOutput = request.maxOutputTokens ?? settings.maxOutputTokens;
  if (maxOutput !== undefined) body[settings.maxTokensField] = maxOutput;
  if (settings.includeUsage) body.stream_options = { include_usage: true };
  // Not strict: strict mode refuses optional properties, which a host's zod schema may well have.
  if (request.responseFormat) {
    body.response_format = { type: 'json_schema', json_schema: { name: request.responseFormat.name, schema: request.responseFormat.schema, strict: false } };
  }
  return body;
}

const toolCallFragmentSchema = z.object({
  index: z.number().nullish(),
  id: z.string().nullish(),
  function: z.object({ name: z.string().nullish(), arguments: z.string().nullish() }).nullish(),
});
/**
 * `content` as a string, or as an array of parts: Mistral's magistral models send
 * `{type: 'thinking', thinking: [{type: 'text', text}]}` and `{type: 'text', text}` parts. Parts of
 * other types (images, references) carry no answer text and are skipped.
 */
const contentPartSchema = z.looseObject({
  type: z.string(),
  text: z.string().nullish(),
  thinking: z.union([z.string(), z.array(z.looseObject({ type: z.string().nullish(), text: z.string().nullish() }))]).nullish(),
});
const contentSchema = z.union([z.string(), z.array(z.unknown())]).nullish();
const usageSchema = z.object({
  prompt_tokens: z.number().nullish(),
  completion_tokens: z.number().nullish(),
  prompt_tokens_details: z.object({ cached_tokens: z.number().nullish() }).nullish(),
  completion_tokens_details: z.object({ reasoning_tokens: z.number().nullish() }).nullish(),
  // DeepSeek reports the cache as hit and miss counts.
  prompt_cache_hit_tokens: z.number().nullish(),
});
/**
 * The envelope a whole completion and each chunk of a stream share: `id`, `model`, the choices
 * (`index` and `finish_reason` around what the choice carries) and `usage`.
 */
function envelopeSchema<Choice extends z.ZodRawShape>(choice: Choice) {
  return z.object({
    id: z.string().nullish(),
    model: z.string().nullish(),
    choices: z.array(z.object({ index: z.number().nullish(), ...choice, finish_reason: z.string().nullish() })).nullish(),
    usage: usageSchema.nullish(),
  });
}

const chunkSchema = envelopeSchema({
  delta: z
    .object({
      content: contentSchema,
      refusal: z.string().nullish(),
      // `reasoning_content` (DeepSeek, vLLM, llama.cpp) or `reasoning` (Ollama, LM Studio, vLLM newer).
      reasoning_content: z.string().nullish(),
      reasoning: z.string().nullish(),
      tool_calls: z.array(toolCallFragmentSchema).nullish(),
    })
    .nullish(),
}).extend({
  // Groq reports the usage of a stream inside `x_groq` on its last chunk.
  x_groq: z.object({ usage: usageSchema.nullish() }).nullish(),
});

type Chunk = z.infer<typeof chunkSchema>;

/** The reasoning and the answer text of a `content` field, in order. */
function contentPieces(content: z.infer<typeof contentSchema>): Array<{ reasoning: boolean; text: string }> {
  if (typeof content === 'string') return content === '' ? [] : [{ reasoning: false, text: content }];
  const pieces: Array<{ reasoning: boolean; text: string }> = [];
  for (const raw of content ?? []) {
    const part = contentPartSchema.safeParse(raw).data;
    if (part?.type === 'text' && part.text) pieces.push({ reasoning: false, text: part.text });
    if (part?.type === 'thinking') {
      const thinking = typeof part.thinking === 'string' ? part.thinking : (part.thinking ?? []).map((t) => t.text ?? '').join('');
      if (thinking !== '') pieces.push({ reasoning: true, text: thinking });
    }
  }
  return pieces;
}

const completionSchema = envelopeSchema({ message: z.looseObject({}).nullish() });

interface PartialCall {
  index: number;
  id: string | null;
  name: string | null;
  arguments: BoundedArguments;
}

function finishReasonOf(reason: string, hasCalls: boolean): FinishReason {
  if (hasCalls) return 'tool_use';
  switch (reason) {
    case 'stop':
      return 'stop';
    case 'tool_calls':
    case 'function_call':
      return 'tool_use';
    case 'length':
      return 'length';
    case 'content_filter':
      return 'content_filter';
    default:
      return 'unknown';
  }
}

/**
 * Decodes one Chat Completions stream (choice 0). Tool calls are assembled from fragments keyed by
 * `index` and emitted when the choice finishes; the completion is held back until the stream ends,
 * so that the usage chunk after `finish_reason` is included and a second finish is caught.
 */
export class ChatDecoder {
  /** True once text, reasoning or a tool call has been produced. */
  semantic = false;
  private readonly calls: PartialCall[] = [];
  private finish_reason: string | null = null;
  private usage: TokenUsage | null = null;
  private responseId: string | undefined;
  private model: string | undefined;
  private emittedCalls = 0;
  /** The response's bounds, counted as its deltas arrive (issue: adapters assembled first). */
  private readonly budget = new ResponseBudget();

  push(raw: unknown): ModelStreamEvent[] {
    // An error chunk without the `error` wrapper (`{object: 'error', message, code}`): the provider's failure.
    const kind = raw && typeof raw === 'object' ? ((raw as { object?: unknown }).object ?? (raw as { type?: unknown }).type) : undefined;
    if (kind === 'error') throw providerFailure(errorBodyOf(raw, 'the provider reported an error in the stream'), this.semantic);
    const parsed = chunkSchema.safeParse(raw);
    if (!parsed.success) throw protocolError(`malformed chat completion chunk: ${parsed.error.issues[0]?.message ?? 'invalid'}`, this.semantic);
    return this.handle(parsed.data);
  }

  /**
   * A whole `chat.completion` object (a server that ignored `stream: true`): its message as one
   * chunk's delta, with the finish. `finish` then returns the completion.
   */
  complete(raw: unknown): ModelStreamEvent[] {
    const parsed = completionSchema.safeParse(raw);
    if (!parsed.success) throw protocolError(`malformed chat completion: ${parsed.error.issues[0]?.message ?? 'invalid'}`, this.semantic);
    const { choices, ...rest } = parsed.data;
    const chunk = { ...rest, choices: (choices ?? []).map(({ message, ...choice }) => ({ ...choice, delta: message ?? {} })) };
    const out = this.push(chunk);
    // A completion always ends its response, even from a server that leaves the finish reason out.
    if (this.finish_reason === null) out.push(...this.handle({ choices: [{ index: 0, finish_reason: 'stop' }] }));
    return out;
  }

  private handle(chunk: Chunk): ModelStreamEvent[] {
    if (chunk.id) this.responseId = chunk.id;
    if (chunk.model) this.model = chunk.model;
    const usage = chunk.usage ?? chunk.x_groq?.usage;
    if (usage) {
      this.usage = {
        inputTokens: usage.prompt_tokens ?? 0,
        outputTokens: usage.completion_tokens ?? 0,
        cachedInputTokens: usage.prompt_tokens_details?.cached_tokens ?? usage.prompt_cache_hit_tokens ?? 0,
        reasoningTokens: usage.completion_tokens_details?.reasoning_tokens ?? 0,
      };
    }
    const out: ModelStreamEvent[] = [];
    for (const choice of chunk.choices ?? []) {
      if ((choice.index ?? 0) !== 0) continue;
      const delta = choice.delta;
      if (delta) {
        const reasoning = delta.reasoning_content ?? delta.reasoning;
        if (reasoning) {
          this.budget.count(reasoning.length, this.semantic);
          this.semantic = true;
          out.push({ type: 'reasoning_delta', delta: reasoning });
        }
        for (const piece of contentPieces(delta.content)) {
          this.budget.count(piece.text.length, this.semantic);
          this.semantic = true;
          out.push(piece.reasoning ? { type: 'reasoning_delta', delta: piece.text } : { type: 'text_delta', delta: piece.text });
        }
        if (delta.refusal) {
          this.budget.count(delta.refusal.length, this.semantic);
          this.semantic = true;
          out.push({ type: 'text_delta', delta: delta.refusal });
        }
        for (const [position, fragment] of (delta.tool_calls ?? []).entries()) this.addFragment(fragment, position);
      }
      if (choice.finish_reason) {
        if (this.finish_reason !== null) throw protocolError('the response finished twice', this.semantic);
        this.finish_reason = choice.finish_reason;
        out.push(...this.completeCalls());
      }
    }
    return out;
  }

  private addFragment(fragment: z.infer<typeof toolCallFragmentSchema>, position: number): void {
    if (this.finish_reason !== null) throw protocolError('a tool call fragment arrived after the response finished', this.semantic);
    // Servers that send whole calls in one chunk may leave out `index`: the position stands in.
    const index = fragment.index ?? position;
    let call = this.calls.findLast((c) => c.index === index);
    // A fragment with a new id at a used index starts another call (some servers reuse index 0).
    if (call && fragment.id && call.id && fragment.id !== call.id) call = undefined;
    if (!call) {
      this.budget.openCall(this.semantic);
      call = { index, id: null, name: null, arguments: new BoundedArguments() };
      this.calls.push(call);
    }
    if (fragment.id) call.id = fragment.id;
    if (fragment.function?.name) call.name = (call.name ?? '') === '' ? fragment.function.name : call.name;
    if (fragment.function?.arguments) {
      this.budget.count(fragment.function.arguments.length, this.semantic);
      call.arguments.append(fragment.function.arguments);
    }
  }

  private completeCalls(): ModelStreamEvent[] {
    const out: ModelStreamEvent[] = [];
    for (const call of this.calls.slice(this.emittedCalls)) {
      if (!call.id || !call.name) throw protocolError(`tool call ${call.index} arrived without ${call.id ? 'a name' : 'an id'}`, this.semantic);
      this.semantic = true;
      out.push({ type: 'tool_call', callId: call.id, name: call.name, arguments: call.arguments.value() });
    }
    this.emittedCalls = this.calls.length;
    return out;
  }

  /** The completion, once the stream has ended; a stream without a finish is a protocol error. */
  finish(): ModelStreamEvent[] {
    if (this.finish_reason === null) throw protocolError('the stream ended without a completed response', this.semantic);
    return [
      {
        type: 'completed',
        usage: this.usage ?? { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 },
        finishReason: finishReasonOf(this.finish_reason, this.calls.length > 0),
        ...(this.responseId ? { responseId: this.responseId } : {}),
        ...(this.model ? { actualModel: this.model } : {}),
      },
    ];
  }
}
