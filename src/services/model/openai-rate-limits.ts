/**
 * @module services/model/openai-rate-limits
 * Reads the rate-limit headers of an OpenAI-compatible response into a `RateLimitSnapshot`:
 * the public API's `x-ratelimit-*` family (requests → primary, tokens → secondary, default bucket)
 * and the `x-codex-*` family (percent windows, credits, plan; bucket `codex`).
 */
import type { RateLimitSnapshot, RateLimitWindow } from '../../protocol/rate-limits.js';

/** Anything with a `get` like the Fetch API's `Headers`. */
export interface HeaderSource {
  get(name: string): string | null;
}

function num(headers: HeaderSource, name: string): number | undefined {
  const raw = headers.get(name);
  if (raw === null || raw.trim() === '') return undefined;
  const value = Number(raw);
  return Number.isFinite(value) ? value : undefined;
}

function bool(headers: HeaderSource, name: string): boolean | undefined {
  const raw = headers.get(name)?.trim().toLowerCase();
  if (raw === 'true' || raw === '1') return true;
  if (raw === 'false' || raw === '0') return false;
  return undefined;
}

/** `6m0s`, `1.5s`, `20ms`, `1h2m` → milliseconds; undefined when nothing parses. */
export function parseResetDuration(raw: string | null): number | undefined {
  if (raw === null) return undefined;
  const text = raw.trim();
  if (text === '') return undefined;
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text) * 1000;
  let total = 0;
  let matched = '';
  for (const m of text.matchAll(/(\d+(?:\.\d+)?)(ms|h|m|s)/g)) {
    const value = Number(m[1]);
    const unit = m[2];
    total += unit === 'h' ? value * 3_600_000 : unit === 'm' ? value * 60_000 : unit === 's' ? value * 1000 : value;
    matched += m[0];
  }
  return matched === text ? total : undefined;
}

function standardWindow(headers: HeaderSource, kind: 'requests' | 'tokens', now: number): RateLimitWindow | null {
  const limit = num(headers, `x-ratelimit-limit-${kind}`);
  const remaining = num(headers, `x-ratelimit-remaining-${kind}`);
  const reset = parseResetDuration(headers.get(`x-ratelimit-reset-${kind}`));
  if (limit === undefined && remaining === undefined && reset === undefined) return null;
  const window: RateLimitWindow = {};
  if (limit !== undefined) window.limit = limit;
  if (remaining !== undefined) window.remaining = remaining;
  if (limit !== undefined && remaining !== undefined && limit > 0) {
    window.usedPercent = Math.round(((limit - remaining) / limit) * 10_000) / 100;
  }
  if (reset !== undefined) window.resetsAt = new Date(now + reset).toISOString();
  return window;
}

function codexWindow(headers: HeaderSource, which: 'primary' | 'secondary'): RateLimitWindow | null {
  const usedPercent = num(headers, `x-codex-${which}-used-percent`);
  if (usedPercent === undefined) return null;
  const window: RateLimitWindow = { usedPercent };
  const minutes = num(headers, `x-codex-${which}-window-minutes`);
  if (minutes !== undefined) window.windowMinutes = minutes;
  const resetAt = num(headers, `x-codex-${which}-reset-at`);
  if (resetAt !== undefined) window.resetsAt = new Date(resetAt * 1000).toISOString();
  return window;
}

function codexCredits(headers: HeaderSource): Record<string, unknown> | null {
  const hasCredits = bool(headers, 'x-codex-credits-has-credits');
  const unlimited = bool(headers, 'x-codex-credits-unlimited');
  if (hasCredits === undefined || unlimited === undefined) return null;
  const balance = headers.get('x-codex-credits-balance')?.trim();
  return { hasCredits, unlimited, ...(balance ? { balance } : {}) };
}

/**
 * The snapshot the headers describe, or null when they carry no rate-limit facts at all.
 * `now` (ms) anchors the relative reset durations of the public API.
 */
export function parseRateLimitHeaders(headers: HeaderSource, now: number): RateLimitSnapshot | null {
  const primary = codexWindow(headers, 'primary');
  const secondary = codexWindow(headers, 'secondary');
  const credits = codexCredits(headers);
  const plan = headers.get('x-codex-plan-type')?.trim() || null;
  if (primary || secondary || credits || plan) {
    return { limitId: 'codex', primary, secondary, credits, plan };
  }
  const requests = standardWindow(headers, 'requests', now);
  const tokens = standardWindow(headers, 'tokens', now);
  if (!requests && !tokens) return null;
  // The public API names no bucket: the session files it under the default one.
  return { limitId: null, primary: requests, secondary: tokens, credits: null, plan: null };
}
