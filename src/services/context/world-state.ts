/**
 * @module services/context/world-state
 * World State (reference §2.3): what varies with the workspace enters the Conversation as user-role
 * `world_state` messages, one per section, appended before a model call only when the section's
 * rendering changed. Sections, in fixed order: project layout, AGENTS.md, the skill catalog, the
 * sandbox policy. The baseline is memory-only, so after a restart retained sections are re-sent once
 * with a replacement notice.
 */
import { readdir, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { OpenworkError } from '../../errors.js';
import type { NewMessage } from '../../protocol/content.js';
import type { PermissionMode } from '../../protocol/input.js';
import { modeLabel } from '../../protocol/model-texts.js';
import type { SandboxStatus } from '../../protocol/snapshot.js';
import { storableText } from '../../protocol/storable-text.js';
import type { ConversationItem } from './chat-state.js';
import { escapeFraming } from './framing.js';
import { readSmallFile } from '../tools/small-file.js';

export const WORLD_STATE_SECTIONS = ['runtime/user-project-context', 'project/AGENTS.md', 'skills/catalog', 'runtime/sandbox-policy'] as const;
export type WorldStateSectionId = (typeof WORLD_STATE_SECTIONS)[number];

export const PROJECT_CONTEXT_MAX_ENTRIES = 64;
export const PROJECT_CONTEXT_MAX_CHARS = 16_384;
export const AGENTS_MD_MAX_BYTES = 64 * 1024;

interface SectionSpec {
  /** The opening tag that identifies the section's body in a retained message. */
  marker: string;
  replacement: string;
  invalidation: string;
  errorCode: 'user_project_context_error' | 'project_instruction_error' | 'skill_catalog_task_error' | 'user_project_context_error';
}

export const SECTION_SPECS: Record<WorldStateSectionId, SectionSpec> = {
  'runtime/user-project-context': {
    marker: '<user_project_context',
    replacement: 'The following project context replaces all previously supplied project context.',
    invalidation: 'Previously supplied project context no longer applies.',
    errorCode: 'user_project_context_error',
  },
  'project/AGENTS.md': {
    marker: '<project_instructions>',
    replacement: 'The following AGENTS.md instructions replace all previously supplied AGENTS.md instructions.',
    invalidation: 'Previously supplied AGENTS.md instructions no longer apply.',
    errorCode: 'project_instruction_error',
  },
  'skills/catalog': {
    marker: '<available_skills>',
    replacement: 'The following skill catalog replaces all previously supplied skill catalogs.',
    invalidation: 'Previously supplied skill catalogs no longer apply.',
    errorCode: 'skill_catalog_task_error',
  },
  'runtime/sandbox-policy': {
    marker: '<sandbox_policy>',
    replacement: 'The following sandbox policy replaces all previously supplied sandbox policies.',
    invalidation: 'Previously supplied sandbox policies no longer apply.',
    errorCode: 'user_project_context_error',
  },
};

/** Sampling a World State source failed: the turn fails with this code and the model is not called. */
export class WorldStateError extends OpenworkError {
  constructor(code: 'user_project_context_error' | 'project_instruction_error' | 'skill_catalog_task_error', message: string) {
    super(code, message);
  }
}

export type WorldStateCapture = Record<WorldStateSectionId, string | null>;

export interface WorldStateSources {
  workingDirectory: string;
  permissionMode: PermissionMode;
  sandbox: SandboxStatus;
  /** The `<available_skills>` body, or null when there is no catalog (skills are optional). */
  skillsCatalog?: () => Promise<string | null>;
  /** Renders the `<sandbox_policy>` body; the default describes the two modes and bash availability. */
  renderSandboxPolicy?: (input: { mode: PermissionMode; workspace: string; sandbox: SandboxStatus }) => string;
}

function escapeText(value: string): string {
  return value.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

async function findRepoRoot(start: string): Promise<string | null> {
  let dir = start;
  for (;;) {
    try {
      await stat(join(dir, '.git'));
      return dir;
    } catch {
      const parent = dirname(dir);
      if (parent === dir) return null;
      dir = parent;
    }
  }
}

/** `<user_project_context>`: working directory, repository root, top-level layout (sorted, at most 64). */
export async function renderProjectContext(workingDirectory: string): Promise<string> {
  let root: string;
  let repoRoot: string | null;
  let entries: Array<{ name: string; dir: boolean }>;
  try {
    repoRoot = await findRepoRoot(workingDirectory);
    root = repoRoot ?? workingDirectory;
    entries = (await readdir(root, { withFileTypes: true }))
      .map((e) => ({ name: e.name, dir: e.isDirectory() }))
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  } catch (error) {
    throw new WorldStateError('user_project_context_error', `cannot read the project layout: ${(error as Error).message}`);
  }
  const shown = entries.slice(0, PROJECT_CONTEXT_MAX_ENTRIES).map((e) => `- ${escapeText(e.name)}${e.dir ? '/' : ''}`);
  if (entries.length > PROJECT_CONTEXT_MAX_ENTRIES) shown.push(`- … ${entries.length - PROJECT_CONTEXT_MAX_ENTRIES} more entries omitted`);
  const body = [
    '<user_project_context format_version="1">',
    `working_directory: ${escapeText(workingDirectory)}`,
    `repository_root: ${repoRoot ? escapeText(repoRoot) : 'none (not a git repository)'}`,
    `top_level_entries of ${escapeText(root)}:`,
    ...shown,
    '</user_project_context>',
  ].join('\n');
  if (body.length > PROJECT_CONTEXT_MAX_CHARS) {
    throw new WorldStateError('user_project_context_error', `the project context is ${body.length} characters; the limit is ${PROJECT_CONTEXT_MAX_CHARS}`);
  }
  return body;
}

/**
 * `<project_instructions>` from `<working dir>/AGENTS.md`; null when missing or blank. The file is
 * judged by the descriptor it is read through (`readSmallFile`), not by a look-up before it: a
 * process in the workspace (the parent's bash while an explorer starts its model call) could swap a
 * FIFO in between, and the read then waited for a writer forever in a thread of the host's I/O
 * pool (four such, and every file operation of the host waited).
 */
export async function renderAgentsMd(workingDirectory: string): Promise<string | null> {
  const file = await readSmallFile(join(workingDirectory, 'AGENTS.md'), AGENTS_MD_MAX_BYTES);
  if (!file.ok) {
    switch (file.problem) {
      case 'missing':
        return null;
      case 'symlink':
        throw new WorldStateError('project_instruction_error', 'AGENTS.md is a symbolic link; it is not loaded');
      case 'not_regular':
        throw new WorldStateError('project_instruction_error', 'AGENTS.md is not a regular file');
      case 'too_large':
        throw new WorldStateError('project_instruction_error', `AGENTS.md is ${file.size} bytes; the limit is ${AGENTS_MD_MAX_BYTES}`);
      case 'unreadable':
        throw new WorldStateError('project_instruction_error', `cannot read AGENTS.md: ${file.message}`);
      default: {
        const never: never = file.problem;
        throw new Error(`unknown problem ${String(never)}`);
      }
    }
  }
  const bytes = file.bytes;
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new WorldStateError('project_instruction_error', 'AGENTS.md is not valid UTF-8');
  }
  if (text.trim() === '') return null;
  // U+0000 is valid UTF-8 but not storable: the section is stored before every model call, so a NUL
  // (which the model can write) failed every turn with persistence_error. It shows as U+FFFD.
  // The file is the model's to write (bash in `auto`), so it may not close the section or open
  // another runtime section in this message (attack round 7): its framing tags are escaped.
  return `<project_instructions>\n${escapeFraming(storableText(text))}\n</project_instructions>`;
}

export const BASH_UNAVAILABLE_LINE = 'bash: unavailable — the sandbox could not start, so shell commands are not run';

/**
 * The four facts of the sandbox policy section. `sandboxPermissions` is named only while the
 * sandbox works: without it no tool schema carries the parameter.
 */
export function defaultSandboxPolicy({ mode, workspace, sandbox }: { mode: PermissionMode; workspace: string; sandbox: SandboxStatus }): string {
  const bash = !sandbox.available
    ? BASH_UNAVAILABLE_LINE
    : mode === 'auto'
      ? 'bash: can write the workspace and temp directories; no network unless a call is granted it with sandboxPermissions'
      : 'bash: can write temp directories only — workspace writes and the network need sandboxPermissions';
  const files = sandbox.available ? 'write / edit: the workspace and temp directories; other paths need sandboxPermissions' : 'write / edit: the workspace and temp directories; other paths cannot be written in this session';
  // The mode word is the one every denial text uses (`accept-edits`, reference §4.11).
  return ['<sandbox_policy>', `mode: ${modeLabel(mode)}`, `workspace: ${escapeText(workspace)}`, files, bash, '</sandbox_policy>'].join('\n');
}

/** Reads the four sources (reference §2.3 `capture`). */
export async function captureWorldState(sources: WorldStateSources): Promise<WorldStateCapture> {
  const [project, agents, skills] = await Promise.all([
    renderProjectContext(sources.workingDirectory),
    renderAgentsMd(sources.workingDirectory),
    sources.skillsCatalog
      ? sources.skillsCatalog().catch((error: unknown) => {
          throw new WorldStateError('skill_catalog_task_error', `cannot build the skill catalog: ${(error as Error).message}`);
        })
      : Promise.resolve(null),
  ]);
  const render = sources.renderSandboxPolicy ?? defaultSandboxPolicy;
  return {
    'runtime/user-project-context': project,
    'project/AGENTS.md': agents,
    'skills/catalog': skills,
    'runtime/sandbox-policy': render({ mode: sources.permissionMode, workspace: sources.workingDirectory, sandbox: sources.sandbox }),
  };
}

/**
 * Whether a section's earlier message is still in the Conversation (`RetainedSections::scan`):
 * only `world_state` messages count, identified by the opening marker or the fixed notice text.
 */
export function retainedSections(conversation: readonly ConversationItem[]): Set<WorldStateSectionId> {
  const present = new Set<WorldStateSectionId>();
  for (const item of conversation) {
    if (item.synthetic || item.message.kind !== 'world_state') continue;
    const text = item.message.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
    for (const id of WORLD_STATE_SECTIONS) {
      const spec = SECTION_SPECS[id];
      if (text.startsWith(spec.marker) || text.startsWith(spec.replacement) || text.startsWith(spec.invalidation)) present.add(id);
    }
  }
  return present;
}

export type WorldStateBaseline = Map<WorldStateSectionId, string | null>;

export interface WorldStateMessage {
  section: WorldStateSectionId;
  text: string;
  body: string | null;
}

/** The render/diff step (read-only): which sections to send and with which notice. */
export function diffWorldState(capture: WorldStateCapture, baseline: WorldStateBaseline, retained: Set<WorldStateSectionId>): WorldStateMessage[] {
  const out: WorldStateMessage[] = [];
  for (const id of WORLD_STATE_SECTIONS) {
    const spec = SECTION_SPECS[id];
    const body = capture[id];
    const known = baseline.has(id);
    const previous = baseline.get(id) ?? null;
    const present = retained.has(id);
    if (known && present && previous === body) continue;
    if (present) {
      // Restarted (no baseline) or changed: replace what the model saw, or withdraw it.
      if (known && previous === null && body === null) continue;
      out.push(body !== null ? { section: id, body, text: `${spec.replacement}\n\n${body}` } : { section: id, body, text: spec.invalidation });
    } else if (body !== null) {
      out.push({ section: id, body, text: body });
    }
  }
  return out;
}

export function worldStateMessageId(turnId: string, modelCallIndex: number, samplingSequence: number, section: WorldStateSectionId): string {
  return `world-state:${turnId}:${modelCallIndex}:${samplingSequence}:${section}`;
}

export function worldStateNewMessage(turnId: string, modelCallIndex: number, samplingSequence: number, m: WorldStateMessage): NewMessage {
  return {
    id: worldStateMessageId(turnId, modelCallIndex, samplingSequence, m.section),
    role: 'user',
    kind: 'world_state',
    content: [{ type: 'text', text: m.text }],
  };
}
