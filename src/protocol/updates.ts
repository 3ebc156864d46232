/**
 * @module protocol/updates
 * The live SessionUpdate protocol (seed 000 §7), envelope version 7.
 */
import { z } from 'zod';
import { permissionDecisionSchema } from './input.js';
import { planStepSchema } from './plan.js';
import { toolErrorSchema, toolResultStatusSchema } from './content.js';
import { userInputAnswersSchema, userInputRequestShape } from './user-input.js';

export const SESSION_UPDATE_VERSION = 7 as const;

export const phaseSchema = z.enum([
  'starting',
  'running_model',
  'compacting',
  'running_tools',
  'waiting_permission',
  'waiting_user_input',
  'completed',
  'failed',
  'cancelled',
]);
export type Phase = z.infer<typeof phaseSchema>;

export const turnOutcomeSchema = z.discriminatedUnion('status', [
  z.object({ status: z.literal('completed'), finalText: z.string() }),
  z.object({ status: z.literal('failed'), code: z.string(), message: z.string() }),
  z.object({ status: z.literal('cancelled') }),
]);
export type TurnOutcome = z.infer<typeof turnOutcomeSchema>;

/**
 * Tokens as the provider reported them (zero where it reports nothing): on `turn_finished` the sum
 * over the turn's model calls whose answers were stored, in the snapshot the session's running total.
 */
export const tokenUsageSchema = z.object({
  inputTokens: z.number().int().nonnegative(),
  outputTokens: z.number().int().nonnegative(),
  cachedInputTokens: z.number().int().nonnegative(),
  reasoningTokens: z.number().int().nonnegative(),
});

/** What an approval card shows (reference §4.12); tools and policies fill the optional parts. */
export const permissionCardSchema = z.object({
  toolName: z.string(),
  kind: z.enum(['approval', 'escalation', 'danger']),
  /**
   * `summary`, `command`, `path`, `reason`, `dangerNote`, `previousDenial` and `mcp.title` /
   * `mcp.arguments` are text to show as it is: the runtime has made every invisible or look-alike
   * character in them a visible `<U+XXXX>` / `^X` token and folded long blank runs
   * (`protocol/shown-card`), so `command` is what runs as a human should read it, not always the
   * same string. `grantKey` and `requestedPaths` are exact.
   */
  summary: z.string(),
  command: z.string().optional(),
  path: z.string().optional(),
  reason: z.string().optional(),
  requestedPaths: z
    .array(z.object({ path: z.string(), access: z.enum(['read', 'write']), scope: z.enum(['exact', 'subtree']), tier: z.string().optional() }))
    .optional(),
  /** True when the card asks for network access for one bash command (shown to the user as "network"). */
  network: z.boolean().optional(),
  dangerNote: z.string().optional(),
  dangerMatch: z.string().optional(),
  /** Where the matched sub-command sits in `command` (string offsets), for highlighting. */
  dangerSpan: z.object({ start: z.number().int(), end: z.number().int() }).optional(),
  previousDenial: z.string().optional(),
  /**
   * An MCP tool call: the server, the tool's own name and title, its annotations as the server
   * declared them (hints, not guarantees), and the call's arguments as JSON text.
   */
  mcp: z
    .object({
      server: z.string(),
      tool: z.string(),
      title: z.string().optional(),
      readOnlyHint: z.boolean().optional(),
      destructiveHint: z.boolean().optional(),
      idempotentHint: z.boolean().optional(),
      openWorldHint: z.boolean().optional(),
      arguments: z.string(),
    })
    .optional(),
  /** The environment the grant would apply to (seed 004 §5: grants are keyed by environment id). */
  environmentId: z.string(),
  /** What a turn- or session-scoped grant would cover; equal keys are covered by the same grant. */
  grantKey: z.string(),
  /** The decisions this card offers; the host shows the buttons it wants from these. */
  decisions: z.array(permissionDecisionSchema),
});
export type PermissionCard = z.infer<typeof permissionCardSchema>;

export const toolProgressSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('stdout'), chunk: z.string() }),
  z.object({ kind: z.literal('stderr'), chunk: z.string() }),
  z.object({ kind: z.literal('message'), message: z.string() }),
]);
export type ToolProgress = z.infer<typeof toolProgressSchema>;

export const sessionUpdateSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('turn_started'), clientRequestId: z.string() }),
  z.object({ type: z.literal('phase_changed'), phase: phaseSchema }),
  z.object({ type: z.literal('text_delta'), delta: z.string() }),
  z.object({ type: z.literal('reasoning_delta'), delta: z.string() }),
  z.object({ type: z.literal('draft_cleared'), reason: z.enum(['committed', 'discarded']) }),
  z.object({
    type: z.literal('tool_call_started'),
    toolCallId: z.string(),
    providerCallId: z.string(),
    toolName: z.string(),
    arguments: z.string(),
    status: z.literal('validating'),
  }),
  z.object({ type: z.literal('tool_call_progress'), toolCallId: z.string(), progress: toolProgressSchema }),
  z.object({
    type: z.literal('tool_call_finished'),
    toolCallId: z.string(),
    providerCallId: z.string(),
    toolName: z.string(),
    status: toolResultStatusSchema,
    text: z.string(),
    error: toolErrorSchema.optional(),
  }),
  z.object({ type: z.literal('permission_requested'), toolCallId: z.string(), card: permissionCardSchema }),
  z.object({ type: z.literal('permission_resolved'), toolCallId: z.string(), decision: z.union([permissionDecisionSchema, z.literal('cancelled')]) }),
  /** The model asked the user (request_user_input); the turn waits for `answerUserInput`. */
  z.object({ type: z.literal('user_input_requested'), toolCallId: z.string(), request: userInputRequestShape }),
  z.object({
    type: z.literal('user_input_resolved'),
    toolCallId: z.string(),
    outcome: z.enum(['answered', 'cancelled']),
    answers: userInputAnswersSchema.optional(),
  }),
  z.object({
    type: z.literal('plan_updated'),
    explanation: z.string().nullable(),
    plan: z.array(planStepSchema),
    updatedAt: z.string(),
  }),
  z.object({ type: z.literal('turn_finished'), outcome: turnOutcomeSchema, usage: tokenUsageSchema }),
  /** Beyond seed 000's list: a checkpoint was written and installed (in a turn, or by compact/rewind). */
  z.object({
    type: z.literal('conversation_compacted'),
    compactionId: z.string(),
    kind: z.enum(['manual', 'threshold', 'overflow', 'rewind']),
    conversationTokensBefore: z.number(),
    conversationTokensAfter: z.number(),
  }),
]);
export type SessionUpdate = z.infer<typeof sessionUpdateSchema>;
export type SessionUpdateType = SessionUpdate['type'];

export const sessionUpdateEnvelopeSchema = z.object({
  version: z.literal(SESSION_UPDATE_VERSION),
  sessionId: z.string(),
  turnId: z.string().nullable(),
  sequence: z.number().int().positive(),
  occurredAtMs: z.number(),
  update: sessionUpdateSchema,
});
export type SessionUpdateEnvelope = z.infer<typeof sessionUpdateEnvelopeSchema>;
