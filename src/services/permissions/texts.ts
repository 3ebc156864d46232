/**
 * @module services/permissions/texts
 * The model-visible texts of the permission system (reference §4.6, §4.11, §4.13). They are
 * format constants: tests compare them byte for byte. None of them claims network isolation.
 */
import type { PermissionMode } from '../../protocol/input.js';
import type { Access } from './policy.js';
import type { SandboxPlatform } from './environment.js';

/** The wire spelling of a mode is `accept_edits`; people (and the model) read `accept-edits`. */
export function modeLabel(mode: PermissionMode): string {
  return mode === 'accept_edits' ? 'accept-edits' : 'auto';
}

/** Appended to a bash result when the kernel refused a file access (reference §4.11). */
export function bashDenialText(mode: PermissionMode): string {
  return [
    `[sandbox: file access denied under ${modeLabel(mode)} mode]`,
    '[sandbox: to proceed, retry this exact command once with sandboxPermissions listing only the paths it needs, and a one-sentence justification; the user will be asked. If the paths cannot be listed, ask the user to run the command instead]',
  ].join('\n');
}

/** A file tool refused by the current mode: sensitive, credential or outside the workspace. */
export function fileDenialText(access: Access, path: string, mode: PermissionMode): string {
  return [
    `[sandbox: ${access} access to ${path} denied under ${modeLabel(mode)} mode]`,
    `[sandbox: to proceed, retry this call once with sandboxPermissions listing ${path} (${access}, exact), and a one-sentence justification; the user will be asked]`,
  ].join('\n');
}

/** A file tool writing a hard-protected path: a rule denial, no card. */
export function protectedPathText(path: string): string {
  return `[sandbox: ${path} is protected and cannot be written in any mode; do not retry]`;
}

/** Any tool reaching the runtime's own store or configuration: a rule denial, no card. */
export function runtimePathText(path: string): string {
  return `[sandbox: ${path} belongs to the runtime (its session store or configuration) and cannot be read or written by any tool in any mode; do not retry]`;
}

/**
 * Added to an escalation card's summary when a write grant covers a `.git` directory: what the
 * grant does not open, so the user knows that approving it does not let the agent run code.
 */
export const GIT_GRANT_NOTE = '.git/config and every hooks directory under .git stay protected (they would run code on the next git command)';

/** bash when the sandbox cannot work (reference §4.6). */
export function sandboxUnavailableText(reason: string): string {
  return `[sandbox: unavailable, so bash cannot run commands in this session (${reason}). File tools still work; ask the user to run the command in their own terminal if it is needed.]`;
}

function platformWord(platform: SandboxPlatform): string {
  return platform === 'darwin' ? 'macOS' : platform === 'linux' ? 'Linux' : 'platform';
}

/** The `bash` line of the sandbox-policy section when bash is unavailable. */
export function bashUnavailablePolicyLine(platform: SandboxPlatform): string {
  return `bash: unavailable, because the ${platformWord(platform)} sandbox failed its self-check. Use read / grep / glob / edit for file work, and tell the user which command you need them to run.`;
}

/**
 * A sub-agent cannot ask the user (reference §4.13): the refusal says what it can still do and
 * that it may report the limitation to its parent.
 */
export const NON_INTERACTIVE_REFUSAL_TEXT =
  '[sandbox: this call needs the user\'s approval, but a sub-agent cannot ask for authorization, so it was refused and did not run. ' +
  'Continue with what the current mode allows without sandboxPermissions (reading files, writing where the mode permits, commands that do not delete files), ' +
  'or report to the parent agent which command or paths you need.]';

/** Text every sandboxed tool description carries (reference §4.11, last bullet). */
export const DENIAL_IS_POLICY_TEXT =
  'A "[sandbox: ...]" denial is the permission policy, not a defect of your command: do not rephrase the call to get around it. ' +
  'The only accepted way forward is to retry once with sandboxPermissions (absolute paths, read or write, exact or subtree) and a one-sentence justification, which asks the user.';

export interface SandboxPolicySectionInput {
  mode: PermissionMode;
  workspace: string;
  bashAvailable: boolean;
  bashWritesWorkspace: boolean;
  platform: SandboxPlatform;
}

/**
 * The body of the `runtime/sandbox-policy` World State section: four fact lines, never a claim
 * about the network and never "read-only".
 */
export function renderSandboxPolicySection(input: SandboxPolicySectionInput): string {
  const bash = !input.bashAvailable
    ? bashUnavailablePolicyLine(input.platform)
    : input.bashWritesWorkspace
      ? 'bash: runs in the sandbox; it can write the workspace and the temp directories.'
      : 'bash: runs in the sandbox; it can write the temp directories only — workspace writes need sandboxPermissions.';
  return [
    '<sandbox_policy>',
    `mode: ${modeLabel(input.mode)}`,
    `workspace: ${input.workspace}`,
    'write / edit: may write the workspace and the temp directories; protected, sensitive and credential paths and paths outside the workspace need sandboxPermissions.',
    bash,
    '</sandbox_policy>',
  ].join('\n');
}
