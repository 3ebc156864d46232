/**
 * @module protocol/storable-text
 * Text that Postgres can store (issue 13, point 2). A `text` or `jsonb` value refuses U+0000, and
 * `jsonb` also refuses a lone UTF-16 surrogate, so one such character in a tool's output or a model's
 * response would fail the whole turn with `persistence_error` after the side effect had happened.
 *
 * Output the runtime does not control (tool results, model text, reasoning, tool names and
 * arguments, provider data) is made storable before it is written, by one visible escape: every
 * NUL and every unpaired surrogate becomes U+FFFD, the Unicode replacement character (what a UTF-8
 * decoder shows for bytes it cannot read). The replacement happens once, where the text enters the
 * runtime, so the stored row, the live update and the next model request carry the same characters.
 * Input the host controls (user text, ids) is refused instead, with `invalid_request`.
 */
import { z } from 'zod';

/** What a NUL or an unpaired surrogate becomes. */
export const REPLACEMENT_CHARACTER = '\ufffd';

/** NUL, a high surrogate not followed by a low one, or a low surrogate not preceded by a high one. */
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
const UNSTORABLE_TEST = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** True when Postgres can store `text` as it is. */
export function isStorableText(text: string): boolean {
  return !UNSTORABLE_TEST.test(text);
}

/** `text` with every NUL and unpaired surrogate replaced by U+FFFD; the same string when there is none. */
export function storableText(text: string): string {
  return isStorableText(text) ? text : text.replace(UNSTORABLE, REPLACEMENT_CHARACTER);
}

/**
 * A JSON-like value with every string in it (object keys included) made storable. Values that are
 * already storable come back as the same object, so the common case allocates nothing: they are
 * first read through without a copy (the copy-as-you-go `clean` built a new array or object for
 * every level even when it then returned the original; issue 14, perf-alloc).
 */
export function storableValue<T>(value: T): T {
  return isStorableValue(value) ? value : (clean(value) as T);
}

/** True when `clean` would return `value` itself: every string in it, object keys included, is storable. */
function isStorableValue(value: unknown): boolean {
  if (typeof value === 'string') return isStorableText(value);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i += 1) if (!isStorableValue(value[i])) return false;
    return true;
  }
  if (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    // `for...in` with the own-key test visits what `Object.entries` lists, without the array.
    for (const key in value) {
      if (!Object.prototype.hasOwnProperty.call(value, key)) continue;
      if (!isStorableText(key) || !isStorableValue((value as Record<string, unknown>)[key])) return false;
    }
    return true;
  }
  return true;
}

function clean(value: unknown): unknown {
  if (typeof value === 'string') return storableText(value);
  if (Array.isArray(value)) {
    let changed = false;
    const out = value.map((v) => {
      const c = clean(v);
      if (c !== v) changed = true;
      return c;
    });
    return changed ? out : value;
  }
  if (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    let changed = false;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      const key = storableText(k);
      const c = clean(v);
      if (key !== k || c !== v) changed = true;
      // An assignment to `__proto__` would set the copy's prototype (and drop the key): define it.
      if (key === '__proto__') Object.defineProperty(out, key, { value: c, enumerable: true, writable: true, configurable: true });
      else out[key] = c;
    }
    return changed ? out : value;
  }
  return value;
}

/**
 * Makes a stream of text deltas storable without breaking a surrogate pair that a provider (or a
 * chunker) split across two deltas: a trailing high surrogate is held back until the next delta
 * shows whether its low half follows. `end()` releases what is held, replaced, when nothing did.
 */
export class StorableTextStream {
  private held = '';

  /** The storable part of `held + delta` that can be released now (possibly empty). */
  push(delta: string): string {
    let text = this.held + delta;
    this.held = '';
    const last = text.charCodeAt(text.length - 1);
    if (last >= 0xd800 && last <= 0xdbff) {
      this.held = text.slice(-1);
      text = text.slice(0, -1);
    }
    return storableText(text);
  }

  /** Whatever is still held, made storable: a lone high surrogate becomes U+FFFD. */
  end(): string {
    const rest = this.held;
    this.held = '';
    return storableText(rest);
  }
}

export const STORABLE_MESSAGE = 'must not contain NUL (U+0000) or an unpaired UTF-16 surrogate';

/** Text a host hands in: refused (not repaired) when Postgres could not store it. */
export function storableString() {
  return z.string().refine(isStorableText, STORABLE_MESSAGE);
}
