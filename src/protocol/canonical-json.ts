/**
 * @module protocol/canonical-json
 * JSON with object keys sorted: one text for equal content whatever the key order. The trace
 * hashes payloads by it (reference §11.1) and the doom-loop check compares a call's arguments by
 * it, so it sits below both storage and the machines.
 */

/** JSON with object keys sorted, so that equal content hashes (and compares) equally. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      return Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
    }
    return v;
  });
}
