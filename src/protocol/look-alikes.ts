/**
 * @module protocol/look-alikes
 * Which characters of a card's text can pass for other characters a human would read there: the
 * Cyrillic `о` in `~/prоjects`, a fullwidth `ｒｍ`, a Greek question mark that is a semicolon, an en
 * dash that reads as the `-` of a flag, a word such as `рор` written wholly in Cyrillic letters
 * that look like Latin ones. `visibleText` shows each of them as `<U+XXXX>` in strict text (every
 * card field, the CLI, the inspector), so what a human approves reads as what runs.
 *
 * The rule, after Unicode's UTS #39 ("highly restrictive" identifiers), is per word (a run of
 * letters, marks and digits) and meant to leave real text in other languages alone:
 * - a word that mixes scripts marks all of its characters outside ASCII, except Latin with Han,
 *   Hiragana and Katakana (Japanese), with Han and Bopomofo (Chinese) or with Han and Hangul
 *   (Korean), which real file names mix;
 * - a word in one script other than Latin whose letters all look like Latin letters (`рор`, `ѕсоре`,
 *   `ΤΟΡ`) marks them all; a word with one letter that does not (`Документы`, `отчёт`) is shown as
 *   it is;
 * - wherever it stands, a character whose compatibility form (NFKC) is ASCII (fullwidth forms,
 *   mathematical letters, `;` as U+037E, ligatures; not the ellipsis `…`), a dash, minus or slash other than ASCII, and a
 *   Latin letter made to look like an ASCII one (dotless `ı`, `ɑ`, `ɡ`, small capitals) is marked.
 * So `~/Документы/отчёт.pdf`, `~/Téléchargements`, `~/文档/設定.json` and `データfile` show as
 * they are; the price is that a short word such as Russian `а` or `у`, Turkish `ı` and prose dashes
 * show as tokens.
 */

/** Non-ASCII letters that read as ASCII letters in common fonts (Cyrillic, Greek, Armenian, Latin). */
const LATIN_LOOKALIKE_LETTERS = new Set(
  [
    // Cyrillic
    '\u0430\u0435\u043e\u0440\u0441\u0443\u0445\u0455\u0456\u0458\u04bb\u0501\u051b\u051d\u04cf',
    '\u0410\u0412\u0415\u041a\u041c\u041d\u041e\u0420\u0421\u0422\u0423\u0425\u0405\u0406\u0408\u04ae\u051a\u051c\u04ba\u04c0',
    // Greek
    '\u0391\u0392\u0395\u0396\u0397\u0399\u039a\u039c\u039d\u039f\u03a1\u03a4\u03a5\u03a7',
    '\u03b1\u03b9\u03ba\u03bd\u03bf\u03c1\u03c5\u03f2\u03f3',
    // Armenian
    '\u0585\u057d\u0578\u0570\u0581\u0566',
    // Latin letters shaped like ASCII ones
    '\u0131\u0237\u0251\u0261\u0269\u026a\u0280\u028f\u029c\u0299\u01c0\u01c1\u01c3',
  ].join(''),
);
const SMALL_CAPITALS = /[\u1d00-\u1d22]/u;
/** Dashes, minus signs and slashes that read as ASCII `-` and `/` (ASCII compatibility forms are found by NFKC). */
const PUNCTUATION_LOOKALIKES = /[\u2010-\u2015\u2212\u2043\u2044\u2215\u2571\u29f5\u29f8\u2e3a\u2e3b]/u;
const WORD = /[\p{L}\p{M}\p{N}]+/gu;
const LETTER = /\p{L}/u;
const COMMON_OR_INHERITED = /[\p{Script=Common}\p{Script=Inherited}]/u;
const SCRIPTS = [
  'Latin',
  'Cyrillic',
  'Greek',
  'Armenian',
  'Georgian',
  'Cherokee',
  'Hebrew',
  'Arabic',
  'Syriac',
  'Thaana',
  'Devanagari',
  'Bengali',
  'Tamil',
  'Telugu',
  'Thai',
  'Lao',
  'Ethiopic',
  'Han',
  'Hiragana',
  'Katakana',
  'Bopomofo',
  'Hangul',
  'Canadian_Aboriginal',
  'Coptic',
  'Runic',
  'Ogham',
  'Lisu',
  'Vai',
].map((name) => ({ name, test: new RegExp(`\\p{Script=${name}}`, 'u') }));
/** The script sets UTS #39 allows in one word besides a single script. */
const ALLOWED_MIXES = [new Set(['Latin', 'Han', 'Hiragana', 'Katakana']), new Set(['Latin', 'Han', 'Bopomofo']), new Set(['Latin', 'Han', 'Hangul'])];

/** What is known of a character, by code point: texts repeat few distinct characters many times. */
const known = new Map<number, { script: string | null; ascii: boolean }>();
/** Enough for every distinct character of a command at its 64 KiB limit, so one card's check never clears it midway. */
const KNOWN_MAX = 65_536;

function facts(ch: string): { script: string | null; ascii: boolean } {
  const code = ch.codePointAt(0)!;
  let fact = known.get(code);
  if (fact === undefined) {
    fact = { script: findScript(ch), ascii: false };
    known.set(code, fact);
    fact.ascii = findLooksLikeAscii(ch);
    if (known.size > KNOWN_MAX) known.clear();
  }
  return fact;
}

/**
 * The script of a character of the large, fully assigned blocks without a regular expression: a
 * hostile command of thousands of distinct ideographs or syllables otherwise costs up to 28 script
 * tests a character (attack round 7: 64 KiB of distinct Chinese held a card's check for ~0.4 s).
 */
function blockScript(code: number): string | null {
  if ((code >= 0x4e00 && code <= 0x9fff) || (code >= 0x3400 && code <= 0x4dbf)) return 'Han';
  if (code >= 0xac00 && code <= 0xd7a3) return 'Hangul';
  return null;
}

function findScript(ch: string): string | null {
  const block = blockScript(ch.codePointAt(0)!);
  if (block !== null) return block;
  if (COMMON_OR_INHERITED.test(ch)) return null;
  for (const script of SCRIPTS) if (script.test.test(ch)) return script.name;
  return 'other';
}

function scriptOf(ch: string): string | null {
  return facts(ch).script;
}

function isAscii(ch: string): boolean {
  return ch.charCodeAt(0) < 0x80;
}

/** Whether one character, wherever it stands, passes for ASCII. */
export function looksLikeAscii(ch: string): boolean {
  if (isAscii(ch)) return false;
  return facts(ch).ascii;
}

function findLooksLikeAscii(ch: string): boolean {
  if (isAscii(ch)) return false;
  // Unified ideographs and Hangul syllables have no compatibility form and look like no ASCII.
  if (blockScript(ch.codePointAt(0)!) !== null) return false;
  if (LATIN_LOOKALIKE_LETTERS.has(ch) && findScript(ch) === 'Latin') return true;
  if (SMALL_CAPITALS.test(ch) || PUNCTUATION_LOOKALIKES.test(ch)) return true;
  // The ellipsis reads as three dots and says so; the cut views use it for their own cuts.
  if (ch === '\u2026') return false;
  const compatible = ch.normalize('NFKC');
  // eslint-disable-next-line no-control-regex
  return compatible !== ch && /^[\x21-\x7e]+$/.test(compatible);
}

/**
 * The offsets (UTF-16 code units) of the characters of `text` that are to be shown as `<U+XXXX>`
 * because they pass for others: see the module comment.
 *
 * @example
 * lookAlikeOffsets('rm -rf ~/pr\u043ejects'); // Set { 11 }
 */
export function lookAlikeOffsets(text: string): Set<number> {
  const marked = new Set<number>();
  // eslint-disable-next-line no-control-regex
  if (/^[\x00-\x7f]*$/.test(text)) return marked;
  for (let i = 0; i < text.length; ) {
    const ch = String.fromCodePoint(text.codePointAt(i)!);
    if (looksLikeAscii(ch)) marked.add(i);
    i += ch.length;
  }
  for (const match of text.matchAll(WORD)) {
    const word = match[0];
    // eslint-disable-next-line no-control-regex
    if (/^[\x00-\x7f]*$/.test(word)) continue;
    const chars: Array<{ ch: string; at: number }> = [];
    for (let i = 0; i < word.length; ) {
      const ch = String.fromCodePoint(word.codePointAt(i)!);
      chars.push({ ch, at: match.index + i });
      i += ch.length;
    }
    const scripts = new Set(chars.map(({ ch }) => scriptOf(ch)).filter((s): s is string => s !== null));
    const mixed = scripts.size > 1 && !ALLOWED_MIXES.some((allowed) => [...scripts].every((s) => allowed.has(s)));
    const letters = chars.filter(({ ch }) => LETTER.test(ch));
    const disguised = scripts.size === 1 && !scripts.has('Latin') && letters.length > 0 && letters.every(({ ch }) => LATIN_LOOKALIKE_LETTERS.has(ch));
    if (!mixed && !disguised) continue;
    for (const { ch, at } of chars) if (!isAscii(ch)) marked.add(at);
  }
  return marked;
}
