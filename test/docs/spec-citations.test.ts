/**
 * Every rule a comment or test cites (`reference §x.y`, `seed 000 §n`, `seed 004 §n`) has its
 * section in `docs/spec/` (issue 19 point 6). A citation that names no heading there points to a
 * document the repository does not have, so the rule must be written down before it is cited.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..', '..');

/** The document a citation names, keyed as the spec file that restates it. */
const SPEC_FILES: Record<string, string> = {
  reference: 'docs/spec/reference.md',
  'seed 000': 'docs/spec/seed-000.md',
  'seed 004': 'docs/spec/seed-004.md',
};

/** Section numbers of a spec file: every heading that starts with `N.` or `N.M`. */
export function headingNumbers(markdown: string): Set<string> {
  const numbers = new Set<string>();
  for (const match of markdown.matchAll(/^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s/gm)) numbers.add(match[1]!);
  return numbers;
}

export interface Citation {
  readonly document: string;
  readonly section: string;
  readonly where: string;
}

/*
 * A citation is a document keyword followed by one or more section marks: `reference §3.5`,
 * `reference §7.2, §7.5`, `seed 000 §7-§8`, `(seed 000 §2, StartTurn)`. A section mark belongs to
 * the nearest keyword before it when nothing but a short stretch of the same sentence lies between
 * them; a mark after another document's name (`DECISIONS §5`, `compaction.md §1.1`) is not ours to
 * check, and a bare mark with no keyword before it is left alone too, because it may belong to a
 * keyword in a previous line that a reader still sees but this scan cannot attribute safely.
 */
const TOKEN = /\b(reference|seed\s*(\d{3})|DECISIONS|[\w-]+\.md)\b|§\s*(\d+(?:\.\d+)*)/gi;
const MAX_GAP = 120;

export function citationsIn(text: string, where: string): Citation[] {
  const found: Citation[] = [];
  let keyword: { document: string | null; end: number } | null = null;
  for (const match of text.matchAll(TOKEN)) {
    const index = match.index ?? 0;
    if (match[3] === undefined) {
      const word = match[1]!.toLowerCase();
      const document = word === 'reference' ? 'reference' : match[2] !== undefined ? `seed ${match[2]}` : null;
      keyword = { document, end: index + match[0].length };
      continue;
    }
    if (keyword === null || keyword.document === null) continue;
    const gap = text.slice(keyword.end, index);
    // A sentence end or a blank line between the keyword and the mark ends the citation.
    if (gap.length > MAX_GAP || /[.;]\s|\n\s*\n|\*\//.test(gap)) {
      keyword = null;
      continue;
    }
    const line = text.slice(0, index).split('\n').length;
    found.push({ document: keyword.document, section: match[3].replace(/\.$/, ''), where: `${where}:${line}` });
    keyword = { document: keyword.document, end: index + match[0].length };
  }
  return found;
}

function sourceFiles(dir: string, out: string[] = []): string[] {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== 'node_modules') sourceFiles(path, out);
    } else if (/\.(ts|mts|js|mjs|sql)$/.test(entry.name)) {
      out.push(path);
    }
  }
  return out;
}

describe('spec citations resolve inside the repository', () => {
  const sections = new Map(
    Object.entries(SPEC_FILES).map(([document, file]) => [document, headingNumbers(readFileSync(join(ROOT, file), 'utf8'))]),
  );
  const citations = ['src', 'test'].flatMap((dir) =>
    sourceFiles(join(ROOT, dir)).flatMap((file) => citationsIn(readFileSync(file, 'utf8'), relative(ROOT, file))),
  );

  it('finds the citations in src/ and test/ (the scan itself works)', () => {
    // Today's code cites about 80 distinct sections; a scan that finds almost none is broken.
    expect(new Set(citations.map((c) => `${c.document} ${c.section}`)).size).toBeGreaterThan(60);
    expect(citations.some((c) => c.document === 'seed 000')).toBe(true);
    expect(citations.some((c) => c.document === 'seed 004')).toBe(true);
  });

  it('every cited section has a heading with its number in docs/spec/', () => {
    const missing = citations
      .filter((c) => !sections.get(c.document)!.has(c.section))
      .map((c) => `${c.where}: ${c.document} §${c.section} has no heading in ${SPEC_FILES[c.document]}`);
    expect(missing).toEqual([]);
  });

  it('reads lists, ranges and sentence ends the way a reader does', () => {
    const text = [
      '// reference §7.2, §7.5 and §7.9 acc 32.',
      '// Seed 000 §7-§8 and seed 004: the envelope.',
      '// DECISIONS §5; compaction.md §1.1 is not ours.',
      '// reference §4.6. Later §9.9 stands alone.',
    ].join('\n');
    expect(citationsIn(text, 'x').map((c) => `${c.document} §${c.section}`)).toEqual([
      'reference §7.2',
      'reference §7.5',
      'reference §7.9',
      'seed 000 §7',
      'seed 000 §8',
      'reference §4.6',
    ]);
  });

  it('a heading is recognised by its number, with or without a trailing dot', () => {
    expect([...headingNumbers('## 4. Permissions\n### 4.6 Self-check\ntext 4.7\n')]).toEqual(['4', '4.6']);
  });
});
