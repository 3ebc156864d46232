/**
 * @module services/sandbox/seatbelt
 * bash under Seatbelt (`sandbox-exec`) on macOS, after reference §4.5. The profile text holds only
 * parameter names (`P0`, `P1`, ...); every path and regex travels in `-D` definitions. It
 * constrains file effects and, unless the call was granted it, the network. This path is NOT exercised by the test suite (it runs on Linux);
 * the profile's shape is unit-tested, its behaviour is not.
 */
import type { SandboxPolicy } from '../permissions/policy.js';
import { isWithin } from '../permissions/paths.js';
import { credentialPaths } from '../permissions/tiers.js';
import { fileSizePrefix, shellArgv, type LaunchOptions, type LaunchSpec, type SandboxLauncher } from './launcher.js';

export const SANDBOX_EXEC = '/usr/bin/sandbox-exec';

/** Escapes a path for use inside a POSIX extended regex. */
export function escapeRegex(path: string): string {
  return path.replace(/[.^$|?*+()[\]{}\\]/g, '\\$&');
}

/** `.git` → `\.[gG][iI][tT]`: tier names match ASCII case-insensitively (reference §4.3). */
function caseless(name: string): string {
  return [...name]
    .map((c) => (/[a-z]/i.test(c) ? `[${c.toLowerCase()}${c.toUpperCase()}]` : escapeRegex(c)))
    .join('');
}

function underWorkspace(workspace: string, names: string): string {
  return `^${escapeRegex(workspace)}/(.*/)?${names}(/.*)?$`;
}

export interface SeatbeltProfile {
  profile: string;
  /** `-D` definitions in registration order. */
  params: Array<[string, string]>;
}

/**
 * Builds the profile and its parameters from a policy (reference §4.5). Without `network` every
 * socket operation is denied (`network*`: the internet, the host's loopback and unix sockets), as
 * bubblewrap's network namespace does on Linux.
 */
export function seatbeltProfile(policy: SandboxPolicy, options: LaunchOptions = {}): SeatbeltProfile {
  const params: Array<[string, string]> = [];
  const param = (value: string) => {
    const name = `P${params.length}`;
    params.push([name, value]);
    return `(param "${name}")`;
  };
  const env = policy.environment;
  const ws = policy.workspaceRoot;
  const lines = ['(version 1)', '(allow default)', '(deny file-write*)'];
  if (!options.network) lines.push('(deny network*)');

  // Writable devices.
  const devices = ['/dev/null', '/dev/zero', '/dev/tty'].map((d) => `(literal ${param(d)})`);
  devices.push(`(regex ${param('^/dev/fd/[0-9]+$')})`, `(regex ${param('^/dev/ttys[0-9]+$')})`);
  lines.push(`(allow file-write* ${devices.join(' ')})`);

  // Exclusions every writable region subtracts; a grant keeps the sensitive or credential paths it names.
  const hard = [...env.runtimePaths, env.openworkHome, ...env.skillRoots].map((p) => `(require-not (subpath ${param(p)}))`);
  // The code-running files of every git directory (tiers.ts `gitProtectedLength`), wherever it is.
  const gitCode = `(${caseless('hooks')}|${caseless('config')}|${caseless('config.worktree')})`;
  hard.push(`(require-not (regex ${param(`^(.*/)?${caseless('.git')}/(${caseless('modules')}/.+/)?${gitCode}(/.*)?$`)}))`);
  hard.push(`(require-not (regex ${param(`^(.*/)?${caseless('.git')}/${caseless('worktrees')}/[^/]+/${caseless('config.worktree')}$`)}))`);
  const sensitivePatterns = [
    caseless('.git'),
    `${caseless('.env')}[^/]*`,
    caseless('.envrc'),
    caseless('.vscode'),
    caseless('.idea'),
    caseless('.gitconfig'),
    caseless('.gitmodules'),
    caseless('.bashrc'),
    caseless('.bash_profile'),
    caseless('.zshrc'),
    caseless('.zprofile'),
    caseless('.profile'),
  ];
  const sensitive = sensitivePatterns.map((p) => `(require-not (regex ${param(underWorkspace(ws, p))}))`);
  const credentials = credentialPaths(env);
  const credentialExclusions = (except: string | null) =>
    credentials.filter((c) => except === null || !isWithin(except, c)).map((c) => `(require-not (subpath ${param(c)}))`);

  const roots = [...env.tempDirs, ...(policy.bashWritesWorkspace() ? [ws] : [])];
  for (const root of roots) {
    // Attack round 6: a workspace inside a temp dir keeps the workspace rule (policy.ts `denial`).
    const workspaceInside = !policy.bashWritesWorkspace() && isWithin(ws, root) ? [`(require-not (subpath ${param(ws)}))`] : [];
    lines.push(`(allow file-write* (require-all (subpath ${param(root)}) ${[...hard, ...sensitive, ...credentialExclusions(null), ...workspaceInside].join(' ')}))`);
  }
  for (const grant of policy.pathGrants.filter((g) => g.access === 'write')) {
    const tierRoot = policy.tierAnswer(grant.path).root;
    const keepSensitive = tierRoot !== null && policy.tier(grant.path) === 'sensitive';
    const matcher = grant.scope === 'subtree' ? `(subpath ${param(grant.path)})` : `(literal ${param(grant.path)})`;
    const exclusions = [...hard, ...(keepSensitive ? [] : sensitive), ...credentialExclusions(grant.path)];
    lines.push(`(allow file-write* (require-all ${matcher} ${exclusions.join(' ')}))`);
  }
  // The runtime's store and configuration: not even readable.
  for (const path of env.runtimePaths) lines.push(`(deny file-read* (subpath ${param(path)}))`);
  for (const credential of credentials) {
    const subject = `(subpath ${param(credential)})`;
    const readGrants = policy.pathGrants
      .filter((g) => isWithin(g.path, credential))
      .map((g) => `(require-not ${g.scope === 'subtree' ? `(subpath ${param(g.path)})` : `(literal ${param(g.path)})`})`);
    lines.push(`(deny file-read* (require-all ${subject}${readGrants.map((g) => ` ${g}`).join('')}))`);
  }
  return { profile: lines.join('\n'), params };
}

export function seatbeltLauncher(options: { sandboxExec?: string } = {}): SandboxLauncher {
  return {
    kind: 'seatbelt',
    prepare(policy, command, launch = {}): LaunchSpec {
      const { profile, params } = seatbeltProfile(policy, launch);
      return {
        file: options.sandboxExec ?? SANDBOX_EXEC,
        args: ['-p', profile, ...params.flatMap(([k, v]) => ['-D', `${k}=${v}`]), '--', ...shellArgv(command, fileSizePrefix(launch.fileSizeLimitBytes))],
        statusFd: false,
        hidden: [...policy.environment.runtimePaths, ...credentialPaths(policy.environment)],
        cleanup() {},
      };
    },
  };
}
