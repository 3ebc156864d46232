/**
 * @module protocol/rate-limits
 * The rate-limit snapshot a provider reports in its response headers, and the merge rule the
 * session applies to successive snapshots (seed 004 §2).
 */
import { z } from 'zod';

/** The bucket a snapshot belongs to when the provider names none (seed 004 §2). */
export const DEFAULT_RATE_LIMIT_ID = 'default';

export const rateLimitWindowSchema = z.object({
  /** Share of the window already used, 0-100. */
  usedPercent: z.number().optional(),
  /** Length of the window, when the provider says it. */
  windowMinutes: z.number().optional(),
  /** When the window resets (ISO-8601 UTC). */
  resetsAt: z.string().optional(),
  /** The window's allowance and what is left of it, when the provider sends both. */
  limit: z.number().optional(),
  remaining: z.number().optional(),
});
export type RateLimitWindow = z.infer<typeof rateLimitWindowSchema>;

export const rateLimitSnapshotSchema = z.object({
  /** The provider's bucket id; null means the default bucket. */
  limitId: z.string().nullable(),
  /** Requests (or the provider's short window). */
  primary: rateLimitWindowSchema.nullable().optional(),
  /** Tokens (or the provider's long window). */
  secondary: rateLimitWindowSchema.nullable().optional(),
  credits: z.record(z.string(), z.unknown()).nullable().optional(),
  plan: z.string().nullable().optional(),
});
export type RateLimitSnapshot = z.infer<typeof rateLimitSnapshotSchema>;

/**
 * The session's view after a newer snapshot arrives (seed 004 §2): the newer one wins, but credits
 * and plan it lacks are kept from the previous one, and a missing limit id means the default bucket.
 * Pure: used by the Session machine's `assign`.
 */
export function mergeRateLimits(previous: RateLimitSnapshot | null, next: RateLimitSnapshot): RateLimitSnapshot {
  return {
    ...next,
    limitId: next.limitId ?? DEFAULT_RATE_LIMIT_ID,
    credits: next.credits ?? previous?.credits ?? null,
    plan: next.plan ?? previous?.plan ?? null,
  };
}
