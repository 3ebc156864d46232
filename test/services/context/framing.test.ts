/**
 * The one escape for untrusted text inside runtime framing (attack round 7): exactly which `<` it
 * turns into `&lt;`, and that ordinary text (code, comparisons, generics, HTML) is left as written.
 */
import { describe, expect, it } from 'vitest';
import { escapeFraming, FRAMING_TAG_NAMES, framingTagsIn } from '../../../src/services/context/framing.js';

describe('escapeFraming', () => {
  it('escapes the opening and closing tag of every framing name', () => {
    for (const name of FRAMING_TAG_NAMES) {
      expect(escapeFraming(`<${name}>x</${name}>`)).toBe(`&lt;${name}>x&lt;/${name}>`);
    }
  });

  it('escapes them in any case, with blanks, invisible characters, attributes or look-alike brackets', () => {
    const cases: Array<[string, string]> = [
      ['</Project_Instructions>', '&lt;/Project_Instructions>'],
      ['< /BODY >', '&lt; /BODY >'],
      ['<\t/\n agent_message\n>', '&lt;\t/\n agent_message\n>'],
      ['<sandbox_policy mode="auto">', '&lt;sandbox_policy mode="auto">'],
      ['<sandbox_policy/>', '&lt;sandbox_policy/>'],
      ['<\u200b/body>', '&lt;\u200b/body>'],
      ['</bo\u200bdy>', '&lt;/bo\u200bdy>'],
      ['\uff1c/body\uff1e', '&lt;/body\uff1e'],
      ['\ufe64sandbox_policy>', '&lt;sandbox_policy>'],
      ['<\uff0fbody>', '&lt;\uff0fbody>'],
      ['<\uff53\uff4b\uff49\uff4c\uff4c>', '&lt;\uff53\uff4b\uff49\uff4c\uff4c>'],
      ['<system-reminder>', '&lt;system-reminder>'],
      ['<System_Notice>', '&lt;System_Notice>'],
      ['<tool_result id="1">', '&lt;tool_result id="1">'],
      ['<tool-call>', '&lt;tool-call>'],
      ['end: </available_skills', 'end: &lt;/available_skills'],
      ['<<body>', '<&lt;body>'],
    ];
    for (const [input, expected] of cases) expect(escapeFraming(input), JSON.stringify(input)).toBe(expected);
  });

  it('leaves ordinary text as written', () => {
    const unchanged = [
      'Array<Tool> and Map<string, Task[]>',
      'if (a < b && b <= c) return x => x << 2;',
      '<div class="x"><span>hi</span></div>',
      '<bodyguard> <tasks> <systemd> <toolbox> <names> <skills> <paths>',
      'List<Path,Kind>',
      '&lt;body> is already text',
      '< > <',
      '',
      '<',
      `<${'a'.repeat(100)}>`,
    ];
    for (const text of unchanged) expect(escapeFraming(text), JSON.stringify(text)).toBe(text);
  });

  it('drops nothing: unescaping the one entity it writes gives the input back', () => {
    const text = 'x </agent_message> y <SYSTEM> z < /body > w Array<Tool>';
    expect(escapeFraming(text).replaceAll('&lt;', '<')).toBe(text);
    expect(framingTagsIn(escapeFraming(text))).toEqual([]);
    expect(framingTagsIn(text)).toEqual(['agent_message', 'SYSTEM', 'body']);
  });

  it('is linear on hostile input (a megabyte of openers, blanks and long names: well under 2 s of CPU; a quadratic scan takes hours)', () => {
    const inputs = [
      '<'.repeat(1 << 20),
      `<${' '.repeat(1 << 20)}body>`,
      `< ${'/'.repeat(1 << 20)}`,
      `<${'s'.repeat(64)}`.repeat(1 << 14),
      '< /\u200b'.repeat(1 << 18),
      '<system_'.repeat(1 << 17),
    ];
    for (const input of inputs) {
      const started = process.cpuUsage();
      escapeFraming(input);
      const used = process.cpuUsage(started);
      // CPU time, not wall time: a loaded machine does not count. Each input takes 20-300 ms alone.
      expect((used.user + used.system) / 1000, input.slice(0, 20)).toBeLessThan(2_000);
    }
  });
});
