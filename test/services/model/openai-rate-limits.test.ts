/**
 * Rate-limit headers of OpenAI-compatible responses.
 */
import { describe, expect, it } from 'vitest';
import { parseRateLimitHeaders, parseResetDuration } from '../../../src/services/model/openai-rate-limits.js';

const NOW = Date.UTC(2026, 0, 1, 12, 0, 0);

describe('parseRateLimitHeaders', () => {
  it('reads the public API family: requests as primary, tokens as secondary, no bucket id', () => {
    const headers = new Headers({
      'x-ratelimit-limit-requests': '60',
      'x-ratelimit-remaining-requests': '59',
      'x-ratelimit-reset-requests': '1s',
      'x-ratelimit-limit-tokens': '150000',
      'x-ratelimit-remaining-tokens': '149984',
      'x-ratelimit-reset-tokens': '6m0s',
    });
    expect(parseRateLimitHeaders(headers, NOW)).toEqual({
      limitId: null,
      primary: { limit: 60, remaining: 59, usedPercent: 1.67, resetsAt: '2026-01-01T12:00:01.000Z' },
      secondary: { limit: 150000, remaining: 149984, usedPercent: 0.01, resetsAt: '2026-01-01T12:06:00.000Z' },
      credits: null,
      plan: null,
    });
  });

  it('reads the codex family with credits and plan', () => {
    const headers = new Headers({
      'x-codex-primary-used-percent': '80',
      'x-codex-secondary-used-percent': '20.5',
      'x-codex-secondary-window-minutes': '10080',
      'x-codex-credits-has-credits': 'false',
      'x-codex-credits-unlimited': '0',
      'x-codex-plan-type': 'team',
    });
    expect(parseRateLimitHeaders(headers, NOW)).toEqual({
      limitId: 'codex',
      primary: { usedPercent: 80 },
      secondary: { usedPercent: 20.5, windowMinutes: 10080 },
      credits: { hasCredits: false, unlimited: false },
      plan: 'team',
    });
  });

  it('no rate-limit headers, or unreadable ones, give null', () => {
    expect(parseRateLimitHeaders(new Headers({ 'content-type': 'text/event-stream' }), NOW)).toBeNull();
    expect(parseRateLimitHeaders(new Headers({ 'x-ratelimit-limit-requests': 'lots' }), NOW)).toBeNull();
  });
});

describe('parseResetDuration', () => {
  it.each([
    ['1s', 1000],
    ['6m0s', 360_000],
    ['20ms', 20],
    ['1h2m3.5s', 3_723_500],
    ['2', 2000],
    ['soon', undefined],
    ['', undefined],
  ])('%s → %s ms', (raw, ms) => {
    expect(parseResetDuration(raw)).toBe(ms);
  });
});
