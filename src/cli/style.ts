/**
 * @module cli/style
 * How the CLI styles terminal text: ANSI colours on a colour terminal, plain text otherwise. Both
 * the update renderer (cli/render) and the diff view (cli/diff-view) style through it.
 */

export interface Style {
  /** True when the text is styled (a colour terminal, no NO_COLOR). */
  readonly on: boolean;
  dim(text: string): string;
  bold(text: string): string;
  red(text: string): string;
  green(text: string): string;
  yellow(text: string): string;
  cyan(text: string): string;
}

/** ANSI styling on a colour terminal (and not under NO_COLOR), plain text otherwise. */
export function styleFor(out: NodeJS.WritableStream, env: NodeJS.ProcessEnv = process.env): Style {
  const on = (out as { isTTY?: boolean }).isTTY === true && !env.NO_COLOR;
  const wrap = (open: number, close: number) => (text: string) => (on ? `\u001b[${open}m${text}\u001b[${close}m` : text);
  return { on, dim: wrap(2, 22), bold: wrap(1, 22), red: wrap(31, 39), green: wrap(32, 39), yellow: wrap(33, 39), cyan: wrap(36, 39) };
}
