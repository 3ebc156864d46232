/**
 * @module services/context/estimate
 * The token estimate of reference §1: ceil(JSON-serialised bytes / 4).
 */

export function estimateTokens(value: unknown): number {
  const json = typeof value === 'string' ? JSON.stringify(value) : JSON.stringify(value ?? null);
  return Math.ceil(Buffer.byteLength(json, 'utf8') / 4);
}
