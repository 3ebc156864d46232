/**
 * Reference §4.15 acc 48 (acceptance audit, branch audit-a): only danger detection parses bash.
 * Read from the import specifiers of the source text, so a second user of the parser fails here.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

const SRC = join(import.meta.dirname, '..', '..', 'src');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

describe('the bash parser [reference §4.15 acc 48]', () => {
  it('only danger detection imports the bash parser [reference §4.15 acc 48]', () => {
    const parsers = sources(SRC)
      .filter((file) => /from ['"](web-tree-sitter|tree-sitter-bash)['"]|require(\.resolve)?\(['"](web-)?tree-sitter/.test(readFileSync(file, 'utf8')))
      .map((file) => relative(SRC, file));
    expect(parsers).toEqual(['services/permissions/danger.ts']);
  });
});
