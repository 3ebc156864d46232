/**
 * @module storage/pg-timestamps
 * `timestamptz` values of the `pg` adapter's own pool, read with one anchored expression instead of
 * `pg`'s four on the usual shape (branch perf-jit2: a step reads back two or three, its messages' `created_at`).
 */

/** The usual shape: a UTC session's text for the years 1000-9999, with 0 to 6 fraction digits. */
const UTC_TEXT = /^([1-9]\d{3})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(\.\d{1,6})?\+00$/;

/**
 * A parser for `timestamptz` text that reads the shape a UTC session sends for the years
 * 1000-9999, `YYYY-MM-DD HH:MM:SS+00` or with 1 to 6 fraction digits before the `+00`, into the same
 * `Date` as `pg`'s own parser (postgres-date: `Date.UTC` of the fields with milliseconds
 * `1000 * parseFloat('.ffffff')`, truncated by `Date`), and hands any other text (another time
 * zone's offset, BC, `infinity`, another year) to `fallback`, `pg`'s parser.
 */
export function timestamptzParser(fallback: (text: string) => unknown): (text: string) => unknown {
  return (text: string) => {
    // One anchored expression and no loop: the function stays small for V8 (docs/benchmarks.md, Perf-jit2).
    const m = UTC_TEXT.exec(text);
    if (m === null) return fallback(text);
    const fraction = m[7];
    return new Date(Date.UTC(+m[1]!, +m[2]! - 1, +m[3]!, +m[4]!, +m[5]!, +m[6]!, fraction === undefined ? 0 : 1000 * parseFloat(fraction)));
  };
}
