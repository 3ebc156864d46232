/**
 * `visibleText`, `visibleSpan` and `cutMiddle` on their own: which characters become tokens in
 * running text and in strict text, how runs fold, and that a cut keeps the tail.
 */
import { describe, expect, it } from 'vitest';
import { cutMiddle, visibleSpan, visibleText } from '../../src/protocol/visible-text.js';

describe('visibleText', () => {
  it('running text: controls, bidi, zero-width space, BOM and tags become tokens; joiners and variation selectors stay', () => {
    expect(visibleText('a\r\u001b[2K\u007f\u009b\u202e\u200b\ufeff\u{e0041}\u2028b')).toBe('a^M^[[2K^?<U+009B><U+202E><U+200B><U+FEFF><U+E0041><U+2028>b');
    expect(visibleText('👨\u200d👩 ❤\ufe0f x\u00a0y\n\tz')).toBe('👨\u200d👩 ❤\ufe0f x\u00a0y\n\tz');
    expect(visibleText('a\nb\tc', { singleLine: true })).toBe('a^Jb^Ic');
  });

  it('strict text: every format, default-ignorable, look-alike space, private-use, unassigned and lone surrogate', () => {
    expect(visibleText('a\u200d\ufe0f\u00ad\u034f\u00a0\u3000\ue000\u{10ffff}\ud800b', { strict: true })).toBe(
      'a<U+200D><U+FE0F><U+00AD><U+034F><U+00A0><U+3000><U+E000><U+10FFFF><U+D800>b',
    );
  });

  it('strict text: look-alike letters and signs become tokens, real words in other languages stay (trust-mcp-cards)', () => {
    const strict = (t: string) => visibleText(t, { strict: true });
    // A mixed-script word marks its characters outside ASCII.
    expect(strict('rm -rf ~/pr\u043ejects')).toBe('rm -rf ~/pr<U+043E>jects');
    expect(strict('\u03a1aypal')).toBe('<U+03A1>aypal');
    // A word of one other script whose letters all look Latin.
    expect(strict('/tmp/\u0440\u043e\u0440 \u03a4\u039f\u03a1')).toBe('/tmp/<U+0440><U+043E><U+0440> <U+03A4><U+039F><U+03A1>');
    // Compatibility forms of ASCII, dashes and slashes, Latin letters shaped like ASCII ones.
    expect(strict('\uff52\uff4d \u2013rf a\u2215b ls\u037e k\u0251t \ud835\udc2b')).toBe('<U+FF52><U+FF4D> <U+2013>rf a<U+2215>b ls<U+037E> k<U+0251>t <U+1D42B>');
    // Real words stay: Cyrillic with letters that look like nothing Latin, accents, decomposed accents, CJK with Latin.
    for (const real of ['~/\u0414\u043e\u043a\u0443\u043c\u0435\u043d\u0442\u044b/\u043e\u0442\u0447\u0451\u0442.pdf', '~/T\u00e9l\u00e9chargements', 'cafe\u0301', '~/\u6587\u6863/\u8a2d\u5b9a.json', '\u30c7\u30fc\u30bffile \u30b5\u30fc\u30d0\u30fc', '\ud55c\uad6dabc', 'na\u00efve \u2026 \u00fcber']) {
      expect(strict(real)).toBe(real);
    }
    // Running text (an answer) is not judged.
    expect(visibleText('pr\u043ejects')).toBe('pr\u043ejects');
  });

  it('strict text folds long blank runs and line-break runs, and keeps short ones', () => {
    expect(visibleText(`a${' '.repeat(8)}b${' '.repeat(9)}c\t${' '.repeat(9)}d`, { strict: true })).toBe(`a${' '.repeat(8)}b<9 spaces>c<10 blanks>d`);
    expect(visibleText('a\n\n\nb\n\n  \n\nc', { strict: true })).toBe('a\n\n\nb\n<4 line breaks>\nc');
  });

  it('visibleSpan moves a span to the shown text', () => {
    const text = 'echo \u200b\u200b; rm -rf x';
    const span = { start: text.indexOf('rm'), end: text.length };
    const shown = visibleText(text, { strict: true });
    const moved = visibleSpan(text, span, { strict: true });
    expect(shown.slice(moved.start, moved.end)).toBe('rm -rf x');
  });
});

describe('cutMiddle', () => {
  it('keeps the head and the tail and says how much was cut; never splits a surrogate pair', () => {
    const text = `${'a'.repeat(500)}; rm -rf ~`;
    const cut = cutMiddle(text, 60);
    expect(cut.endsWith('; rm -rf ~')).toBe(true);
    expect(cut.startsWith('aaa')).toBe(true);
    const n = Number(/<(\d+) characters cut>/.exec(cut)![1]);
    expect(cut.length - `… <${n} characters cut> …`.length + n).toBe(text.length);
    expect(cutMiddle('short', 60)).toBe('short');
    const emoji = '😀'.repeat(100);
    expect(cutMiddle(emoji, 40)).not.toMatch(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/);
  });
});
