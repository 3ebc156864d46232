/**
 * @module session-handle/context-inspection
 * `inspectContext`: what the next model request of a session would hold, assembled exactly as the
 * Turn assembles it (World State is not sampled for it), with its token estimate.
 */
import { assembleRequest, type ContextBudgetEstimate } from '../services/context/assemble.js';
import { contextLimits } from '../services/context/limits.js';
import type { ModelMessage, SystemPart, ToolDefinition } from '../services/model/port.js';
import type { RuntimeServices } from '../services/runtime.js';

/** What the next model request would hold (reference §2.9); World State is not sampled for it. */
export interface ContextInspection {
  system: SystemPart[];
  conversation: ModelMessage[];
  /** Per conversation message: the persisted message id, or "synthetic". */
  provenance: string[];
  tools: ToolDefinition[];
  estimate: ContextBudgetEstimate;
  /** The automatic compaction line, or null when the model's window is unknown. */
  autoCompactTokenLimit: number | null;
  /** Estimate plus reserved output as a percentage of the line, rounded. */
  autoCompactPercent: number | null;
}

/** The projection the next request of the session would use, with its estimate (reference §2.9). */
export function inspectContext(services: RuntimeServices, sessionId: string, system: SystemPart[]): ContextInspection {
  const session = services.session(sessionId);
  const prepared = assembleRequest({
    system,
    conversation: session.chat.view(),
    tools: session.toolset.definitions,
    pruneWatermark: session.chat.pruneWatermark,
    spillDir: services.spillDir,
    ...(session.model.maxOutputTokens !== undefined ? { maxOutputTokens: session.model.maxOutputTokens } : {}),
  });
  const limit = contextLimits(session.model)?.autoCompactTokenLimit ?? null;
  const total = prepared.estimate.estimatedInputTokens + prepared.estimate.reservedOutputTokens;
  return {
    system: prepared.request.system,
    conversation: prepared.request.messages,
    provenance: prepared.provenance,
    tools: prepared.request.tools,
    estimate: prepared.estimate,
    autoCompactTokenLimit: limit,
    autoCompactPercent: limit ? Math.round((100 * total) / limit) : null,
  };
}
