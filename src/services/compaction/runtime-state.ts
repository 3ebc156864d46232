/**
 * @module services/compaction/runtime-state
 * The durable runtime state a checkpoint freezes (reference §3.6): edited paths re-derived from
 * every raw message's `file_change` artifacts, the current plan (§6.7), unknown extensions carried
 * forward; and its byte-stable `<system_reminder>` rendering.
 */
import { OpenworkError } from '../../errors.js';
import type { StoredMessage, ToolResultBlock } from '../../protocol/content.js';
import type { PlanStep, TurnPlanSnapshot } from '../../protocol/plan.js';
import type { CompactionRuntimeState } from '../../storage/storage.js';

export const RUNTIME_STATE_SCHEMA_VERSION = 1;
export const MAX_EDITED_PATHS = 128;
export const MAX_EDITED_PATH_CHARS = 1_024;
export const MAX_REMINDER_CHARS = 32_768;
export const EMPTY_REMINDER_BODY = 'No additional durable runtime state was recorded at compaction time.';

export class CompactionError extends OpenworkError {
  constructor(message: string, options: { cause?: unknown; details?: Record<string, unknown> } = {}) {
    super('compaction_error', message, options);
  }
}

/** `file_changes` contributor: every non-undone file_change artifact of every stored message. */
export function collectEditedPaths(messages: readonly StoredMessage[]): string[] {
  const paths = new Set<string>();
  for (const message of messages) {
    if (message.role !== 'tool') continue;
    for (const block of message.content) {
      if (block.type !== 'tool_result') continue;
      for (const artifact of (block as ToolResultBlock).artifacts ?? []) {
        if (artifact.type !== 'file_change') continue;
        if (typeof artifact.path !== 'string' || (artifact.undone !== undefined && typeof artifact.undone !== 'boolean')) {
          throw new CompactionError(`message ${message.id} has an undecodable file_change artifact`);
        }
        if (artifact.undone === true) continue;
        paths.add([...artifact.path].slice(0, MAX_EDITED_PATH_CHARS).join(''));
      }
    }
  }
  return [...paths].sort().slice(0, MAX_EDITED_PATHS);
}

/**
 * Builds the state on top of the latest checkpoint's: edited paths always re-derived, the plan
 * overwritten when `plan` is given (in-turn; an empty plan too), otherwise carried forward.
 */
export function collectRuntimeState(
  messages: readonly StoredMessage[],
  previous: CompactionRuntimeState | null,
  plan: TurnPlanSnapshot | null | undefined,
): CompactionRuntimeState {
  if (previous && previous.schemaVersion !== RUNTIME_STATE_SCHEMA_VERSION) {
    throw new CompactionError(`the previous checkpoint's runtime state has schema version ${previous.schemaVersion}`);
  }
  const extensions = { ...(previous?.extensions ?? {}) };
  if (plan !== undefined && plan !== null) {
    extensions.turn_plan = { schemaVersion: 1, value: { explanation: plan.explanation, steps: plan.steps } };
  }
  return { schemaVersion: RUNTIME_STATE_SCHEMA_VERSION, editedPaths: collectEditedPaths(messages), extensions, warnings: [] };
}

/**
 * Reference §3.6 escaping for a reminder line: `&`, `<`, `>` become entities (a path can never open
 * or close a tag), a newline becomes the two characters `\n` (one item stays one line), and every
 * other control character (C0 including tab and carriage return, DEL, C1) becomes U+FFFD.
 */
export function escapeReminderLine(value: string): string {
  return (
    value
      .replace(/&/g, '&amp;')
      .replace(/</g, '&lt;')
      .replace(/>/g, '&gt;')
      .replace(/\n/g, '\\n')
      // eslint-disable-next-line no-control-regex
      .replace(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/g, '\ufffd')
  );
}

function planSection(value: unknown): string | null {
  const plan = value as { explanation?: string | null; steps?: PlanStep[] } | undefined;
  if (!plan?.steps || plan.steps.length === 0) return null;
  const lines = ['## Current plan'];
  if (plan.explanation && plan.explanation.trim() !== '') lines.push(escapeReminderLine(plan.explanation));
  for (const step of plan.steps) lines.push(`- [${step.status}] ${escapeReminderLine(step.step)}`);
  return lines.join('\n');
}

/** The `<system_reminder>`: `## Edited paths` then `## Current plan`; known sections only. */
export function renderReminder(state: CompactionRuntimeState): string {
  const sections: string[] = [];
  if (state.editedPaths.length > 0) sections.push(['## Edited paths', ...state.editedPaths.map((p) => `- ${escapeReminderLine(p)}`)].join('\n'));
  const plan = planSection(state.extensions.turn_plan?.value);
  if (plan) sections.push(plan);
  const body = sections.length > 0 ? sections.join('\n\n') : EMPTY_REMINDER_BODY;
  const reminder = `<system_reminder format_version="1">\n${body}\n</system_reminder>`;
  if (reminder.length > MAX_REMINDER_CHARS) {
    throw new CompactionError(`the runtime reminder is ${reminder.length} characters; the limit is ${MAX_REMINDER_CHARS}`);
  }
  return reminder;
}
