/**
 * @module storage/pg-timestamps
 * `timestamptz` values of the `pg` adapter's own pool, read without `pg`'s regular expressions on
 * the common shape (branch perf-jit2: a step reads back two or three, `created_at` of its messages).
 */

/** Code units of `0`, `9`, `-`, ` `, `:`, `.`, `+`. */
const ZERO = 48;
const NINE = 57;
const DASH = 45;
const SPACE = 32;
const COLON = 58;
const DOT = 46;
const PLUS = 43;

const digitAt = (text: string, i: number): boolean => {
  const c = text.charCodeAt(i);
  return c >= ZERO && c <= NINE;
};

/** `text[from, to)` as a number; every code unit there is a digit (checked by the caller). */
const digits = (text: string, from: number, to: number): number => {
  let n = 0;
  for (let i = from; i < to; i += 1) n = n * 10 + (text.charCodeAt(i) - ZERO);
  return n;
};

/**
 * A parser for `timestamptz` text that reads the shape a UTC session sends for the years
 * 1000-9999, `YYYY-MM-DD HH:MM:SS+00` or with 1 to 6 fraction digits before the `+00`, into the same
 * `Date` as `pg`'s own parser (postgres-date: `Date.UTC` of the fields with milliseconds
 * `1000 * parseFloat('.ffffff')`, truncated by `Date`), and hands any other text (another time
 * zone's offset, BC, `infinity`, another year) to `fallback`, `pg`'s parser.
 */
export function timestamptzParser(fallback: (text: string) => unknown): (text: string) => unknown {
  return (text: string) => {
    const n = text.length;
    if (
      n < 22 ||
      n > 29 ||
      n === 23 ||
      text.charCodeAt(n - 3) !== PLUS ||
      text.charCodeAt(n - 2) !== ZERO ||
      text.charCodeAt(n - 1) !== ZERO ||
      text.charCodeAt(4) !== DASH ||
      text.charCodeAt(7) !== DASH ||
      text.charCodeAt(10) !== SPACE ||
      text.charCodeAt(13) !== COLON ||
      text.charCodeAt(16) !== COLON ||
      text.charCodeAt(0) === ZERO
    ) {
      return fallback(text);
    }
    for (const i of DIGIT_POSITIONS) if (!digitAt(text, i)) return fallback(text);
    let ms = 0;
    if (n > 22) {
      if (text.charCodeAt(19) !== DOT) return fallback(text);
      for (let i = 20; i < n - 3; i += 1) if (!digitAt(text, i)) return fallback(text);
      ms = 1000 * parseFloat(text.slice(19, n - 3));
    }
    return new Date(
      Date.UTC(digits(text, 0, 4), digits(text, 5, 7) - 1, digits(text, 8, 10), digits(text, 11, 13), digits(text, 14, 16), digits(text, 17, 19), ms),
    );
  };
}

const DIGIT_POSITIONS = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18];
