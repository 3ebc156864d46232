/**
 * Seed 004 §2's merge rule for rate-limit snapshots.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_RATE_LIMIT_ID, mergeRateLimits, type RateLimitSnapshot } from '../../src/protocol/rate-limits.js';

const full: RateLimitSnapshot = {
  limitId: 'codex',
  primary: { usedPercent: 10 },
  secondary: null,
  credits: { hasCredits: true, unlimited: false, balance: '3.00' },
  plan: 'plus',
};

describe('mergeRateLimits', () => {
  it('the first snapshot is taken as is, with a missing limit id filed under the default bucket', () => {
    expect(mergeRateLimits(null, { limitId: null, primary: { usedPercent: 1 } })).toEqual({
      limitId: DEFAULT_RATE_LIMIT_ID,
      primary: { usedPercent: 1 },
      credits: null,
      plan: null,
    });
  });

  it('a newer snapshot without credits or plan keeps the previous ones; its windows replace the old', () => {
    expect(mergeRateLimits(full, { limitId: 'codex', primary: { usedPercent: 55 }, secondary: { usedPercent: 2 } })).toEqual({
      limitId: 'codex',
      primary: { usedPercent: 55 },
      secondary: { usedPercent: 2 },
      credits: { hasCredits: true, unlimited: false, balance: '3.00' },
      plan: 'plus',
    });
  });

  it('credits and plan the newer snapshot carries win', () => {
    const merged = mergeRateLimits(full, { limitId: null, credits: { hasCredits: false, unlimited: false }, plan: 'pro' });
    expect(merged).toEqual({ limitId: 'default', credits: { hasCredits: false, unlimited: false }, plan: 'pro' });
  });

  it('is pure: neither input changes', () => {
    const next: RateLimitSnapshot = { limitId: null };
    const before = structuredClone(full);
    mergeRateLimits(full, next);
    expect(full).toEqual(before);
    expect(next).toEqual({ limitId: null });
  });
});
