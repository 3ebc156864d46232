/**
 * @module protocol/visible-text
 * Text shown to a human who decides on it (an approval card, a tool line, a terminal) with every
 * character that would not show as itself replaced by a visible token. The model chooses what a
 * card shows: a command such as `rm -rf ~/\u202Egpj.txt` displays as `rm -rf ~/txt.jpg`, a
 * zero-width space or a Unicode tag character (U+E0000–U+E007F) hides inside a word, a no-break
 * space passes for the space that separates two arguments, and a carriage return or `ESC [2K`
 * erases what came before it. Shown as tokens, the human sees that something is there and what:
 * C0 controls in caret notation (`^M`, `^[`), DEL as `^?`, everything else as `<U+XXXX>`.
 *
 * `strict` text (what a card shows) also makes visible what only looks like something else (spaces
 * other than U+0020, private-use and unassigned code points) and folds what pushes the rest out of
 * sight: a run of more than 8 blanks becomes `<500 spaces>`, more than 3 line breaks in a row
 * `<40 line breaks>`, so the dangerous tail of a command cannot sit past the edge of a one-line
 * field or many screens below its head. `cutMiddle` shortens text by keeping its head and its tail
 * and saying how much was cut, never by dropping the end.
 *
 * Strict text also shows as `<U+XXXX>` the letters and signs that pass for others (a Cyrillic `о` in
 * `~/prоjects`, a fullwidth `ｒｍ`, an en dash before `rf`): the rule, which leaves real words in
 * other languages alone, is in `protocol/look-alikes`.
 *
 * Only what is shown changes: the command that runs, the grant key that covers it and what is
 * stored are the text itself.
 */

import { lookAlikeOffsets } from './look-alikes.js';

/**
 * What never shows as itself in running text (an answer, a file in a diff): controls, the
 * bidirectional controls and marks, the zero-width space and word joiners, the byte order mark,
 * tag characters, the line and paragraph separators and lone surrogates. The zero-width
 * (non-)joiners and variation selectors stay here: Persian and Indic words and emoji sequences need
 * them, and they hide nothing in text that is only read.
 */
const HIDDEN = /[\p{Cc}\p{Cs}\p{Zl}\p{Zp}\u061c\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\u{e0000}-\u{e007f}]/gu;
/**
 * In strict text, every format character and default-ignorable code point (variation selectors,
 * Hangul fillers, the combining grapheme joiner, the soft hyphen, the joiners), spaces other than
 * U+0020, private-use and unassigned code points as well.
 */
const HIDDEN_STRICT = /[\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}\p{Zs}\p{Co}\p{Cn}]/gu;
const HIDDEN_STRICT_ONE = new RegExp(HIDDEN_STRICT.source, 'u');
/** A character `HIDDEN_STRICT` matches, or any other outside ASCII (a look-alike candidate). */
const HIDDEN_OR_NOT_ASCII = /[\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}\p{Zs}\p{Co}\p{Cn}]|[^\x00-\x7f]/gu;
/** A run of more than 8 spaces or tabs. */
const BLANK_RUN = /[ \t]{9,}/g;
/** More than 3 line breaks in a row (blanks between them included). */
const BREAK_RUN = /\n(?:[ \t]*\n){3,}/g;

export interface VisibleTextOptions {
  /** Newlines and tabs become tokens too (a title, a one-line summary). */
  singleLine?: boolean;
  /** Text a human decides on (a card field, a command): also look-alike spaces and folded runs. */
  strict?: boolean;
}

/** The visible token for one code point: caret notation for C0 controls and DEL, else `<U+XXXX>`. */
export function visibleToken(ch: string): string {
  const code = ch.codePointAt(0)!;
  if (code < 0x20) return `^${String.fromCharCode(code + 0x40)}`;
  if (code === 0x7f) return '^?';
  return `<U+${code.toString(16).toUpperCase().padStart(4, '0')}>`;
}

/**
 * `text` with every character that would not show as itself made visible.
 *
 * @example
 * visibleText('rm -rf ~/\u202Egpj.txt'); // 'rm -rf ~/<U+202E>gpj.txt'
 * visibleText('ls' + ' '.repeat(200) + '; rm -rf ~', { strict: true }); // 'ls<200 spaces>; rm -rf ~'
 */
export function visibleText(text: string, options: VisibleTextOptions = {}): string {
  const multiLine = options.singleLine !== true;
  let shown = text;
  if (options.strict === true) {
    if (multiLine) shown = shown.replace(BREAK_RUN, (run) => `\n<${run.split('\n').length - 1} line breaks>\n`);
    shown = shown.replace(BLANK_RUN, (run) => (/^ +$/.test(run) ? `<${run.length} spaces>` : `<${run.length} blanks>`));
  }
  if (options.strict !== true) return shown.replace(HIDDEN, (ch) => hiddenToken(ch, multiLine));
  // Look-alike letters are judged on the whole text (a word is judged whole), then shown as tokens too.
  const lookAlikes = lookAlikeOffsets(shown);
  if (lookAlikes.size === 0) return shown.replace(HIDDEN_STRICT, (ch) => hiddenToken(ch, multiLine));
  return shown.replace(HIDDEN_OR_NOT_ASCII, (ch: string, offset: number) => {
    if (HIDDEN_STRICT_ONE.test(ch)) return hiddenToken(ch, multiLine);
    return lookAlikes.has(offset) ? visibleToken(ch) : ch;
  });
}

/** A hidden character as its token; the space, and in multi-line text the newline and tab, stay. */
function hiddenToken(ch: string, multiLine: boolean): string {
  if (ch === ' ') return ch;
  if (multiLine && (ch === '\n' || ch === '\t')) return ch;
  return visibleToken(ch);
}

/**
 * Where `span` (offsets into `text`) lies in `visibleText(text, options)`: the shown length of what
 * comes before its start and end. A folded run that crosses one of its ends moves that end to the
 * run's edge.
 */
export function visibleSpan(text: string, span: { start: number; end: number }, options: VisibleTextOptions = {}): { start: number; end: number } {
  const start = visibleText(text.slice(0, span.start), options).length;
  const end = Math.max(start, visibleText(text.slice(0, span.end), options).length);
  return { start, end };
}

/**
 * `text` cut to about `max` characters by keeping its head and its tail, with the number of
 * characters cut between them, so the end of a command is always shown. Never splits a surrogate
 * pair.
 *
 * @example
 * cutMiddle('a'.repeat(500) + ' && rm -rf ~', 60); // 'aaa… <452 characters cut> …a && rm -rf ~'
 */
export function cutMiddle(text: string, max: number): string {
  if (text.length <= max) return text;
  const room = Math.max(2, max - 24);
  let head = Math.ceil((room * 2) / 3);
  let tail = text.length - (room - head);
  if (isLowSurrogate(text.charCodeAt(head))) head -= 1;
  if (isLowSurrogate(text.charCodeAt(tail))) tail += 1;
  return `${text.slice(0, head)}… <${tail - head} characters cut> …${text.slice(tail)}`;
}

function isLowSurrogate(code: number): boolean {
  return code >= 0xdc00 && code <= 0xdfff;
}
