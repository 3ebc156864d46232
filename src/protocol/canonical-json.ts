/**
 * @module protocol/canonical-json
 * JSON with object keys sorted: one text for equal content whatever the key order. The trace
 * hashes payloads by it (reference §11.1) and the doom-loop check compares a call's arguments by
 * it, so it sits below both storage and the machines.
 */

/**
 * True when the object's own enumerable keys are already in code unit order. `for...in` walks the
 * own keys first, in `Object.keys` order, without allocating their array (inherited ones, which
 * `JSON.stringify` skips, are skipped here too).
 */
function inOrder(object: object): boolean {
  let previous: string | null = null;
  for (const key in object) {
    if (!Object.prototype.hasOwnProperty.call(object, key)) continue;
    if (previous !== null && previous > key) return false;
    previous = key;
  }
  return true;
}

/** A `String`, `Number`, `Boolean` or `BigInt` object, which the rebuild turns into a plain object. */
function isBoxed(v: object): boolean {
  return v instanceof String || v instanceof Number || v instanceof Boolean || v instanceof BigInt;
}

/**
 * The replacer: an object whose keys are out of order is rebuilt with them sorted. One whose keys
 * are already in order (one-key objects, most of the spans' attributes) is returned as it is, which
 * gives the same text without a copy; the rebuild sorts the keys array and copies the values into
 * a new object, without the entries (a two-element array per key) it used to sort (issue 14: a
 * trace batch's largest allocation outside the charts). A key that is an array index is listed
 * first by the engine whatever the order it was written in; such an object is out of code unit
 * order (`"10"` before `"9"`) and is rebuilt exactly as before, so the text never changes. So is a
 * boxed primitive (`new String`), which `JSON.stringify` would print as its primitive if it came
 * back unchanged.
 */
function sortKeys(_key: string, v: unknown): unknown {
  if (v && typeof v === 'object' && !Array.isArray(v)) {
    if (!isBoxed(v) && inOrder(v)) return v;
    const object = v as Record<string, unknown>;
    const keys = Object.keys(object).sort();
    const sorted: Record<string, unknown> = {};
    for (const key of keys) {
      // An assignment to `__proto__` would set the prototype; only a defined property is a key.
      if (key === '__proto__') Object.defineProperty(sorted, key, { value: object[key], enumerable: true, writable: true, configurable: true });
      else sorted[key] = object[key];
    }
    return sorted;
  }
  return v;
}

/** JSON with object keys sorted, so that equal content hashes (and compares) equally. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, sortKeys);
}
