/**
 * @module services/context/limits
 * The automatic compaction line of reference §2.8: effective input = window − max output − max
 * reasoning; line = ⌈effective × 85%⌉; a request triggers when its estimate plus the reserved output
 * reaches the line (inclusive).
 */

export interface ModelCapabilities {
  contextWindow?: number;
  maxOutputTokens?: number;
  maxReasoningTokens?: number;
}

export interface ContextLimits {
  effectiveInputTokens: number;
  autoCompactTokenLimit: number;
}

export function contextLimits(model: ModelCapabilities): ContextLimits | null {
  if (!model.contextWindow || model.contextWindow <= 0) return null;
  const effective = model.contextWindow - (model.maxOutputTokens ?? 0) - (model.maxReasoningTokens ?? 0);
  if (effective <= 0) return null;
  return { effectiveInputTokens: effective, autoCompactTokenLimit: Math.min(Math.ceil(effective * 0.85), effective) };
}
