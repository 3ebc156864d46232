/**
 * The spill cap (reference §11.2: spill files are capped): by default 64 MiB, injectable as
 * `maxSpillBytes` (per collector, per bound, or for a whole tool runtime). When the cap is hit the
 * file holds exactly the first `cap` bytes and the footer says so instead of "Full output saved".
 */
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BASH_HEAD_BYTES, BASH_TAIL_BYTES, boundResultText, MAX_RESULT_BYTES, MAX_SPILL_BYTES, omittedText, OutputCollector, spillCap } from '../../../src/services/tools/output.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../../support/tool-env.js';

let env: ToolEnv;
let capped: ToolEnv;
useToolEnv((e) => (env = e));
useToolEnv((e) => (capped = e), { maxSpillBytes: 20_000 });

/** 30 numbered lines of about 1 KiB each, so every part of the output is recognisable. */
function chunks(): Buffer[] {
  return Array.from({ length: 30 }, (_, i) => Buffer.from(`${String(i).padStart(4, '0')} ${'x'.repeat(1018)}\n`));
}

function footerOf(text: string): string {
  const start = text.indexOf('\n... (');
  return text.slice(start + 1, text.indexOf('\n', start + 1));
}

describe('OutputCollector (bash)', () => {
  it('with the default cap the whole output is saved and the footer says so', () => {
    const path = join(env.base, 'spill-default', 'tc.txt');
    const collector = new OutputCollector(path);
    const all = Buffer.concat(chunks());
    for (const c of chunks()) collector.push(c);
    const { text, spilled } = collector.finish();
    expect(spilled).toBe(path);
    expect(readFileSync(path).equals(all)).toBe(true);
    expect(footerOf(text)).toMatch(/^\.\.\. \(\d+ bytes omitted\. Full output saved at /);
  });

  it('past an injected cap the spill file holds exactly the first cap bytes; the footer names the cap; head and tail are still the real ones', () => {
    const path = join(env.base, 'spill-capped', 'tc.txt');
    const collector = new OutputCollector(path, { maxSpillBytes: 20_000 });
    const all = Buffer.concat(chunks());
    for (const c of chunks()) collector.push(c);
    const { text, spilled } = collector.finish();
    expect(spilled).toBe(path);
    expect(statSync(path).size).toBe(20_000);
    expect(readFileSync(path).equals(all.subarray(0, 20_000))).toBe(true);
    const [head, rest] = text.split('\n... (');
    const tail = rest!.slice(rest!.indexOf('\n') + 1);
    expect(Buffer.byteLength(head!)).toBe(BASH_HEAD_BYTES);
    expect(all.subarray(0, BASH_HEAD_BYTES).toString()).toBe(head);
    // The tail comes from the live output, not from the (cut) spill file.
    expect(all.subarray(all.length - BASH_TAIL_BYTES).toString()).toBe(tail);
    const omitted = all.length - BASH_HEAD_BYTES - BASH_TAIL_BYTES;
    expect(footerOf(text)).toBe(`... (${omitted} bytes omitted. The first 20000 bytes are saved at ${path} — use read with offset/limit, or grep, to look at it.)`);
  });

  it('output exactly at the cap is not called cut', () => {
    const path = join(env.base, 'spill-exact', 'tc.txt');
    const all = Buffer.concat(chunks());
    const collector = new OutputCollector(path, { maxSpillBytes: all.length });
    for (const c of chunks()) collector.push(c);
    expect(footerOf(collector.finish().text)).toMatch(/Full output saved at /);
    expect(statSync(path).size).toBe(all.length);
  });
});

describe('boundResultText (every other result)', () => {
  it('a result past 32,000 bytes with a small cap: the file holds the first cap bytes, the result still fits with its footer', () => {
    const text = Array.from({ length: 2000 }, (_, i) => `line ${i} ${'y'.repeat(40)}`).join('\n');
    const spill = join(env.base, 'bound-capped', 'tc.txt');
    const bounded = boundResultText(text, spill, { maxSpillBytes: 1_000 });
    expect(Buffer.byteLength(bounded)).toBeLessThanOrEqual(MAX_RESULT_BYTES);
    expect(readFileSync(spill, 'utf8')).toBe(Buffer.from(text).subarray(0, 1_000).toString());
    const [head, footer] = bounded.split('\n... (');
    expect(text.startsWith(`${head}\n`)).toBe(true);
    expect(footer).toBe(`${Buffer.byteLength(text) - Buffer.byteLength(head!) - 1} bytes omitted. The first 1000 bytes are saved at ${spill} — use read with offset/limit, or grep, to look at it.)`);
  });

  it('the cap is a positive integer (invalid_request otherwise); without one it is 64 MiB', () => {
    expect(spillCap()).toBe(MAX_SPILL_BYTES);
    expect(MAX_SPILL_BYTES).toBe(64 * 1024 * 1024);
    expect(spillCap({ maxSpillBytes: 7 })).toBe(7);
    for (const bad of [0, -1, 2.5, Number.NaN]) expect(() => spillCap({ maxSpillBytes: bad })).toThrow(expect.objectContaining({ code: 'invalid_request' }));
    expect(omittedText(10, '/s.txt', 99)).toBe('... (10 bytes omitted. The first 99 bytes are saved at /s.txt — use read with offset/limit, or grep, to look at it.)');
    expect(omittedText(10, '/s.txt')).toBe('... (10 bytes omitted. Full output saved at /s.txt — use read with offset/limit, or grep, to look at it.)');
  });
});

describe('the cap of a tool runtime reaches its tools', () => {
  it('grep: a result past 32,000 bytes spills at most maxSpillBytes', async () => {
    mkdirSync(join(capped.ws, 'wide'));
    for (let f = 0; f < 5; f += 1) {
      writeFileSync(join(capped.ws, 'wide', `f${f}.txt`), Array.from({ length: 50 }, (_, i) => `needle ${f}-${i} ${'w'.repeat(1500)}`).join('\n'));
    }
    const { result } = await capped.call('grep', { pattern: 'needle', path: 'wide' }, { sessionId: 'ses_cap', toolCallId: 'tc_grep' });
    const spill = join(capped.home, '.openwork', 'spill', 'ses_cap', 'tc_grep.txt');
    expect(Buffer.byteLength(result.text)).toBeLessThanOrEqual(MAX_RESULT_BYTES);
    expect(statSync(spill).size).toBe(20_000);
    expect(footerOf(result.text)).toMatch(new RegExp(`^\\.\\.\\. \\(\\d+ bytes omitted\\. The first 20000 bytes are saved at ${spill} — `));
    expect(result.text.startsWith(readFileSync(spill, 'utf8').slice(0, 1000))).toBe(true);
  });

  it('bash: output past the cap keeps head and tail; the spill file is cut at the cap', async (ctx) => {
    requireSandbox(ctx, capped.runtime);
    const { result } = await capped.call('bash', { command: 'seq 1 50000' }, { sessionId: 'ses_cap', toolCallId: 'tc_seq' });
    const spill = join(capped.home, '.openwork', 'spill', 'ses_cap', 'tc_seq.txt');
    expect(statSync(spill).size).toBe(20_000);
    expect(footerOf(result.text)).toMatch(new RegExp(`^\\.\\.\\. \\(\\d+ bytes omitted\\. The first 20000 bytes are saved at ${spill} — `));
    expect(result.text).toMatch(/\n49999\n50000\n\[exit 0; duration \d+ ms\]$/);
    expect(result.text.startsWith('1\n2\n3\n')).toBe(true);
  });
});
