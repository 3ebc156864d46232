/**
 * @module cli/usage-line
 * The one dim line after each turn of `openwork chat`: tokens in/out/cached/reasoning, model calls,
 * tool calls and time. Today the figures come from the stored turn row (the updates carry no usage
 * yet); `turnUsage` is the one place to switch once `turn_finished` carries them.
 */
import type { SessionStorage } from '../storage/storage.js';
import { formatElapsed } from './spinner.js';

export interface TurnUsage {
  inputTokens: number;
  cachedInputTokens: number;
  outputTokens: number;
  reasoningTokens: number;
  modelCalls: number;
  toolCalls: number;
  durationMs: number | null;
}

/** A finished turn's usage, from its stored row; null when the row cannot be read. */
export async function turnUsage(storage: SessionStorage, turnId: string): Promise<TurnUsage | null> {
  const turn = await storage.getTurn(turnId).catch(() => null);
  if (!turn) return null;
  const ended = turn.endedAt ? Date.parse(turn.endedAt) : NaN;
  return {
    inputTokens: turn.inputTokens ?? 0,
    cachedInputTokens: turn.cachedInputTokens ?? 0,
    outputTokens: turn.outputTokens ?? 0,
    reasoningTokens: turn.reasoningTokens ?? 0,
    modelCalls: turn.modelCallCount,
    toolCalls: turn.toolCallCount,
    durationMs: Number.isNaN(ended) ? null : ended - Date.parse(turn.startedAt),
  };
}

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;

/** "tokens 120 in (64 cached) · 30 out (8 reasoning) · 1 model call · 0 tool calls · 1.2s". */
export function usageLine(u: TurnUsage): string {
  return [
    `tokens ${u.inputTokens} in (${u.cachedInputTokens} cached)`,
    `${u.outputTokens} out (${u.reasoningTokens} reasoning)`,
    plural(u.modelCalls, 'model call'),
    plural(u.toolCalls, 'tool call'),
    ...(u.durationMs !== null ? [formatElapsed(u.durationMs)] : []),
  ].join(' · ');
}
