/**
 * The file tools (reference §11.2): read limits and paging, read-before-edit, write/edit results
 * and `file_change` artifacts, grep/glob/list limits, `.gitignore`, and the 32,000-byte bound with
 * its spill file; plus the spill purge at start-up.
 */
import { mkdirSync, readFileSync, utimesSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { changedSinceReadText, readFirstText } from '../../../src/services/tools/observations.js';
import { boundResultText, MAX_RESULT_BYTES, purgeSpill } from '../../../src/services/tools/output.js';
import { READ_MAX_LINE_CHARS } from '../../../src/services/tools/read.js';
import { sha256, type FileChangeArtifact } from '../../../src/services/tools/file-change.js';
import { type ToolEnv, useToolEnv } from '../../support/tool-env.js';

let env: ToolEnv;
useToolEnv((e) => (env = e));

describe('read', () => {
  it('numbers lines, pages with offset and limit, and says where to continue', async () => {
    writeFileSync(join(env.ws, 'lines.txt'), Array.from({ length: 10 }, (_, i) => `line ${i + 1}`).join('\n') + '\n');
    expect((await env.call('read', { path: 'lines.txt', limit: 3 })).result.text).toBe('1\tline 1\n2\tline 2\n3\tline 3\n(lines 1-3 of 10; continue with offset=4)');
    expect((await env.call('read', { path: 'lines.txt', offset: 9 })).result.text).toBe('9\tline 9\n10\tline 10\n(lines 9-10 of 10; end of file)');
    expect((await env.call('read', { path: 'lines.txt', offset: 11 })).result).toMatchObject({ status: 'failed', text: `offset 11 is past the end of ${join(env.ws, 'lines.txt')} (10 lines).` });
  });

  it('stops at 2,000 lines and about 31 KB, cuts long lines, and never exceeds the result bound', async () => {
    writeFileSync(join(env.ws, 'many.txt'), Array.from({ length: 3000 }, (_, i) => `${i}`).join('\n'));
    const many = (await env.call('read', { path: 'many.txt' })).result.text;
    expect(many.split('\n')).toHaveLength(2001);
    expect(many.endsWith('(lines 1-2000 of 3000; continue with offset=2001)')).toBe(true);
    writeFileSync(join(env.ws, 'wide.txt'), Array.from({ length: 100 }, () => 'x'.repeat(5000)).join('\n'));
    const wide = (await env.call('read', { path: 'wide.txt' })).result.text;
    expect(Buffer.byteLength(wide)).toBeLessThanOrEqual(MAX_RESULT_BYTES);
    expect(wide.split('\n')[0]).toBe(`1\t${'x'.repeat(READ_MAX_LINE_CHARS)}... (line truncated to 2000 characters)`);
    expect(wide).toMatch(/\(lines 1-\d+ of 100; continue with offset=\d+\)$/);
  });

  it('answers for missing files, directories and binary files', async () => {
    expect((await env.call('read', { path: 'nope.txt' })).result).toMatchObject({ status: 'failed', text: `File not found: ${join(env.ws, 'nope.txt')}` });
    expect((await env.call('read', { path: 'src' })).result.text).toMatch(/is a directory; use list/);
    writeFileSync(join(env.ws, 'bin.dat'), Buffer.from([1, 0, 2, 3]));
    expect((await env.call('read', { path: 'bin.dat' })).result.text).toBe(`${join(env.ws, 'bin.dat')} is a binary file (4 bytes); it was not read.`);
  });
});

describe('read-before-edit', () => {
  it('editing or overwriting an existing file needs a read; a change since the read needs another', async () => {
    const path = join(env.ws, 'rbe.txt');
    writeFileSync(path, 'alpha\nbeta\n');
    expect((await env.call('edit', { path: 'rbe.txt', oldString: 'alpha', newString: 'ALPHA' }, { sessionId: 'ses_rbe' })).result.text).toBe(readFirstText(path));
    expect((await env.call('write', { path: 'rbe.txt', content: 'x' }, { sessionId: 'ses_rbe' })).result.text).toBe(readFirstText(path));
    await env.call('read', { path: 'rbe.txt' }, { sessionId: 'ses_rbe' });
    // Observations are per session.
    expect((await env.call('edit', { path: 'rbe.txt', oldString: 'alpha', newString: 'ALPHA' }, { sessionId: 'ses_other' })).result.text).toBe(readFirstText(path));
    writeFileSync(path, 'alpha\nbeta\ngamma\n');
    expect((await env.call('edit', { path: 'rbe.txt', oldString: 'alpha', newString: 'ALPHA' }, { sessionId: 'ses_rbe' })).result.text).toBe(changedSinceReadText(path));
    await env.call('read', { path: 'rbe.txt' }, { sessionId: 'ses_rbe' });
    expect((await env.call('edit', { path: 'rbe.txt', oldString: 'alpha', newString: 'ALPHA' }, { sessionId: 'ses_rbe' })).result.status).toBe('succeeded');
    // A successful edit updates the hash: editing again needs no new read.
    expect((await env.call('edit', { path: 'rbe.txt', oldString: 'beta', newString: 'BETA' }, { sessionId: 'ses_rbe' })).result.status).toBe('succeeded');
    expect(readFileSync(path, 'utf8')).toBe('ALPHA\nBETA\ngamma\n');
  });
});

describe('write and edit', () => {
  it('write creates files (with parents) and returns a file_change artifact', async () => {
    const { result } = await env.call('write', { path: 'new/dir/file.txt', content: 'one\ntwo\n' }, { toolCallId: 'tc_create' });
    const path = join(env.ws, 'new', 'dir', 'file.txt');
    expect(result).toEqual({
      status: 'succeeded',
      text: `Created ${path} (8 bytes).`,
      artifacts: [
        {
          type: 'file_change',
          changeId: 'tc_create',
          path,
          kind: 'created',
          additions: 2,
          deletions: 0,
          hunks: [{ oldStart: 1, oldLines: 0, newStart: 1, newLines: 2, lines: ['+one', '+two'] }],
          beforeHash: null,
          afterHash: sha256('one\ntwo\n'),
          beforeContent: null,
          afterContent: 'one\ntwo\n',
          undone: false,
        },
      ],
    });
  });

  it('edit replaces one occurrence, refuses ambiguity, and keeps $ patterns literal', async () => {
    const path = join(env.ws, 'edit.txt');
    writeFileSync(path, Array.from({ length: 12 }, (_, i) => `row ${i}`).join('\n') + '\nrow 5\n');
    await env.call('read', { path: 'edit.txt' });
    expect((await env.call('edit', { path: 'edit.txt', oldString: 'row 5', newString: 'x' })).result.text).toBe(`oldString occurs 2 times in ${path}; include more surrounding text to make it unique, or set replaceAll.`);
    expect((await env.call('edit', { path: 'edit.txt', oldString: 'nothing', newString: 'x' })).result.text).toBe(`oldString was not found in ${path}.`);
    const { result } = await env.call('edit', { path: 'edit.txt', oldString: 'row 8\n', newString: 'row $& $1\n' });
    expect(result.text).toBe(`Edited ${path}: replaced 1 occurrence (+1 -1 lines).`);
    const artifact = result.artifacts![0] as FileChangeArtifact;
    expect(artifact).toMatchObject({ kind: 'modified', additions: 1, deletions: 1, beforeHash: expect.any(String) });
    expect(artifact.hunks).toEqual([{ oldStart: 6, oldLines: 7, newStart: 6, newLines: 7, lines: [' row 5', ' row 6', ' row 7', '-row 8', '+row $& $1', ' row 9', ' row 10', ' row 11'] }]);
    const all = await env.call('edit', { path: 'edit.txt', oldString: 'row 5', newString: 'five', replaceAll: true });
    expect(all.result.text).toBe(`Edited ${path}: replaced 2 occurrences (+2 -2 lines).`);
    expect(readFileSync(path, 'utf8')).toContain('row $& $1\n');
  });

  it('invalid edits are invalid arguments; a missing file points to write', async () => {
    expect((await env.call('edit', { path: 'x', oldString: '', newString: 'a' })).result.error?.code).toBe('invalid_arguments');
    expect((await env.call('edit', { path: 'x', oldString: 'a', newString: 'a' })).result.text).toBe('invalid tool input: oldString and newString are the same');
    expect((await env.call('edit', { path: 'missing.txt', oldString: 'a', newString: 'b' })).result.text).toBe(`${join(env.ws, 'missing.txt')} does not exist; use write to create it.`);
    expect((await env.call('write', { path: 'huge.txt', content: 'x'.repeat(1024 * 1024 + 1) })).result.error?.code).toBe('invalid_arguments');
  });
});

describe('grep, glob and list', () => {
  beforeAll(() => {
    mkdirSync(join(env.ws, 'search', 'lib'), { recursive: true });
    mkdirSync(join(env.ws, 'search', 'build'), { recursive: true });
    writeFileSync(join(env.ws, 'search', '.gitignore'), 'build/\n*.log\n');
    writeFileSync(join(env.ws, 'search', 'lib', 'a.ts'), 'export const needle = 1;\n// Needle again\n');
    writeFileSync(join(env.ws, 'search', 'lib', 'b.js'), 'const needle = 2;\n');
    writeFileSync(join(env.ws, 'search', 'build', 'out.ts'), 'needle in build\n');
    writeFileSync(join(env.ws, 'search', 'debug.log'), 'needle in log\n');
    writeFileSync(join(env.ws, 'search', 'many.txt'), Array.from({ length: 80 }, () => 'needle').join('\n'));
    utimesSync(join(env.ws, 'search', 'lib', 'a.ts'), new Date(2030, 0, 1), new Date(2030, 0, 1));
  });

  it('grep: path:line: text, honours .gitignore, include globs, case folding, per-file and total limits', async () => {
    const text = (await env.call('grep', { pattern: 'needle', path: 'search', include: '*.ts' })).result.text;
    expect(text).toBe('search/lib/a.ts:1: export const needle = 1;');
    const folded = (await env.call('grep', { pattern: 'needle', path: 'search/lib', ignoreCase: true })).result.text;
    expect(folded.split('\n')).toEqual(['search/lib/a.ts:1: export const needle = 1;', 'search/lib/a.ts:2: // Needle again', 'search/lib/b.js:1: const needle = 2;']);
    const many = (await env.call('grep', { pattern: 'needle', path: 'search/many.txt' })).result.text;
    expect(many.split('\n').filter((l) => l.startsWith('search/many.txt:'))).toHaveLength(50);
    expect(many).toMatch(/results truncated: at most 250 lines, 50 per file, from 250 files/);
    expect((await env.call('grep', { pattern: '(' })).result.text).toMatch(/^invalid tool input: pattern: /);
    expect((await env.call('grep', { pattern: 'zzz-nothing', path: 'search' })).result.text).toBe('No matches for "zzz-nothing" in search.');
  });

  it('glob: newest first, .gitignore honoured, names without / match at any depth', async () => {
    expect((await env.call('glob', { pattern: '*.ts', path: 'search' })).result.text).toBe('search/lib/a.ts');
    expect((await env.call('glob', { pattern: '**/*.{ts,js}', path: 'search' })).result.text).toBe('search/lib/a.ts\nsearch/lib/b.js');
    expect((await env.call('glob', { pattern: '*.none' })).result.text).toBe('No files match "*.none" in ' + env.ws + '.');
  });

  it('glob stops at 100 results and says how many there were', async () => {
    mkdirSync(join(env.ws, 'globmany'));
    for (let i = 0; i < 120; i += 1) writeFileSync(join(env.ws, 'globmany', `f${i}.md`), '');
    const text = (await env.call('glob', { pattern: '*.md', path: 'globmany' })).result.text;
    expect(text.split('\n').filter((l) => l.endsWith('.md'))).toHaveLength(100);
    expect(text).toMatch(/\(showing 100 of 120 matches, newest first; narrow the pattern\)$/);
  });

  it('list: entries with / on directories, recursive breadth-first, limit', async () => {
    expect((await env.call('list', { path: 'search' })).result.text).toBe('search:\n.gitignore\nlib/\nmany.txt');
    expect((await env.call('list', { path: 'search', recursive: true })).result.text).toBe('search:\n.gitignore\nlib/\nmany.txt\nlib/a.ts\nlib/b.js');
    expect((await env.call('list', { path: 'search', recursive: true, limit: 2 })).result.text).toBe('search:\n.gitignore\nlib/\n(first 2 entries shown; raise limit (at most 2000) or list a subdirectory)');
    expect((await env.call('list', {})).result.text.split('\n')).toContain('.git/');
  });
});

describe('result bounds and spill files', () => {
  it('a result over 32,000 bytes keeps its head, spills the whole text and fits with its footer', () => {
    const text = Array.from({ length: 5000 }, (_, i) => `line ${i} ${'y'.repeat(20)}`).join('\n');
    const spill = join(env.home, '.openwork', 'spill', 'ses_bound', 'tc.txt');
    const bounded = boundResultText(text, spill);
    expect(Buffer.byteLength(bounded)).toBeLessThanOrEqual(MAX_RESULT_BYTES);
    expect(readFileSync(spill, 'utf8')).toBe(text);
    const [head, footer] = bounded.split('\n... (');
    expect(text.startsWith(`${head}\n`)).toBe(true);
    expect(footer).toBe(`${Buffer.byteLength(text) - Buffer.byteLength(head!) - 1} bytes omitted. Full output saved at ${spill} — use read with offset/limit, or grep, to look at it.)`);
    expect(boundResultText('short', spill)).toBe('short');
  });

  it('spill directories older than 7 days are purged at start-up, newer ones stay', () => {
    const root = join(env.base, 'spill-root');
    for (const [name, ageDays] of [['old', 8], ['new', 6]] as const) {
      mkdirSync(join(root, name), { recursive: true });
      writeFileSync(join(root, name, 'x.txt'), 'x');
      const when = new Date(Date.now() - ageDays * 24 * 3600 * 1000);
      utimesSync(join(root, name), when, when);
    }
    expect(purgeSpill(root, Date.now())).toBe(1);
    expect(existsSync(join(root, 'old'))).toBe(false);
    expect(existsSync(join(root, 'new'))).toBe(true);
  });
});
