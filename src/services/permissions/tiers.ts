/**
 * @module services/permissions/tiers
 * The path tiers of reference §4.3, with the Linux credential directories added (DECISIONS §5)
 * and a fifth tier above them all: the runtime's private paths (its store and configuration),
 * which no tool reads or writes, and the kernel's interfaces (`/proc`, `/sys`, `/dev`), which the
 * in-process file tools never touch. In-workspace tier names match ASCII case-insensitively.
 */
import { join } from 'node:path';
import type { SandboxEnvironment } from './environment.js';
import { componentsBelow, isWithin } from './paths.js';
import { CREDENTIAL_PATHS } from './credential-stores.js';

export { CREDENTIAL_ENV_PATHS, CREDENTIAL_PATHS, movedCredentialPaths } from './credential-stores.js';

export type Tier = 'runtime_private' | 'kernel_interface' | 'hard_protected' | 'credential' | 'sensitive' | 'normal';

/**
 * The kernel's interfaces: process state, devices and kernel settings, not files. The file tools run
 * in the runtime's own process, so `/proc/self/environ`, `/proc/self/fd/N`, `/proc/<pid>/mem` or the
 * shared-memory segments in `/dev/shm` would be the runtime's (and its neighbours') secrets and
 * memory, not the workspace's. bash is unaffected: its sandbox mounts a `/proc` of its own PID
 * namespace, a minimal `/dev` and a private `/dev/shm`, and `/sys` read-only.
 */
export const KERNEL_INTERFACE_ROOTS: readonly string[] = Object.freeze(['/proc', '/sys', '/dev']);

/**
 * System-wide facts below a kernel root that the file tools may still read: they describe the
 * machine, never a process, a descriptor or a device.
 */
export const KERNEL_READABLE_FILES: readonly string[] = Object.freeze(['/proc/cpuinfo', '/proc/meminfo', '/proc/version', '/proc/loadavg', '/proc/uptime']);

/** The kernel root `path` (canonical) lies in, or `null` (also for the readable system facts). */
export function kernelInterfaceRoot(path: string, platform: SandboxEnvironment['platform']): string | null {
  // macOS has only /dev (devfs), on a case-insensitive root; compare as the file system does.
  const subject = platform === 'darwin' ? path.toLowerCase() : path;
  if (KERNEL_READABLE_FILES.includes(subject)) return null;
  return KERNEL_INTERFACE_ROOTS.find((root) => isWithin(subject, root)) ?? null;
}


/** File names that make a workspace path sensitive at any depth (matched case-insensitively). */
const SENSITIVE_NAMES = new Set(['.git', '.envrc', '.vscode', '.idea', '.gitconfig', '.gitmodules', '.bashrc', '.bash_profile', '.zshrc', '.zprofile', '.profile']);

/** True when a single path component makes a workspace path sensitive. */
export function isSensitiveName(name: string): boolean {
  const lower = name.toLowerCase();
  return SENSITIVE_NAMES.has(lower) || lower.startsWith('.env');
}

/**
 * Names inside a git directory that decide what code git runs: `config` (`core.fsmonitor`,
 * `core.hooksPath`, filters, aliases), `config.worktree`, and `hooks`. They stay hard-protected even
 * when a grant opens the `.git` around them, because writing them means code execution on the
 * user's next `git status`.
 */
const GIT_CODE_NAMES = new Set(['hooks', 'config', 'config.worktree']);

/**
 * The number of leading components of `parts` that name a protected git path (`.git/hooks`,
 * `.git/config`, `.git/config.worktree`, the same below `.git/modules/<name...>/` for submodules,
 * and `.git/worktrees/<name>/config.worktree`), or 0. A submodule's name may contain slashes, so
 * below `modules/` any later component with one of those names counts (a ref named `hooks` inside
 * a submodule's git directory is protected too; that is the price of not parsing git's layout).
 */
export function gitProtectedLength(parts: readonly string[]): number {
  const lower = parts.map((p) => p.toLowerCase());
  for (let i = 0; i + 1 < lower.length; i += 1) {
    if (lower[i] !== '.git') continue;
    const next = lower[i + 1]!;
    if (GIT_CODE_NAMES.has(next)) return i + 2;
    if (next === 'modules') {
      // At least one component of the submodule's name comes first.
      for (let k = i + 3; k < lower.length; k += 1) if (GIT_CODE_NAMES.has(lower[k]!)) return k + 1;
    }
    if (next === 'worktrees' && lower[i + 3] === 'config.worktree') return i + 4;
  }
  return 0;
}

/** The absolute credential paths of an environment. */
export function credentialPaths(environment: SandboxEnvironment): string[] {
  return [...environment.credentialRoots];
}

export interface TierAnswer {
  tier: Tier;
  /**
   * The path at which the tier begins (the `.git` directory, the `.env` file, `~/.ssh`, ...). A grant
   * unlocks a sensitive or credential path only when it names this root or something below it.
   */
  root: string | null;
}

/** Containment for home-relative tiers; macOS file systems ignore case, so the check does too. */
function withinHomePath(path: string, root: string, environment: SandboxEnvironment): boolean {
  return environment.platform === 'darwin' ? isWithin(path.toLowerCase(), root.toLowerCase()) : isWithin(path, root);
}

/** The tier of a canonical absolute path for a workspace (canonical) in an environment. */
export function tierOf(path: string, workspaceRoot: string, environment: SandboxEnvironment): TierAnswer {
  // The store and configuration first: they may sit below `~/.openwork` or in the workspace.
  for (const root of environment.runtimePaths) if (withinHomePath(path, root, environment)) return { tier: 'runtime_private', root };
  // Whatever the workspace or a grant says: a workspace at `/` does not make `/proc/self/mem` a file.
  const kernelRoot = kernelInterfaceRoot(path, environment.platform);
  if (kernelRoot !== null) return { tier: 'kernel_interface', root: kernelRoot };
  if (withinHomePath(path, environment.openworkHome, environment)) return { tier: 'hard_protected', root: environment.openworkHome };
  for (const root of environment.skillRoots) if (withinHomePath(path, root, environment)) return { tier: 'hard_protected', root };
  // Every `.git` counts, in the workspace or not: a grant outside it must not open a hook either.
  const parts = componentsBelow(path, '/');
  const gitLength = gitProtectedLength(parts);
  if (gitLength > 0) return { tier: 'hard_protected', root: join('/', ...parts.slice(0, gitLength)) };
  for (const root of environment.credentialRoots) {
    if (withinHomePath(path, root, environment)) return { tier: 'credential', root };
  }
  if (isWithin(path, workspaceRoot)) {
    const parts = componentsBelow(path, workspaceRoot);
    for (let i = 0; i < parts.length; i += 1) {
      if (isSensitiveName(parts[i]!)) return { tier: 'sensitive', root: join(workspaceRoot, ...parts.slice(0, i + 1)) };
    }
  }
  return { tier: 'normal', root: null };
}
