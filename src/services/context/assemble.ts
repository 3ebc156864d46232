/**
 * @module services/context/assemble
 * The one assembly step where the three input regions meet (reference §2.5-§2.8): System Context,
 * the Conversation (as a request copy: projected and normalised), and the tool surface. It is
 * deterministic and never mutates the conversation or the database.
 */
import { OpenworkError } from '../../errors.js';
import { modelToolStatus, type MessageKind, type StoredMessage, type TextBlock, type ToolCallBlock, type ToolResultBlock } from '../../protocol/content.js';
import type { ModelMessage, ModelRequest, SystemPart, ToolDefinition } from '../model/port.js';
import type { ConversationItem } from './chat-state.js';
import { cachedJsonBytes, estimateArrayTokens, estimateTokens, jsonBytes } from './estimate.js';
import { isPrunable, prunedText, spillPath } from './prune.js';
import { INTERRUPTED_RESULT_TEXT } from '../../protocol/model-texts.js';

/** The constant text of a synthesized result (seed 000 §10) lives with every other text the model sees. */
export { INTERRUPTED_RESULT_TEXT };

export const SYSTEM_CONTEXT_KEY = 'core/agent-system';
export const SYSTEM_PART_MAX_TOKENS = 10_000;
export const TOOL_RESULT_PROJECTION_MAX_TOKENS = 8_000;

export interface ContextBudgetEstimate {
  systemContextTokens: number;
  conversationTokens: number;
  toolSurfaceTokens: number;
  estimatedInputTokens: number;
  reservedOutputTokens: number;
}

export interface PreparedModelCall {
  request: ModelRequest;
  estimate: ContextBudgetEstimate;
  /** Per conversation message: the persisted id, or "synthetic". */
  provenance: string[];
  /** Per conversation message: the persisted message's sequence, or null for a synthetic item. */
  sequences: Array<number | null>;
  projection: { truncatedToolResults: number; originalToolResultTokens: number; projectedToolResultTokens: number };
  /** Old results shown pruned in this request copy. */
  prunedToolResults: number;
}

export class AssemblyError extends OpenworkError {
  constructor(message: string) {
    super('model_protocol_error', `request assembly failed: ${message}`);
  }
}

/** Builds the single `core/agent-system` part: agent prompt, then the tool surface's prompt rules. */
export function buildSystemContext(agentPrompt: string, toolRules: string): SystemPart[] {
  const content = [agentPrompt.trim(), toolRules.trim()].filter((s) => s.length > 0).join('\n\n');
  return [{ key: SYSTEM_CONTEXT_KEY, content }];
}

/**
 * The content each system part had when it was last checked. A part's checks (its token estimate
 * serialises the whole prompt) run again only when its content changed: the parts are shared values
 * reused by every model call (issue 14, perf-alloc).
 */
const checkedParts = new WeakMap<SystemPart, string>();

function validateSystem(parts: readonly SystemPart[]): void {
  for (let i = 0; i < parts.length; i += 1) {
    const part = parts[i]!;
    if (part.key.trim() === '') throw new AssemblyError('system context key is empty');
    // A handful of parts: a pairwise look needs no set per call.
    for (let j = 0; j < i; j += 1) if (parts[j]!.key === part.key) throw new AssemblyError(`duplicate system context key ${part.key}`);
    if (checkedParts.get(part) === part.content) continue;
    if (part.content.trim() === '') throw new AssemblyError(`system context part ${part.key} is empty`);
    const tokens = estimateTokens(part.content);
    if (tokens >= SYSTEM_PART_MAX_TOKENS) {
      throw new AssemblyError(`system context part ${part.key} is ${tokens} tokens, limit ${SYSTEM_PART_MAX_TOKENS}`);
    }
    checkedParts.set(part, part.content);
  }
}

/** Head 75% and tail 25% of the token budget of one oversized tool result (reference §2.5 step 2). */
export function projectToolResultText(text: string, maxTokens = TOOL_RESULT_PROJECTION_MAX_TOKENS): { text: string; truncated: boolean } {
  // Measured on the text's own UTF-8 bytes (4 per token), so the cap meets the tools' 32,000-byte
  // result limit exactly (reference §10.2: the two are aligned); JSON escaping would cut again.
  const budget = maxTokens * 4;
  const size = Buffer.byteLength(text, 'utf8');
  if (size <= budget) return { text, truncated: false };
  const chars = [...text];
  const markerReserve = 64;
  const headBudget = Math.floor((budget - markerReserve) * 0.75);
  const tailBudget = Math.floor((budget - markerReserve) * 0.25);
  let headEnd = 0;
  for (let used = 0; headEnd < chars.length; headEnd += 1) {
    const b = Buffer.byteLength(chars[headEnd]!, 'utf8');
    if (used + b > headBudget) break;
    used += b;
  }
  let tailStart = chars.length;
  for (let used = 0; tailStart > headEnd; tailStart -= 1) {
    const b = Buffer.byteLength(chars[tailStart - 1]!, 'utf8');
    if (used + b > tailBudget) break;
    used += b;
  }
  const omitted = tailStart - headEnd;
  return { text: `${chars.slice(0, headEnd).join('')}\n[... ${omitted} characters truncated ...]\n${chars.slice(tailStart).join('')}`, truncated: true };
}

function textBlocks(message: StoredMessage): TextBlock[] {
  return message.content.filter((b): b is TextBlock => b.type === 'text');
}

export interface RequestCopyOptions {
  /** Results at or below this message sequence are pruned when long (reference §3.2). */
  pruneWatermark?: number | null;
  /** Where pruned results' full text lives: `<spillDir>/<session-id>/<call-id>.txt`. */
  spillDir?: string | null;
}

/** What `normalizeConversation` returns: the request copy and, per message, where it came from. */
export interface NormalizedConversation {
  messages: ModelMessage[];
  provenance: string[];
  projection: PreparedModelCall['projection'];
  /** The JSON byte length of each message of `messages`. */
  bytes: number[];
  sequences: Array<number | null>;
  prunedToolResults: number;
}

/**
 * The normalised form of a prefix of one conversation array: every group of it (a message, or an
 * assistant message with the results that follow it) that nothing appended later can change.
 * The next model call of the same conversation normalises only what was appended since (issue 14,
 * perf-alloc: rebuilding every message's entry, a wrapper per item and a map of results per
 * assistant message on every call was the assembly's allocation, O(history) per step).
 */
interface NormalizedPrefix extends NormalizedConversation {
  /** The items the prefix covers, by identity: the prefix is reused only while they are unchanged. */
  items: Array<ConversationItem | StoredMessage>;
  watermark: number;
  spillDir: string | null | undefined;
}

const normalizedPrefixes = new WeakMap<readonly (ConversationItem | StoredMessage)[], NormalizedPrefix>();

/** The prefix of `items` normalised before, when its items, watermark and spill directory are the same; else an empty one. */
function prefixOf(items: readonly (ConversationItem | StoredMessage)[], watermark: number, spillDir: string | null | undefined): NormalizedPrefix {
  const cached = normalizedPrefixes.get(items);
  if (cached && cached.watermark === watermark && cached.spillDir === spillDir && cached.items.length <= items.length) {
    let same = true;
    for (let i = 0; i < cached.items.length && same; i += 1) same = cached.items[i] === items[i];
    if (same) return cached;
  }
  const fresh: NormalizedPrefix = {
    items: [],
    watermark,
    spillDir,
    messages: [],
    provenance: [],
    sequences: [],
    bytes: [],
    projection: { truncatedToolResults: 0, originalToolResultTokens: 0, projectedToolResultTokens: 0 },
    prunedToolResults: 0,
  };
  normalizedPrefixes.set(items, fresh);
  return fresh;
}

/**
 * The request copy of the conversation (reference §2.5): old long results pruned, single results
 * projected to 8,000 tokens, then normalised — each assistant message's tool results directly follow
 * it in call order; misplaced, duplicate and orphan results are dropped; a call without a result
 * gets the constant `interrupted` result.
 *
 * Every group but an assistant message whose results run to the end of `items` is final: what is
 * appended after it cannot change it. Final groups are kept per conversation array (by identity, and
 * only while every item they cover is still the same object at the same index and the watermark
 * and spill directory are the same), so a call normalises only the groups from the first one that
 * was not final; the arrays returned are always new.
 */
export function normalizeConversation(
  items: readonly (ConversationItem | StoredMessage)[],
  options: RequestCopyOptions = {},
): NormalizedConversation {
  const watermark = options.pruneWatermark ?? 0;
  const prefix = prefixOf(items, watermark, options.spillDir);
  // The last group, while it is not final: appended to the returned copies only.
  let open: NormalizedConversation | null = null;
  let target: NormalizedConversation = prefix;
  const push = (message: ModelMessage, source: StoredMessage | null, size: number) => {
    target.messages.push(message);
    target.provenance.push(source ? source.id : 'synthetic');
    target.sequences.push(source ? source.sequence : null);
    target.bytes.push(size);
  };
  const messageAt = (i: number): StoredMessage => {
    const item = items[i]!;
    return 'message' in item ? item.message : item;
  };
  const syntheticAt = (i: number): ConversationItem['synthetic'] => {
    const item = items[i]!;
    return 'message' in item ? item.synthetic : undefined;
  };
  let i = prefix.items.length;
  while (i < items.length) {
    const groupStart = i;
    const message = messageAt(i);
    const synthetic = syntheticAt(i);
    i += 1;
    if (synthetic && synthetic.reason !== 'last_user_request_replay') {
      const projected = project(message, 'synthetic');
      push(projected.message, null, projected.bytes);
    } else if (message.role !== 'tool') {
      // A tool result not directly after its assistant message (misplaced or orphan) is dropped.
      const projected = project(message, message.kind);
      if (message.role === 'assistant') {
        let end = i;
        while (end < items.length && messageAt(end).role === 'tool' && !syntheticAt(end)) end += 1;
        if (end === items.length) {
          // Results may still be appended to this group: it is normalised onto the returned copies only.
          open = copyOf(prefix);
          target = open;
        }
        push(projected.message, message, projected.bytes);
        appendResults(projected.message as Extract<ModelMessage, { role: 'assistant' }>, i, end);
        i = end;
      } else {
        push(projected.message, message, projected.bytes);
      }
    }
    if (target === prefix) for (let k = groupStart; k < i; k += 1) prefix.items.push(items[k]!);
  }

  /** The results of the assistant message `assistant`, items [from, to): one per call, in call order. */
  function appendResults(assistant: Extract<ModelMessage, { role: 'assistant' }>, from: number, to: number): void {
    // The first result of each call id; a map only for a long run of results (a scan is cheaper).
    let results: Map<string, StoredMessage> | null = null;
    if (to - from > 8) {
      results = new Map();
      for (let k = from; k < to; k += 1) {
        const result = messageAt(k);
        if (result.providerCallId && !results.has(result.providerCallId)) results.set(result.providerCallId, result);
      }
    }
    const resultOf = (callId: string): StoredMessage | undefined => {
      if (results) return results.get(callId);
      for (let k = from; k < to; k += 1) {
        const result = messageAt(k);
        if (result.providerCallId && result.providerCallId === callId) return result;
      }
      return undefined;
    };
    for (const block of assistant.content) {
      if (block.type !== 'tool_call') continue;
      const call = block;
      const result = resultOf(call.callId);
      const prune = result !== undefined && result.sequence <= watermark;
      const cached = result ? projectResult(result, call, prune ? (options.spillDir ?? null) : undefined) : undefined;
      if (!result || !cached) {
        const synthetic: ModelMessage = { role: 'tool', callId: call.callId, toolName: call.name, status: 'interrupted', text: INTERRUPTED_RESULT_TEXT, synthetic: true };
        push(synthetic, null, jsonBytes(synthetic));
        continue;
      }
      if (cached.pruned) target.prunedToolResults += 1;
      if (cached.truncated) {
        target.projection.truncatedToolResults += 1;
        target.projection.originalToolResultTokens += cached.originalTokens;
        target.projection.projectedToolResultTokens += cached.projectedTokens;
      }
      push(cached.message, result, cached.bytes);
    }
  }

  return open ?? copyOf(prefix);
}

/** New arrays and counters with the content of `from`'s. */
function copyOf(from: NormalizedConversation): NormalizedConversation {
  return {
    messages: from.messages.slice(),
    provenance: from.provenance.slice(),
    sequences: from.sequences.slice(),
    bytes: from.bytes.slice(),
    projection: { ...from.projection },
    prunedToolResults: from.prunedToolResults,
  };
}

interface Projected {
  message: ModelMessage;
  bytes: number;
}

interface ProjectedResult extends Projected {
  truncated: boolean;
  pruned: boolean;
  originalTokens: number;
  projectedTokens: number;
}

/** Stored messages never change, so their projection is computed once per message object. */
const projectedMessages = new WeakMap<StoredMessage, Projected>();
const projectedResults = new WeakMap<StoredMessage, ProjectedResult | null>();
const prunedResults = new WeakMap<StoredMessage, ProjectedResult | null>();

function project(message: StoredMessage, kind: MessageKind | 'synthetic'): Projected {
  let cached = projectedMessages.get(message);
  if (!cached) {
    const model: ModelMessage =
      message.role === 'user'
        ? { role: 'user', kind, content: textBlocks(message) }
        : { role: 'assistant', content: message.content.filter((b): b is Exclude<(typeof message.content)[number], ToolResultBlock> => b.type !== 'tool_result') };
    cached = { message: model, bytes: jsonBytes(model) };
    projectedMessages.set(message, cached);
  }
  return cached;
}

/**
 * A result's request form: pruned first when `spillDir` is given (undefined = not pruned; null =
 * pruned without a spill directory), then projected to the per-item cap.
 */
function projectResult(result: StoredMessage, call: ToolCallBlock, spillDir: string | null | undefined): ProjectedResult | undefined {
  const cache = spillDir === undefined ? projectedResults : prunedResults;
  let cached = cache.get(result);
  if (cached === undefined) {
    const block = result.content.find((b): b is ToolResultBlock => b.type === 'tool_result');
    if (!block) {
      cached = null;
    } else {
      const pruned = spillDir !== undefined && isPrunable(block.text);
      const source = pruned ? prunedText(block.text, spillDir ? spillPath(spillDir, result.sessionId, call.callId) : null) : block.text;
      const projected = projectToolResultText(source);
      const model: ModelMessage = { role: 'tool', callId: call.callId, toolName: call.name, status: modelToolStatus(block.status), text: projected.text };
      cached = {
        message: model,
        bytes: jsonBytes(model),
        pruned,
        truncated: projected.truncated,
        originalTokens: projected.truncated ? estimateTokens(source) : 0,
        projectedTokens: projected.truncated ? estimateTokens(projected.text) : 0,
      };
    }
    cache.set(result, cached);
  }
  return cached ?? undefined;
}

export interface AssembleInput extends RequestCopyOptions {
  system: readonly SystemPart[];
  conversation: readonly (ConversationItem | StoredMessage)[];
  tools: readonly ToolDefinition[];
  maxOutputTokens?: number;
  reasoningEffort?: string;
}

/** Deterministic: the same sources in the same order give a byte-identical request. */
export function assembleRequest(input: AssembleInput): PreparedModelCall {
  validateSystem(input.system);
  for (let i = 0; i < input.conversation.length; i += 1) {
    const item = input.conversation[i]!;
    const message = 'message' in item ? item.message : item;
    if ((message.role as string) === 'system') throw new AssemblyError('a system message is in the conversation');
  }
  const normalized = normalizeConversation(input.conversation, input);
  // System parts and tool definitions are shared, immutable values: no copies per call.
  const request: ModelRequest = {
    system: input.system as SystemPart[],
    messages: normalized.messages,
    tools: input.tools as ToolDefinition[],
    ...(input.maxOutputTokens !== undefined ? { maxOutputTokens: input.maxOutputTokens } : {}),
    ...(input.reasoningEffort !== undefined ? { reasoningEffort: input.reasoningEffort } : {}),
  };
  const systemContextTokens = Math.ceil(cachedJsonBytes(input.system) / 4);
  const conversationTokens = estimateArrayTokens(normalized.bytes);
  const toolSurfaceTokens = Math.ceil(cachedJsonBytes(input.tools) / 4);
  return {
    request,
    estimate: {
      systemContextTokens,
      conversationTokens,
      toolSurfaceTokens,
      estimatedInputTokens: systemContextTokens + conversationTokens + toolSurfaceTokens,
      reservedOutputTokens: input.maxOutputTokens ?? 0,
    },
    provenance: normalized.provenance,
    sequences: normalized.sequences,
    projection: normalized.projection,
    prunedToolResults: normalized.prunedToolResults,
  };
}
