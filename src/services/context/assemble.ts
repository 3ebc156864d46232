/**
 * @module services/context/assemble
 * The one assembly step where the three input regions meet (reference §2.5-§2.8): System Context,
 * the Conversation (as a request copy: projected and normalised), and the tool surface. It is
 * deterministic and never mutates the conversation or the database.
 */
import { OpenworkError } from '../../errors.js';
import { modelToolStatus, type StoredMessage, type TextBlock, type ToolCallBlock, type ToolResultBlock } from '../../protocol/content.js';
import type { ModelMessage, ModelRequest, SystemPart, ToolDefinition } from '../model/port.js';
import { cachedJsonBytes, estimateArrayTokens, estimateTokens, jsonBytes } from './estimate.js';

/** The constant text of a synthesized result (seed 000 §10); identical bytes every time. */
export const INTERRUPTED_RESULT_TEXT = 'Tool result unavailable: the previous turn ended before a durable result was recorded.';

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

function validateSystem(parts: readonly SystemPart[]): void {
  const keys = new Set<string>();
  for (const part of parts) {
    if (part.key.trim() === '') throw new AssemblyError('system context key is empty');
    if (keys.has(part.key)) throw new AssemblyError(`duplicate system context key ${part.key}`);
    keys.add(part.key);
    if (part.content.trim() === '') throw new AssemblyError(`system context part ${part.key} is empty`);
    const tokens = estimateTokens(part.content);
    if (tokens >= SYSTEM_PART_MAX_TOKENS) {
      throw new AssemblyError(`system context part ${part.key} is ${tokens} tokens, limit ${SYSTEM_PART_MAX_TOKENS}`);
    }
  }
}

/** Head 75% and tail 25% of the token budget of one oversized tool result (reference §2.5 step 2). */
export function projectToolResultText(text: string, maxTokens = TOOL_RESULT_PROJECTION_MAX_TOKENS): { text: string; truncated: boolean } {
  if (estimateTokens(text) <= maxTokens) return { text, truncated: false };
  const budgetChars = maxTokens * 4 - 64;
  const chars = [...text];
  const head = chars.slice(0, Math.floor(budgetChars * 0.75)).join('');
  const tail = chars.slice(chars.length - Math.floor(budgetChars * 0.25)).join('');
  const omitted = chars.length - Math.floor(budgetChars * 0.75) - Math.floor(budgetChars * 0.25);
  return { text: `${head}\n[... ${omitted} characters truncated ...]\n${tail}`, truncated: true };
}

function textBlocks(message: StoredMessage): TextBlock[] {
  return message.content.filter((b): b is TextBlock => b.type === 'text');
}

/**
 * The request copy of the conversation (reference §2.5 step 3): each assistant message's tool
 * results directly follow it in call order; misplaced, duplicate and orphan results are dropped;
 * a call without a result gets the constant `interrupted` result.
 */
export function normalizeConversation(messages: readonly StoredMessage[]): {
  messages: ModelMessage[];
  provenance: string[];
  projection: PreparedModelCall['projection'];
  bytes: number[];
  sequences: Array<number | null>;
} {
  const out: ModelMessage[] = [];
  const provenance: string[] = [];
  const sequences: Array<number | null> = [];
  const bytes: number[] = [];
  const projection = { truncatedToolResults: 0, originalToolResultTokens: 0, projectedToolResultTokens: 0 };
  const push = (message: ModelMessage, source: StoredMessage | 'synthetic', size: number) => {
    out.push(message);
    provenance.push(source === 'synthetic' ? source : source.id);
    sequences.push(source === 'synthetic' ? null : source.sequence);
    bytes.push(size);
  };
  let i = 0;
  while (i < messages.length) {
    const message = messages[i]!;
    i += 1;
    if (message.role === 'tool') continue; // Not directly after its assistant message: misplaced or orphan.
    const projected = project(message);
    push(projected.message, message, projected.bytes);
    if (message.role !== 'assistant') continue;
    const calls = (projected.message as Extract<ModelMessage, { role: 'assistant' }>).content.filter((b): b is ToolCallBlock => b.type === 'tool_call');
    const results = new Map<string, StoredMessage>();
    while (i < messages.length && messages[i]!.role === 'tool') {
      const result = messages[i]!;
      i += 1;
      if (result.providerCallId && !results.has(result.providerCallId)) results.set(result.providerCallId, result);
    }
    for (const call of calls) {
      const result = results.get(call.callId);
      const cached = result ? projectResult(result, call) : undefined;
      if (!result || !cached) {
        const synthetic: ModelMessage = { role: 'tool', callId: call.callId, toolName: call.name, status: 'interrupted', text: INTERRUPTED_RESULT_TEXT, synthetic: true };
        push(synthetic, 'synthetic', jsonBytes(synthetic));
        continue;
      }
      if (cached.truncated) {
        projection.truncatedToolResults += 1;
        projection.originalToolResultTokens += cached.originalTokens;
        projection.projectedToolResultTokens += cached.projectedTokens;
      }
      push(cached.message, result, cached.bytes);
    }
  }
  return { messages: out, provenance, projection, bytes, sequences };
}

interface Projected {
  message: ModelMessage;
  bytes: number;
}

interface ProjectedResult extends Projected {
  truncated: boolean;
  originalTokens: number;
  projectedTokens: number;
}

/** Stored messages never change, so their projection is computed once per message object. */
const projectedMessages = new WeakMap<StoredMessage, Projected>();
const projectedResults = new WeakMap<StoredMessage, ProjectedResult | null>();

function project(message: StoredMessage): Projected {
  let cached = projectedMessages.get(message);
  if (!cached) {
    const model: ModelMessage =
      message.role === 'user'
        ? { role: 'user', kind: message.kind, content: textBlocks(message) }
        : { role: 'assistant', content: message.content.filter((b): b is Exclude<(typeof message.content)[number], ToolResultBlock> => b.type !== 'tool_result') };
    cached = { message: model, bytes: jsonBytes(model) };
    projectedMessages.set(message, cached);
  }
  return cached;
}

function projectResult(result: StoredMessage, call: ToolCallBlock): ProjectedResult | undefined {
  let cached = projectedResults.get(result);
  if (cached === undefined) {
    const block = result.content.find((b): b is ToolResultBlock => b.type === 'tool_result');
    if (!block) {
      cached = null;
    } else {
      const projected = projectToolResultText(block.text);
      const model: ModelMessage = { role: 'tool', callId: call.callId, toolName: call.name, status: modelToolStatus(block.status), text: projected.text };
      cached = {
        message: model,
        bytes: jsonBytes(model),
        truncated: projected.truncated,
        originalTokens: projected.truncated ? estimateTokens(block.text) : 0,
        projectedTokens: projected.truncated ? estimateTokens(projected.text) : 0,
      };
    }
    projectedResults.set(result, cached);
  }
  return cached ?? undefined;
}

export interface AssembleInput {
  system: readonly SystemPart[];
  conversation: readonly StoredMessage[];
  tools: readonly ToolDefinition[];
  maxOutputTokens?: number;
  reasoningEffort?: string;
}

/** Deterministic: the same sources in the same order give a byte-identical request. */
export function assembleRequest(input: AssembleInput): PreparedModelCall {
  validateSystem(input.system);
  for (const message of input.conversation) {
    if ((message.role as string) === 'system') throw new AssemblyError('a system message is in the conversation');
  }
  const normalized = normalizeConversation(input.conversation);
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
  };
}
