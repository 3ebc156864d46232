/**
 * @module services/skills/discovery
 * Skill discovery (reference §7.1-§7.2): one configured root, one level deep, `<root>/<name>/SKILL.md`
 * with YAML frontmatter. A failing skill is skipped with a warning and never hides its siblings;
 * at most 100 load. Output is sorted and byte-identical for identical input.
 */
import { lstat, readdir, readFile, realpath } from 'node:fs/promises';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';

export const MAX_SKILLS = 100;
export const MAX_SKILL_FILE_BYTES = 64 * 1024;
export const MAX_DESCRIPTION_CHARS = 1_024;
/**
 * The longest frontmatter parsed (attack round 7). The YAML parser spends tens of microseconds on
 * each node, more with many keys: 64 KiB of frontmatter held the host's event loop for 0.5-2.7 s,
 * at every World State sampling (before every model call). Only a name and a description of at most
 * 1,024 characters are read from it.
 */
export const MAX_FRONTMATTER_CHARS = 4 * 1_024;
/** The deepest nesting of flow brackets (`[`, `{`) in a frontmatter; the parser recurses on each. */
export const MAX_FRONTMATTER_NESTING = 32;

function bracketDepth(text: string): number {
  let depth = 0;
  let deepest = 0;
  for (let i = 0; i < text.length; i += 1) {
    const code = text.charCodeAt(i);
    if (code === 0x5b || code === 0x7b) deepest = Math.max(deepest, (depth += 1));
    else if ((code === 0x5d || code === 0x7d) && depth > 0) depth -= 1;
  }
  return deepest;
}
const NAME_RE = /^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$/;

export interface SkillSummary {
  source: 'agents';
  name: string;
  description: string;
  /** Canonical absolute path of SKILL.md, printed verbatim to the model. */
  path: string;
  disabled: boolean;
}

export interface SkillDetail extends SkillSummary {
  body: string;
}

export interface SkillWarning {
  path: string;
  reason: string;
}

export interface SkillScan {
  skills: SkillDetail[];
  warnings: SkillWarning[];
}

function normalizeWhitespace(value: string): string {
  return value.split(/\s+/).filter(Boolean).join(' ');
}

export function isValidSkillName(name: string): boolean {
  return Buffer.byteLength(name) <= 64 && NAME_RE.test(name);
}

/** Parses SKILL.md text: frontmatter between `---` lines, then the body without surrounding blank lines. */
export function parseSkillFile(text: string, dirName: string): { name: string; description: string; body: string } {
  const lines = text.split(/\r?\n/);
  if (lines[0]?.trim() !== '---') throw new Error('SKILL.md must begin with a --- line');
  const end = lines.indexOf('---', 1);
  const close = end >= 0 ? end : lines.findIndex((l, i) => i > 0 && l.trim() === '---');
  if (close < 0) throw new Error('SKILL.md frontmatter is not closed with a --- line');
  const frontmatter = lines.slice(1, close).join('\n');
  if (frontmatter.length > MAX_FRONTMATTER_CHARS) throw new Error(`SKILL.md frontmatter is ${frontmatter.length} characters; the limit is ${MAX_FRONTMATTER_CHARS}`);
  if (bracketDepth(frontmatter) > MAX_FRONTMATTER_NESTING) throw new Error(`SKILL.md frontmatter nests brackets more than ${MAX_FRONTMATTER_NESTING} levels deep`);
  let meta: unknown;
  try {
    meta = parseYaml(frontmatter, { uniqueKeys: false }) ?? {};
  } catch (error) {
    throw new Error(`SKILL.md frontmatter is not valid YAML: ${(error as Error).message}`);
  }
  if (typeof meta !== 'object' || meta === null || Array.isArray(meta)) throw new Error('SKILL.md frontmatter must be a mapping');
  const record = meta as Record<string, unknown>;
  if (record.name !== undefined && typeof record.name !== 'string') throw new Error('frontmatter name must be a string');
  if (record.description !== undefined && typeof record.description !== 'string') throw new Error('frontmatter description must be a string');
  const name = record.name === undefined ? dirName : normalizeWhitespace(record.name);
  if (!isValidSkillName(name)) throw new Error(`frontmatter name ${JSON.stringify(name)} is not a valid skill name`);
  if (name !== dirName) throw new Error(`frontmatter name ${JSON.stringify(name)} does not match the directory name ${JSON.stringify(dirName)}`);
  if (record.description === undefined || normalizeWhitespace(record.description) === '') throw new Error('frontmatter description is missing');
  const description = [...normalizeWhitespace(record.description)].slice(0, MAX_DESCRIPTION_CHARS).join('');
  // Blank lines are trimmed by index: `shift()` per line was quadratic (60,000 blank lines, 0.6 s).
  let first = close + 1;
  let last = lines.length;
  while (first < last && lines[first]!.trim() === '') first += 1;
  while (last > first && lines[last - 1]!.trim() === '') last -= 1;
  return { name, description, body: lines.slice(first, last).join('\n') };
}

/**
 * Scans the root. A missing root is empty without a warning; an unreadable one is empty with one.
 * `disabled` marks skills by name; disabled skills are still listed.
 */
export async function discoverSkills(root: string | null, disabled: ReadonlySet<string> = new Set()): Promise<SkillScan> {
  if (!root) return { skills: [], warnings: [] };
  let canonicalRoot: string;
  try {
    canonicalRoot = await realpath(root);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { skills: [], warnings: [] };
    return { skills: [], warnings: [{ path: root, reason: `the skill root cannot be read: ${(error as Error).message}` }] };
  }
  let entries;
  try {
    entries = await readdir(canonicalRoot, { withFileTypes: true });
  } catch (error) {
    return { skills: [], warnings: [{ path: canonicalRoot, reason: `the skill root cannot be read: ${(error as Error).message}` }] };
  }
  const warnings: SkillWarning[] = [];
  const skills: SkillDetail[] = [];
  const candidates = entries
    .filter((e) => e.isDirectory() && !e.name.startsWith('.'))
    .map((e) => e.name)
    .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  for (const dirName of candidates) {
    const dir = join(canonicalRoot, dirName);
    const file = join(dir, 'SKILL.md');
    // eslint-disable-next-line no-control-regex
    if (/[\u0000-\u001f\u007f]/.test(file)) {
      warnings.push({ path: file, reason: 'the skill path contains control characters' });
      continue;
    }
    if (!isValidSkillName(dirName)) {
      warnings.push({ path: dir, reason: `the directory name ${JSON.stringify(dirName)} is not a valid skill name (1-64 of a-z, 0-9, -; starting and ending with a letter or digit)` });
      continue;
    }
    if (skills.length >= MAX_SKILLS) {
      warnings.push({ path: file, reason: `more than ${MAX_SKILLS} skills: this one is not loaded` });
      continue;
    }
    try {
      const info = await lstat(file);
      if (info.isSymbolicLink()) throw new Error('SKILL.md is a symbolic link');
      if (!info.isFile()) throw new Error('SKILL.md is not a regular file');
      if (info.size > MAX_SKILL_FILE_BYTES) throw new Error(`SKILL.md is ${info.size} bytes; the limit is ${MAX_SKILL_FILE_BYTES}`);
      const bytes = await readFile(file);
      let text: string;
      try {
        text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
      } catch {
        throw new Error('SKILL.md is not valid UTF-8');
      }
      // U+0000 is valid UTF-8 but Postgres stores no NUL: the catalog World State stores before every
      // model call would fail every turn with persistence_error while the file is there.
      if (text.includes('\u0000')) throw new Error('SKILL.md contains a NUL character');
      const parsed = parseSkillFile(text, dirName);
      skills.push({ source: 'agents', name: parsed.name, description: parsed.description, path: file, disabled: disabled.has(parsed.name), body: parsed.body });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
        warnings.push({ path: file, reason: 'SKILL.md is missing' });
      } else {
        warnings.push({ path: file, reason: (error as Error).message });
      }
    }
  }
  skills.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : a.path < b.path ? -1 : 1));
  return { skills, warnings };
}
