/**
 * @module cli/terminal-text
 * What the CLI does to text it did not write before it reaches a terminal. Answers, reasoning, tool
 * arguments and results, card fields, file contents in a diff and session titles all come from the
 * model, a tool or a file, so they may hold terminal control sequences: a carriage return or
 * `ESC [2K` that erases the real command on an approval card and prints a harmless one in its
 * place, cursor moves that rewrite earlier lines, an OSC 52 sequence that writes the clipboard, an
 * OSC 8 hyperlink that hides its target, or bidirectional overrides that show characters in an
 * order other than the one that runs. Every such character is shown as a visible token instead:
 * C0 controls in caret notation (`^[`, `^M`), DEL as `^?`, C1 controls and the bidirectional
 * formatting characters as `<U+XXXX>`. Newlines stay; tabs stay unless `singleLine` is asked.
 */

/** The Unicode bidirectional formatting characters (embeddings, overrides, isolates, marks). */
const BIDI = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

/** Everything `terminalText` replaces (newline and tab are decided per call). */
const UNSAFE = /[\u0000-\u0008\u000a-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\t]/g;

function token(ch: string, keepNewlines: boolean, keepTabs: boolean): string {
  const code = ch.charCodeAt(0);
  if (ch === '\n' && keepNewlines) return ch;
  if (ch === '\t' && keepTabs) return ch;
  if (code < 0x20) return `^${String.fromCharCode(code + 0x40)}`;
  if (code === 0x7f) return '^?';
  if (code <= 0x9f || BIDI.test(ch)) return `<U+${code.toString(16).toUpperCase().padStart(4, '0')}>`;
  return ch;
}

export interface TerminalTextOptions {
  /** Newlines and tabs become tokens too (a card field, a one-line summary). */
  singleLine?: boolean;
}

/** `text` with every terminal control character made visible; safe to write to a terminal. */
export function terminalText(text: string, options: TerminalTextOptions = {}): string {
  const multiLine = options.singleLine !== true;
  return text.replace(UNSAFE, (ch) => token(ch, multiLine, multiLine));
}
