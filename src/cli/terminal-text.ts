/**
 * @module cli/terminal-text
 * What the CLI does to text it did not write before it reaches a terminal. Answers, reasoning, tool
 * arguments and results, card fields, file contents in a diff and session titles all come from the
 * model, a tool or a file, so they may hold terminal control sequences: a carriage return or
 * `ESC [2K` that erases the real command on an approval card and prints a harmless one in its
 * place, cursor moves that rewrite earlier lines, an OSC 52 sequence that writes the clipboard, an
 * OSC 8 hyperlink that hides its target, or bidirectional overrides that show characters in an
 * order other than the one that runs. Every such character is shown as a visible token instead
 * (`protocol/visible-text`): C0 controls in caret notation (`^[`, `^M`), DEL as `^?`, C1 controls,
 * the bidirectional formatting characters, zero-width spaces and tag characters as `<U+XXXX>`.
 * Newlines stay; tabs stay unless `singleLine` is asked. Card fields and commands are `strict`
 * (every invisible or look-alike character, long blank runs folded).
 */
import { visibleText, type VisibleTextOptions } from '../protocol/visible-text.js';

export type TerminalTextOptions = VisibleTextOptions;

/** `text` with every terminal control character made visible; safe to write to a terminal. */
export function terminalText(text: string, options: TerminalTextOptions = {}): string {
  return visibleText(text, options);
}
