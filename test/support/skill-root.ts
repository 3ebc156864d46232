/**
 * A directory of skills for a test: each entry a folder with its SKILL.md text.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A new temporary skills root holding `skills` (folder name → SKILL.md text). */
export function skillRoot(skills: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), 'openwork-skills-'));
  for (const [dir, text] of Object.entries(skills)) {
    mkdirSync(join(root, dir), { recursive: true });
    writeFileSync(join(root, dir, 'SKILL.md'), text);
  }
  return root;
}
