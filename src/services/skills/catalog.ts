/**
 * @module services/skills/catalog
 * The `skills/catalog` World State body (reference §7.3) and explicit selection (§7.4): the selected
 * skills' bodies become `skill_instruction` messages written before the user's text.
 */
import { realpath } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { InputError } from '../../errors.js';
import type { NewMessage } from '../../protocol/content.js';
import { estimateTokens } from '../context/estimate.js';
import { escapeFraming } from '../context/framing.js';
import { discoverSkills, isValidSkillName, type SkillDetail, type SkillWarning } from './discovery.js';

export const CATALOG_MAX_CHARS = 8_000;
export const SKILL_BODY_MAX_TOKENS = 8_000;

const INTRO = 'A skill is an instruction sheet stored in a SKILL.md file. These are all the skills available in this session:';
const GUIDANCE = [
  'When a task matches a description, read the whole SKILL.md at that path with the read tool before acting; do not guess from the description.',
  "Relative paths in a SKILL.md resolve against its own directory; run a skill's existing scripts instead of rewriting them.",
  'Read the instruction file you chose in full, and do not read references unrelated to the task.',
];

/** The catalog body, or null when no skill is enabled (the section is then absent). */
export function renderCatalog(skills: readonly SkillDetail[]): { body: string | null; warnings: SkillWarning[] } {
  const enabled = skills.filter((s) => !s.disabled);
  if (enabled.length === 0) return { body: null, warnings: [] };
  const lines = enabled.map((s) => `- ${s.name}: ${escapeFraming(s.description.replace(/[\r\n]+/g, ' '))} (file: ${s.path})`);
  const warnings: SkillWarning[] = [];
  const render = (items: string[]) => ['<available_skills>', INTRO, '', ...items, '', ...GUIDANCE, '</available_skills>'].join('\n');
  let kept = [...lines];
  while (kept.length > 0 && render(kept).length > CATALOG_MAX_CHARS) {
    kept.pop();
    const skill = enabled[kept.length]!;
    warnings.unshift({ path: skill.path, reason: `the skill catalog is over ${CATALOG_MAX_CHARS} characters; this skill was left out of it` });
  }
  return { body: kept.length > 0 ? render(kept) : null, warnings };
}

/**
 * The `skill_instruction` message's text (reference §7.4). The name is a valid skill name and the
 * path a canonical path under the root; the body's framing tags are escaped (attack round 7), so a
 * skill cannot end its `<skill>` message and go on as another runtime section.
 */
export function skillInstructionText(skill: Pick<SkillDetail, 'name' | 'path' | 'body'>): string {
  return `<skill>\n<name>${skill.name}</name>\n<path>${skill.path}</path>\n${escapeFraming(skill.body)}\n</skill>`;
}

/**
 * Resolves explicit selections against a fresh scan: the path must canonicalise to exactly
 * `<root>/<valid name>/SKILL.md` of a currently enabled skill of that name. Any failure is
 * `skill_unavailable`; a body of 8,000 estimated tokens or more is `configuration_invalid`.
 */
export async function resolveSelectedSkills(
  root: string | null,
  inputs: ReadonlyArray<{ name: string; path: string }>,
  disabled: ReadonlySet<string>,
  newId: () => string,
): Promise<NewMessage[]> {
  const unavailable = (name: string) => new InputError('skill_unavailable', `Selected skill is unavailable: ${name}`, { details: { name } });
  if (!root) throw unavailable(inputs[0]?.name ?? '');
  const scan = await discoverSkills(root, disabled);
  let canonicalRoot: string;
  try {
    canonicalRoot = await realpath(root);
  } catch {
    throw unavailable(inputs[0]?.name ?? '');
  }
  const seen = new Set<string>();
  const messages: NewMessage[] = [];
  for (const input of inputs) {
    let canonical: string;
    try {
      canonical = await realpath(input.path);
    } catch {
      throw unavailable(input.name);
    }
    const dir = dirname(canonical);
    if (basename(canonical) !== 'SKILL.md' || dirname(dir) !== canonicalRoot || !isValidSkillName(basename(dir)) || canonical !== join(canonicalRoot, basename(dir), 'SKILL.md')) {
      throw unavailable(input.name);
    }
    const skill = scan.skills.find((s) => s.path === canonical && s.name === input.name && !s.disabled);
    if (!skill) throw unavailable(input.name);
    if (seen.has(canonical)) continue;
    seen.add(canonical);
    const text = skillInstructionText(skill);
    const message: NewMessage = { id: newId(), role: 'user', kind: 'skill_instruction', content: [{ type: 'text', text }] };
    const tokens = estimateTokens(message.content);
    if (tokens >= SKILL_BODY_MAX_TOKENS) {
      throw new InputError(
        'configuration_invalid',
        `The skill ${skill.name} is about ${tokens} tokens; a selected skill must stay under ${SKILL_BODY_MAX_TOKENS}. Split it into smaller skills or move detail into references/.`,
        { details: { name: skill.name, tokens } },
      );
    }
    messages.push(message);
  }
  return messages;
}
