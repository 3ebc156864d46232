/**
 * @module services/sandbox/mount-plan
 * The Linux (bubblewrap) view of a `SandboxPolicy`: which paths bash sees writable, read-only or
 * hidden. Every boundary's mode is `policy.check(boundary, ..., 'bash')`, so the mounts and the
 * file-tool fence answer from the same function (reference §4.4). The file system starts
 * read-only; each boundary overrides its nearest ancestor.
 *
 * bubblewrap mounts paths, not patterns, so the in-workspace names of the sensitive tier (`.git`,
 * `.env*`, ...) and the code-running files of every git directory (`hooks`, `config`, also of
 * submodules) are found by scanning the workspace when the command starts; a command can create
 * a new one that did not exist then (the file tools would still refuse it). `node_modules` is not
 * scanned.
 *
 * A mount protects an inode at a path, and renaming a directory carries its mounts along. So every
 * writable ancestor of a protected mount is bound onto itself (an "anchor"): a mount point cannot
 * be renamed or removed (EBUSY), and `mv sub sub2; mkdir sub; cp -a sub2/.git sub/.git` fails at
 * its first step instead of leaving an unprotected copy at the protected path.
 *
 * Every op is at a canonical path (attack round 7): a candidate that is a symbolic link (a scanned
 * `.env-keys` -> `~/.ssh` the model placed) is judged at its target as well as at its own path, and
 * the op goes to the target with the stricter of the two modes. The launcher then binds exactly
 * the object at that path (see `bubblewrap.ts`, `pinSources`), never a path bubblewrap resolves again.
 */
import { mkdirSync, readdirSync, realpathSync, statSync, utimesSync, writeFileSync, type Dirent } from 'node:fs';
import { dirname, join } from 'node:path';
import type { PathGrant, SandboxPolicy } from '../permissions/policy.js';
import { isWithin } from '../permissions/paths.js';
import { credentialPaths, isSensitiveName } from '../permissions/tiers.js';

export type MountMode = 'rw' | 'ro' | 'hidden';

export interface MountOp {
  path: string;
  mode: MountMode;
  isDirectory: boolean;
  /** Bound onto itself only so that it cannot be renamed: it holds a protected mount below. */
  anchor?: boolean;
}

export interface MountPlan {
  /** Ordered ancestors first: a later op overrides an earlier one below its path. */
  ops: MountOp[];
  /** Hidden paths, for classifying "Permission denied" lines as sandbox denials. */
  hidden: string[];
  /** Files created so that an exact write grant has something to bind; removed if the command never touched them. */
  placeholders: Placeholder[];
}

/**
 * An empty file made for an exact write grant, as it was when made: its inode and times. Its mtime
 * is set to the epoch, so that any write, truncation or `touch` by the command moves it to now and
 * the file is then the command's, whatever its size (issue 20.1).
 */
export interface Placeholder {
  path: string;
  ino: bigint;
  mtimeNs: bigint;
  ctimeNs: bigint;
}

/** Directories below which the workspace scan does not look for sensitive names. */
const UNSCANNED = new Set(['node_modules']);
const MAX_SCANNED_DIRECTORIES = 100_000;

function exists(path: string): { isDirectory: boolean } | null {
  try {
    const st = statSync(path);
    return { isDirectory: st.isDirectory() };
  } catch {
    return null;
  }
}

/** Sensitive entries of the workspace (not descended into), and the `hooks` of each `.git`. */
export function scanWorkspace(workspaceRoot: string): string[] {
  const found: string[] = [];
  const queue: string[] = [workspaceRoot];
  let scanned = 0;
  while (queue.length > 0 && scanned < MAX_SCANNED_DIRECTORIES) {
    const dir = queue.shift()!;
    scanned += 1;
    let entries: Dirent[];
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      continue;
    }
    for (const entry of entries) {
      const path = join(dir, entry.name);
      if (isSensitiveName(entry.name)) {
        found.push(path);
        if (entry.name.toLowerCase() === '.git' && entry.isDirectory()) found.push(...gitCodePaths(path));
        continue;
      }
      if (entry.isDirectory() && !entry.isSymbolicLink() && !UNSCANNED.has(entry.name)) queue.push(path);
    }
  }
  return found;
}

/** Submodule git directories nest this deep at most below `modules/` before the scan gives up. */
const MAX_MODULE_DEPTH = 8;
const MAX_MODULE_DIRECTORIES = 1_000;

/** The entry of `dir` named `name` in any ASCII case (tier names ignore case), if there is one. */
function entryNamed(dir: string, name: string): string | null {
  const entry = safeReaddir(dir).find((e) => e.name.toLowerCase() === name);
  return entry ? join(dir, entry.name) : null;
}

/**
 * The paths of a git directory that decide what code git runs (see `gitProtectedLength`): its
 * `hooks` (returned even when missing, so that the plan can create and protect it), `config`,
 * `config.worktree`, each linked worktree's `config.worktree`, and the same for every submodule's
 * git directory below `modules/` (a directory with a `HEAD`; names may contain slashes).
 */
export function gitCodePaths(gitDir: string): string[] {
  const found = [entryNamed(gitDir, 'hooks') ?? join(gitDir, 'hooks')];
  for (const name of ['config', 'config.worktree']) {
    const path = entryNamed(gitDir, name);
    if (path) found.push(path);
  }
  const worktrees = entryNamed(gitDir, 'worktrees');
  if (worktrees) {
    for (const entry of safeReaddir(worktrees)) {
      const path = entry.isDirectory() ? entryNamed(join(worktrees, entry.name), 'config.worktree') : null;
      if (path) found.push(path);
    }
  }
  const modules = entryNamed(gitDir, 'modules');
  const queue: Array<{ dir: string; depth: number }> = modules ? [{ dir: modules, depth: 0 }] : [];
  let scanned = 0;
  while (queue.length > 0 && scanned < MAX_MODULE_DIRECTORIES) {
    const { dir, depth } = queue.shift()!;
    scanned += 1;
    for (const entry of safeReaddir(dir)) {
      if (!entry.isDirectory() || entry.isSymbolicLink()) continue;
      const path = join(dir, entry.name);
      if (exists(join(path, 'HEAD'))) found.push(...gitCodePaths(path));
      else if (depth + 1 < MAX_MODULE_DEPTH) queue.push({ dir: path, depth: depth + 1 });
    }
  }
  return found;
}

/** The `.git` directory `path` is in or is (by name, any case), or null. */
function enclosingGitDir(path: string): string | null {
  const parts = path.split('/');
  const at = parts.findIndex((c) => c.toLowerCase() === '.git');
  return at > 0 ? parts.slice(0, at + 1).join('/') : null;
}

function safeReaddir(dir: string): Dirent[] {
  try {
    return readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
}

function depth(path: string): number {
  return path.split('/').filter((c) => c !== '').length;
}

/**
 * The mount mode of `path`. An `exact` grant is one file (reference §4.9): a directory is judged
 * without the call's exact grants (attack round 6), since binding it would open everything below it.
 * Validation refuses an exact grant on a directory; this holds when the path became one after.
 */
function modeOf(policy: SandboxPolicy, path: string, isDirectory: boolean): MountMode {
  const judge = isDirectory && policy.pathGrants.some((g) => g.scope === 'exact') ? policy.withGrants(policy.pathGrants.filter((g) => g.scope === 'subtree')) : policy;
  if (!judge.check(path, 'read', 'bash')) return 'hidden';
  return judge.check(path, 'write', 'bash') ? 'rw' : 'ro';
}

const STRICTNESS: Record<MountMode, number> = { rw: 0, ro: 1, hidden: 2 };

function stricter(a: MountMode, b: MountMode): MountMode {
  return STRICTNESS[a] >= STRICTNESS[b] ? a : b;
}

/**
 * The op for a candidate path, at its canonical path (null when nothing is there). A path through a
 * symbolic link is judged at both ends and the stricter mode wins: a link named like a protected
 * entry keeps protecting what it leads to (`.git/hooks` -> `../hooks`), and a link to a hidden
 * place (`<ws>/.env-keys` -> `~/.ssh`) never opens it.
 */
function judgedOp(policy: SandboxPolicy, path: string): MountOp | null {
  let real: string;
  let isDirectory: boolean;
  try {
    real = realpathSync.native(path);
    isDirectory = statSync(real).isDirectory();
  } catch {
    return null;
  }
  const mode = modeOf(policy, real, isDirectory);
  return { path: real, mode: real === path ? mode : stricter(mode, modeOf(policy, path, isDirectory)), isDirectory };
}

/** Makes what an approved write grant names exist, so that it can be bound writable. */
function materialiseGrant(grant: PathGrant, placeholders: Placeholder[]): void {
  if (grant.access !== 'write' || exists(grant.path)) return;
  if (grant.scope === 'subtree') {
    mkdirSync(grant.path, { recursive: true });
    return;
  }
  mkdirSync(dirname(grant.path), { recursive: true });
  writeFileSync(grant.path, '', { flag: 'wx' });
  utimesSync(grant.path, 0, 0);
  const st = statSync(grant.path, { bigint: true });
  placeholders.push({ path: grant.path, ino: st.ino, mtimeNs: st.mtimeNs, ctimeNs: st.ctimeNs });
}

/**
 * Derives the mounts of one bash call. Creates what approved write grants name when it is missing
 * (a subtree directory, or an empty placeholder file for an exact grant) and `.git/hooks` when a
 * writable `.git` lacks it, so that the hard-protected path can be mounted read-only.
 */
export function buildMountPlan(policy: SandboxPolicy): MountPlan {
  const placeholders: Placeholder[] = [];
  for (const grant of policy.pathGrants) materialiseGrant(grant, placeholders);
  const env = policy.environment;
  const candidates = new Set<string>([
    ...env.tempDirs,
    policy.workspaceRoot,
    ...policy.pathGrants.map((g) => g.path),
    env.openworkHome,
    ...env.skillRoots,
    ...credentialPaths(env),
  ]);
  const writeGrants = policy.pathGrants.filter((g) => g.access === 'write').map((g) => g.path);
  const writableRoots = [...env.tempDirs, ...(policy.bashWritesWorkspace() ? [policy.workspaceRoot] : []), ...writeGrants];
  const workspaceReachable = writableRoots.some((r) => isWithin(r, policy.workspaceRoot) || isWithin(policy.workspaceRoot, r));
  const scanned = workspaceReachable ? scanWorkspace(policy.workspaceRoot) : [];
  // A write grant elsewhere may open a repository too: its git directory keeps its hooks and config.
  for (const grant of writeGrants) {
    if (isWithin(grant, policy.workspaceRoot)) continue;
    const gitDir = enclosingGitDir(grant);
    if (gitDir) scanned.push(...gitCodePaths(gitDir));
    else if (exists(grant)?.isDirectory) scanned.push(...scanWorkspace(grant));
  }
  for (const path of scanned) {
    const base = path.split('/').pop()!.toLowerCase();
    if (base === 'hooks' && !exists(path) && policy.check(dirname(path), 'write', 'bash')) mkdirSync(path, { recursive: true });
    candidates.add(path);
  }
  for (const path of env.runtimePaths) candidates.add(path);
  const judged = new Map<string, MountOp>();
  for (const path of candidates) {
    const op = judgedOp(policy, path);
    if (!op) continue;
    const seen = judged.get(op.path);
    judged.set(op.path, seen ? { ...op, mode: stricter(seen.mode, op.mode) } : op);
  }
  const present = [...judged.values()];
  present.sort((a, b) => depth(a.path) - depth(b.path) || a.path.localeCompare(b.path));
  const ops: MountOp[] = [];
  for (const op of present) {
    const inherited = inheritedMode(ops, op.path);
    if (inherited !== op.mode) ops.push(op);
  }
  const anchored = withAnchors(ops);
  return { ops: anchored, hidden: anchored.filter((o) => o.mode === 'hidden').map((o) => o.path), placeholders };
}

/**
 * Adds an anchor for every ancestor of a protected (read-only or hidden) mount whose parent is
 * writable, so that no directory on the way to a protected path can be renamed away. Anchors are
 * writable like what they inherit; the order stays ancestors first.
 */
function withAnchors(ops: readonly MountOp[]): MountOp[] {
  const mounted = new Set(ops.map((o) => o.path));
  const anchors: MountOp[] = [];
  for (const op of ops) {
    if (op.mode === 'rw') continue;
    for (let dir = dirname(op.path); dir !== '/'; dir = dirname(dir)) {
      // A mount point cannot be renamed itself, but the directories above it still can.
      if (mounted.has(dir) || inheritedMode(ops, dirname(dir)) !== 'rw') continue;
      mounted.add(dir);
      anchors.push({ path: dir, mode: 'rw', isDirectory: true, anchor: true });
    }
  }
  if (anchors.length === 0) return [...ops];
  return [...ops, ...anchors].sort((a, b) => depth(a.path) - depth(b.path) || a.path.localeCompare(b.path));
}

function inheritedMode(ops: readonly MountOp[], path: string): MountMode {
  for (let i = ops.length - 1; i >= 0; i -= 1) {
    const op = ops[i]!;
    if (op.path === path || (op.isDirectory && isWithin(path, op.path))) return op.mode;
  }
  return 'ro';
}

/** What a path's access would be inside the sandbox built from `plan` (for the parity tests). */
export function planAllows(plan: MountPlan, path: string, access: 'read' | 'write'): boolean {
  const mode = inheritedMode(plan.ops, path);
  return access === 'read' ? mode !== 'hidden' : mode === 'rw';
}
