/**
 * @module services/context/estimate
 * The token estimate of reference §1: ceil(JSON-serialised bytes / 4).
 */

export function jsonBytes(value: unknown): number {
  const json = JSON.stringify(value ?? null);
  return Buffer.byteLength(json, 'utf8');
}

export function estimateTokens(value: unknown): number {
  return Math.ceil(jsonBytes(value) / 4);
}

const bytesOfObject = new WeakMap<object, number>();

/** JSON byte length, remembered per object: for values that never change (tool surfaces, system parts, stored messages). */
export function cachedJsonBytes(value: object): number {
  let bytes = bytesOfObject.get(value);
  if (bytes === undefined) {
    bytes = jsonBytes(value);
    bytesOfObject.set(value, bytes);
  }
  return bytes;
}

/** The exact estimate of a JSON array from the byte lengths of its items: `[` + items joined by `,` + `]`. */
export function estimateArrayTokens(itemBytes: readonly number[]): number {
  let total = 2 + Math.max(0, itemBytes.length - 1);
  for (let i = 0; i < itemBytes.length; i += 1) total += itemBytes[i]!;
  return Math.ceil(total / 4);
}
