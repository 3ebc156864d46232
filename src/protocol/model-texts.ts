/**
 * @module protocol/model-texts
 * Every fixed text the model sees, in one place: the permission system's refusals and rules
 * (reference §4.6, §4.11, §4.13) and the results the runtime writes for a call it stopped, refused
 * or could not run. They are format constants: tests compare them byte for byte. They say only what the current mode offers:
 * with the sandbox off there is no `sandboxPermissions` to retry with, and no text names it. bash
 * has no network unless a call is granted it (issue 12.3), and the texts say exactly that.
 */
import type { PermissionMode } from './input.js';

/** A file access a text names (`Access` of services/permissions/policy, spelled out to stay below it). */
type Access = 'read' | 'write';
/** The platform a sandbox text names (`SandboxPlatform` of services/permissions/environment). */
type SandboxPlatform = 'linux' | 'darwin' | 'unsupported';

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

/** Appended to a bash result that failed for want of the network (no network grant on the call). */
export function networkDenialText(): string {
  return [
    '[sandbox: bash has no network access (only a private loopback; the host\'s 127.0.0.1 services are not reachable either)]',
    '[sandbox: if the command needs the network, retry this exact command once with sandboxPermissions {"network": true} and a one-sentence justification; the user will be asked]',
  ].join('\n');
}

/**
 * A file tool refused by the current mode: sensitive, credential or outside the workspace. With
 * the sandbox off (`escalation` false) there is no escalation to offer, so the text says so.
 */
export function fileDenialText(access: Access, path: string, mode: PermissionMode, escalation = true): string {
  return [
    `[sandbox: ${access} access to ${path} denied under ${modeLabel(mode)} mode]`,
    escalation
      ? `[sandbox: to proceed, retry this call once with sandboxPermissions listing ${path} (${access}, exact), and a one-sentence justification; the user will be asked]`
      : '[sandbox: this session cannot grant extra paths (the sandbox is off); do not retry. Continue with what the mode allows, or ask the user to do this step]',
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

/** A file tool reaching `/proc`, `/sys` or `/dev`: a rule denial, no card. */
export function kernelPathText(path: string): string {
  return `[sandbox: ${path} is a kernel interface (process state, devices or kernel settings), not a workspace file; the file tools cannot read or write /proc, /sys or /dev in any mode. Use bash, whose sandbox has its own /proc and /dev; do not retry]`;
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

/** Text every sandboxed tool description carries while the sandbox works (reference §4.11, last bullet). */
export const DENIAL_IS_POLICY_TEXT =
  'A "[sandbox: ...]" denial is the permission policy, not a defect of your command: do not rephrase the call to get around it. ' +
  'The only accepted way forward is to retry once with sandboxPermissions (absolute paths, read or write, exact or subtree) and a one-sentence justification, which asks the user.';

/** The same rule when the sandbox is off: there is no escalation parameter, so none is named. */
export const DENIAL_IS_FINAL_TEXT =
  'A "[sandbox: ...]" denial is the permission policy, not a defect of your call: do not rephrase the call to get around it. ' +
  'This session cannot grant extra paths; continue with what the mode allows, or ask the user to do the step.';

/** The denial rule a tool description carries: with the escalation route only while the sandbox works. */
export function denialRuleText(escalation: boolean): string {
  return escalation ? DENIAL_IS_POLICY_TEXT : DENIAL_IS_FINAL_TEXT;
}

export interface SandboxPolicySectionInput {
  mode: PermissionMode;
  workspace: string;
  bashAvailable: boolean;
  bashWritesWorkspace: boolean;
  platform: SandboxPlatform;
}

/**
 * The body of the `runtime/sandbox-policy` World State section: four fact lines, never
 * "read-only". `sandboxPermissions` is named only while the sandbox works (bash available):
 * without it the parameter is not in any schema.
 */
export function renderSandboxPolicySection(input: SandboxPolicySectionInput): string {
  const bash = !input.bashAvailable
    ? bashUnavailablePolicyLine(input.platform)
    : input.bashWritesWorkspace
      ? 'bash: runs in the sandbox; it can write the workspace and the temp directories; no network unless a call is granted it with sandboxPermissions.'
      : 'bash: runs in the sandbox; it can write the temp directories only — workspace writes and the network need sandboxPermissions.';
  const files = input.bashAvailable
    ? 'write / edit: may write the workspace and the temp directories; protected, sensitive and credential paths and paths outside the workspace need sandboxPermissions.'
    : 'write / edit: may write the workspace and the temp directories; protected, sensitive and credential paths and paths outside the workspace cannot be written in this session.';
  return ['<sandbox_policy>', `mode: ${modeLabel(input.mode)}`, `workspace: ${input.workspace}`, files, bash, '</sandbox_policy>'].join('\n');
}

/*
 * The results the runtime writes itself for a call it refused, stopped or could not run (seed 000
 * §5, §10). The model reads them as the call's answer, so each says what happened and nothing
 * the model could take for the tool's own output.
 */

/** The user answered a permission card with "deny". */
export const USER_DENIED_TEXT = 'The user denied this tool call.';

/** A request_user_input question the turn's cancel left unanswered. */
export const UNANSWERED_TEXT = 'the turn was cancelled before the user answered';

/** A call cancelled while it was validated, authorised or waiting for its card. */
export const CANCELLED_BEFORE_RUN_TEXT = 'tool call was cancelled before it ran';

/** A call pending when the runtime stopped: it may or may not have had its effect. */
export const ACTOR_STOPPED_TEXT = 'the runtime stopped while this tool call was pending; its outcome is unknown';

/** A call of the same batch after the one that ended the turn. */
export const REMAINING_CALL_TEXT = 'tool was not executed because the turn already terminated';

/** The constant text of a synthesized result (seed 000 §10); identical bytes every time. */
export const INTERRUPTED_RESULT_TEXT = 'Tool result unavailable: the previous turn ended before a durable result was recorded.';

/** A tool that did not confirm its stop within the cancel grace. */
export const UNCONFIRMED_STOP_TEXT = 'the tool did not confirm that it stopped after cancellation; its outcome is unknown';

/** update_plan's answer once the plan is stored. */
export const PLAN_UPDATED_TEXT = 'Plan updated';

/** A plan whose commit the database refused. */
export const PLAN_NOT_SAVED_TEXT = 'the plan could not be saved';

/** A tool-call machine that ended without deciding a result (never expected; the result says so). */
export const NO_RESULT_TEXT = 'the tool call ended without a result';

/** A call of a tool the session does not have. */
export function toolNotFoundText(name: string): string {
  return `tool '${name}' not found`;
}

/** The same call repeated until the doom-loop threshold (seed 000 §4). */
export function doomLoopText(name: string): string {
  return `doom loop detected for tool '${name}'`;
}

/** Arguments that are not JSON or do not fit the tool's schema; `problem` says where. */
export function invalidInputText(problem: string): string {
  return `invalid tool input: ${problem}`;
}

/** A tool that threw after its abort: the cancel ended it. */
export function cancelledAfterText(ms: number): string {
  return `tool call cancelled after ${ms} ms`;
}

/** The validation actor itself failed (not the arguments). */
export function validationFailedText(reason: string): string {
  return `tool call validation failed: ${reason}`;
}

/** The authorisation actor itself failed (not a refusal). */
export function authorizationFailedText(reason: string): string {
  return `authorization failed: ${reason}`;
}
