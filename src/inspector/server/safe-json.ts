/**
 * @module inspection/safe-json
 * `safeStringify`: JSON for values that are not JSON (actor snapshots hold actor references with
 * cycles, functions, bigints, errors). Cycles and depth beyond the limit become markers instead of
 * throwing, so that inspection can never fail on what a machine keeps in its context.
 */

export interface SafeStringifyOptions {
  /** Nesting depth beyond which objects become `"[Object]"` and arrays `"[Array]"` (default 10). */
  depthLimit?: number;
}

function describeFunction(fn: Function): { type: string } {
  const typed = (fn as { type?: unknown }).type;
  return { type: typeof typed === 'string' ? typed : fn.name || 'anonymous' };
}

/**
 * Serialises any value to JSON text without throwing.
 *
 * @example
 * safeStringify({ a: 1n, self: obj }); // '{"a":"1","self":"[Circular]"}'
 */
export function safeStringify(value: unknown, options: SafeStringifyOptions = {}): string {
  const depthLimit = options.depthLimit ?? 10;
  const ancestors: object[] = [];

  function copy(input: unknown, depth: number): unknown {
    if (input === null || typeof input === 'string' || typeof input === 'boolean') return input;
    if (typeof input === 'number') return Number.isFinite(input) ? input : String(input);
    if (typeof input === 'bigint') return input.toString();
    if (typeof input === 'undefined' || typeof input === 'symbol') return undefined;
    if (typeof input === 'function') return describeFunction(input);
    const object = input as object;
    if (ancestors.includes(object)) return '[Circular]';
    if (depth >= depthLimit) return Array.isArray(object) ? '[Array]' : '[Object]';
    const toJSON = (object as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === 'function' && !(object instanceof Error)) {
      try {
        return copy(toJSON.call(object), depth);
      } catch {
        return '[Unserializable]';
      }
    }
    ancestors.push(object);
    try {
      if (Array.isArray(object)) return object.map((item) => copy(item, depth + 1) ?? null);
      if (object instanceof Error) return { name: object.name, message: object.message, code: (object as { code?: unknown }).code };
      if (object instanceof Map) return copy(Object.fromEntries(object), depth);
      if (object instanceof Set) return copy([...object], depth);
      const out: Record<string, unknown> = {};
      for (const [key, child] of Object.entries(object)) {
        const copied = copy(child, depth + 1);
        if (copied !== undefined) out[key] = copied;
      }
      return out;
    } catch {
      return '[Unserializable]';
    } finally {
      ancestors.pop();
    }
  }

  return JSON.stringify(copy(value, 0) ?? null);
}
