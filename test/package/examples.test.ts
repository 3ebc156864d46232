/**
 * Issue 16.3: the README's host examples are real programs. Each `examples/*.ts` file appears
 * verbatim in README.md (after an `<!-- example: examples/<file> -->` marker), type-checks against
 * the built package as a host imports it (`openwork-core`, `openwork-core/testing`), and runs
 * (PGlite in memory, the scripted model) printing what its `console.log(...); // <expected>`
 * comments say.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt, ROOT } from '../support/cli-process.js';

const EXAMPLES = readdirSync(join(ROOT, 'examples')).filter((f) => f.endsWith('.ts')).sort();
let host: string;

beforeAll(() => {
  ensureBuilt();
  host = realpathSync(mkdtempSync(join(tmpdir(), 'openwork-examples-')));
  mkdirSync(join(host, 'node_modules'));
  symlinkSync(ROOT, join(host, 'node_modules', 'openwork-core'), 'dir');
  mkdirSync(join(host, 'node_modules', '@types'));
  for (const dep of ['zod', 'tsx', '@types/node']) symlinkSync(join(ROOT, 'node_modules', dep), join(host, 'node_modules', dep), 'dir');
  writeFileSync(join(host, 'package.json'), JSON.stringify({ name: 'examples-host', private: true, type: 'module' }));
  for (const file of EXAMPLES) copyFileSync(join(ROOT, 'examples', file), join(host, file));
}, 300_000);

afterAll(() => {
  if (host) rmSync(host, { recursive: true, force: true });
});

/** The lines an example promises: the trailing comment of each console.log line, in order. */
function expectedLines(source: string): string[] {
  return source
    .split('\n')
    .filter((line) => /console\.log\(/.test(line) && /\/\/ /.test(line))
    .map((line) => line.slice(line.lastIndexOf('// ') + 3).trim());
}

describe('README examples', () => {
  it('every example is in the README verbatim, and every marked README block is an example', () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const marked = [...readme.matchAll(/<!-- example: examples\/([\w.-]+) -->\n```ts\n([\s\S]*?)```/g)];
    expect(marked.map((m) => m[1]).sort()).toEqual(EXAMPLES);
    for (const [, file, block] of marked) expect(block, file).toBe(readFileSync(join(ROOT, 'examples', file!), 'utf8'));
  });

  it('type-check against the published declarations', { timeout: 240_000 }, () => {
    const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
    let output = '';
    try {
      execFileSync(process.execPath, [tsc, '--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--skipLibCheck', '--types', 'node', ...EXAMPLES], {
        cwd: host,
        encoding: 'utf8',
        stdio: 'pipe',
      });
    } catch (error) {
      output = `${(error as { stdout?: string }).stdout ?? ''}${(error as { stderr?: string }).stderr ?? ''}`;
    }
    expect(output).toBe('');
  });

  it.each(EXAMPLES)('%s runs and prints what it says', { timeout: 120_000 }, (file) => {
    const out = execFileSync(process.execPath, ['--import', 'tsx', file], { cwd: host, encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '' } });
    expect(out.trim().split('\n')).toEqual(expectedLines(readFileSync(join(ROOT, 'examples', file), 'utf8')));
  });
});
