/**
 * @module protocol/usage
 * Token usage as a model call reports it and a turn and a session add it up. It sits in the protocol
 * because the machines, the model port, the storage and the snapshot all name it.
 */

/** The tokens of one model call, or a sum of calls. */
export interface TokenUsage {
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
  reasoningTokens: number;
}

/** The sum of two usages, field by field. */
export function addUsage(a: TokenUsage, b: TokenUsage): TokenUsage {
  return {
    inputTokens: a.inputTokens + b.inputTokens,
    outputTokens: a.outputTokens + b.outputTokens,
    cachedInputTokens: a.cachedInputTokens + b.cachedInputTokens,
    reasoningTokens: a.reasoningTokens + b.reasoningTokens,
  };
}
