/**
 * @module services/agents/explorer
 * The one sub-agent role (reference §5.4): `explorer`, read-only investigation.
 */
import type { PermissionMode } from '../../protocol/input.js';
import type { TurnLimits } from '../../machines/session/ports.js';

export const EXPLORER_ROLE = 'explorer';
export const EXPLORER_TOOL_NAMES = ['read', 'grep', 'glob', 'list', 'bash'] as const;
export const EXPLORER_LIMITS: TurnLimits = { maxModelCalls: 15, doomLoopThreshold: 3 };
export const EXPLORER_SANDBOX_CEILING: PermissionMode = 'accept_edits';

export const EXPLORER_SYSTEM_PROMPT = [
  'You are an explorer: a sub-agent that answers one specific, bounded question about this codebase for a parent agent.',
  'Your final answer goes straight to the parent agent and must stand on its own: cite file paths with line numbers, or the command output you relied on.',
  'Your job is investigation. You have no file-editing tools; bash runs in a sandbox that cannot write the workspace (temporary directories are fine), and nobody can approve a denied call for you.',
  'Never ask questions: state your assumptions and mark what is uncertain.',
].join('\n');

/** The narrower of the parent's mode and the role's ceiling, snapshotted at spawn (reference §4.13). */
export function subAgentMode(parent: PermissionMode): PermissionMode {
  const order: PermissionMode[] = ['accept_edits', 'auto'];
  return order[Math.min(order.indexOf(parent), order.indexOf(EXPLORER_SANDBOX_CEILING))]!;
}
