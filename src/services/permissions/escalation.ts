/**
 * @module services/permissions/escalation
 * Escalation requests (reference §4.9): the `sandboxPermissions` + `justification` parameters a
 * sandboxed tool carries, and their validation. A request that fails validation is refused with an
 * explanation and no card; one that passes becomes an escalation card whose paths apply to that
 * one call only. bash may also ask for the network (`network: true`): bash runs in its own network
 * namespace, so the internet and the host's loopback services are out of reach until the user
 * grants it.
 */
import { statSync } from 'node:fs';
import { isAbsolute, resolve, sep } from 'node:path';
import { z } from 'zod';
import { expandHome, canonicalize, isAncestorOrSelf } from './paths.js';
import type { Actor, PathGrant, SandboxPolicy } from './policy.js';
import { modeLabel } from '../../protocol/model-texts.js';

/** At most this many paths per request (`MAX_GRANTS`). */
export const MAX_GRANTS = 16;

export const pathRequestSchema = z.strictObject({
  path: z.string().describe('Absolute path (canonicalised before it is judged).'),
  access: z.enum(['read', 'write']).describe('`write` implies `read`.'),
  scope: z.enum(['exact', 'subtree']).describe('`exact` = this one file or directory entry; `subtree` = the directory and everything below it.'),
});

/** Only `paths`, no other field: there is no "allow everything" value (reference §4.9). */
export const sandboxPermissionsSchema = z.strictObject({
  paths: z.array(pathRequestSchema),
});

/**
 * bash's request: the same paths, or none when it asks only for the network. `network` can only be
 * `true`: there is still no "allow everything" value, and network access is its own card.
 */
export const bashSandboxPermissionsSchema = z.strictObject({
  paths: z.array(pathRequestSchema).optional(),
  network: z
    .literal(true)
    .optional()
    .describe('Network access for this one command (the internet and the host\'s own services on 127.0.0.1 and unix sockets). Without it bash has only a private loopback.'),
});
export type SandboxPermissionsInput = { paths?: z.infer<typeof pathRequestSchema>[] | undefined; network?: true | undefined };

/**
 * The longest justification accepted, in characters (branch attack5b). It is shown on the card, and
 * making card text visible (look-alikes, invisible characters) took 2.6 s for 1,000,000 characters
 * on the main thread; one sentence for a human fits many times over. Longer is `invalid_arguments`.
 */
export const MAX_JUSTIFICATION_CHARS = 2_000;
const justificationText = () =>
  z.string().max(MAX_JUSTIFICATION_CHARS, { message: `the justification is longer than ${MAX_JUSTIFICATION_CHARS} characters; give one sentence for the user` });

const JUSTIFICATION = justificationText().optional().describe('One sentence for the user saying why the extra paths are needed; required with sandboxPermissions.');

/** The two parameters every sandboxed file tool carries while the sandbox is available. */
export const escalationParameters = {
  sandboxPermissions: sandboxPermissionsSchema
    .optional()
    .describe('Only after a "[sandbox: ...]" denial (or when you know the call needs it): the extra paths this one call needs. The user is asked; the grant lasts for this call only.'),
  justification: JUSTIFICATION,
};

/** bash's two escalation parameters: paths as for the file tools, and the network. */
export const bashEscalationParameters = {
  sandboxPermissions: bashSandboxPermissionsSchema
    .optional()
    .describe('Only after a "[sandbox: ...]" denial (or when you know the command needs it): the extra paths and/or the network this one command needs. The user is asked; the grant lasts for this call only.'),
  justification: justificationText().optional().describe('One sentence for the user saying why the extra paths or the network are needed; required with sandboxPermissions.'),
};

export interface EscalationRequest {
  sandboxPermissions?: SandboxPermissionsInput | undefined;
  justification?: string | undefined;
}

/** Whether `path` (canonical) is a directory now; a missing or unreadable path is not. */
function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

/** A valid request: its path grants (canonical) and whether it asks for the network. */
export type EscalationValidation = { ok: true; grants: PathGrant[]; network: boolean } | { ok: false; text: string };

function refused(reason: string): EscalationValidation {
  return { ok: false, text: `[sandbox: escalation refused without asking the user: ${reason}]` };
}

/** True when the request carries `sandboxPermissions` (the only trigger of an escalation card). */
export function hasEscalation(args: unknown): args is EscalationRequest & { sandboxPermissions: SandboxPermissionsInput } {
  return typeof args === 'object' && args !== null && (args as EscalationRequest).sandboxPermissions !== undefined;
}

/**
 * Validates an escalation for `actor` under `policy` (the call's policy without grants). On success
 * the grants carry canonical absolute paths.
 */
export function validateEscalation(request: EscalationRequest, policy: SandboxPolicy, actor: Actor): EscalationValidation {
  const home = policy.environment.home;
  if (!request.justification || request.justification.trim() === '') {
    return refused('justification is empty; give one sentence for the user saying why the paths are needed, then retry');
  }
  const paths = request.sandboxPermissions?.paths ?? [];
  const network = request.sandboxPermissions?.network === true;
  if (network && actor !== 'bash') return refused('network access applies to bash only; file tools never use the network');
  if (paths.length === 0 && !network) return refused('sandboxPermissions.paths is empty; list the paths this call needs');
  if (paths.length > MAX_GRANTS) return refused(`${paths.length} paths requested, at most ${MAX_GRANTS} are allowed; list only the paths this call needs`);
  const grants: PathGrant[] = [];
  for (const entry of paths) {
    const expanded = expandHome(entry.path.trim(), home);
    if (!isAbsolute(expanded)) return refused(`${JSON.stringify(entry.path)} is a relative path; every path must be absolute`);
    const path = canonicalize(resolve(expanded));
    grants.push({ path, access: entry.access, scope: entry.scope });
  }
  for (const grant of grants) {
    const tier = policy.tier(grant.path);
    if (tier === 'runtime_private') {
      return refused(`${grant.path} belongs to the runtime (its session store or configuration) and cannot be read or written in any mode; do not retry`);
    }
    if (tier === 'kernel_interface') {
      return refused(`${grant.path} is a kernel interface (/proc, /sys or /dev), which no grant opens: the file tools never touch it, and bash already has the sandbox's own /proc and /dev; do not retry`);
    }
    if (tier === 'hard_protected' && grant.access === 'write') {
      return refused(`${grant.path} is protected and cannot be written in any mode; do not retry`);
    }
    // Attack round 6: `exact` is one file (reference §4.9), and the card says "(file)"; a directory
    // bound as it is gives the command everything below it, past the subtree rules just below.
    if (grant.scope === 'exact' && isDirectory(grant.path)) {
      return refused(`${grant.path} is a directory, and an exact grant covers one file; list the files this call needs, or ask for a subtree of the narrowest directory`);
    }
    if (grant.scope === 'subtree' && (grant.path === sep || isAncestorOrSelf(grant.path, home))) {
      return refused(`a subtree at ${grant.path} is too broad (it is the filesystem root, the home directory or an ancestor of it); list narrower paths`);
    }
    if (policy.check(grant.path, grant.access, actor)) {
      return refused(`${grant.path} (${grant.access}) is already allowed under ${modeLabel(policy.mode)} mode, so the request grants nothing new; retry without sandboxPermissions`);
    }
  }
  return { ok: true, grants, network };
}
