/**
 * @module services/permissions/paths
 * Path canonicalisation and containment. Every permission answer is given on canonical paths
 * (symlinks resolved, `..` removed), so a symlink inside the workspace that points out is judged
 * by where it points (reference §4.4: "canonicalize first, then containment check").
 */
import { lstatSync, readlinkSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join, resolve, sep } from 'node:path';

const MAX_SYMLINK_HOPS = 40;
/** Linux's PATH_MAX, counting bytes. */
const MAX_PATH_BYTES = 4_096;

export class PathResolutionError extends Error {
  readonly code = 'invalid_arguments';
  constructor(message: string) {
    super(message);
    this.name = 'PathResolutionError';
  }
}

/**
 * The real path of `path`: every existing component is resolved through its symlinks; the part
 * that does not exist yet is appended as written. Dangling symlinks are followed too, so creating
 * a file through one is judged at its target.
 */
export function canonicalize(path: string): string {
  // No file name holds a NUL byte, and the kernel refuses paths past PATH_MAX: both are bad input,
  // answered as such, not file-system errors thrown from deep inside a tool.
  if (path.includes('\0')) throw new PathResolutionError(`path ${JSON.stringify(path.slice(0, 200))} contains a NUL byte`);
  if (Buffer.byteLength(path) > MAX_PATH_BYTES) throw new PathResolutionError(`path is ${Buffer.byteLength(path)} bytes long, more than ${MAX_PATH_BYTES}`);
  if (!isAbsolute(path)) throw new PathResolutionError(`path ${JSON.stringify(path)} is not absolute`);
  const pending = resolve(path).split(sep).filter((c) => c !== '');
  let current: string = sep;
  let hops = 0;
  let missing = false;
  while (pending.length > 0) {
    const component = pending.shift()!;
    if (component === '.') continue;
    if (component === '..') {
      current = dirname(current);
      continue;
    }
    const candidate = join(current, component);
    if (missing) {
      current = candidate;
      continue;
    }
    let isLink = false;
    try {
      isLink = lstatSync(candidate).isSymbolicLink();
    } catch {
      // Nothing exists here: the rest of the path is taken as written.
      missing = true;
      current = candidate;
      continue;
    }
    if (!isLink) {
      current = candidate;
      continue;
    }
    hops += 1;
    if (hops > MAX_SYMLINK_HOPS) throw new PathResolutionError(`too many symbolic links while resolving ${path}`);
    let target: string;
    try {
      target = readlinkSync(candidate);
    } catch {
      // Replaced between lstat and readlink (a concurrent process): resolve this component again;
      // the hop count bounds the retries.
      pending.unshift(component);
      continue;
    }
    const parts = target.split(sep).filter((c) => c !== '');
    if (isAbsolute(target)) current = sep;
    pending.unshift(...parts);
  }
  return current;
}

/** True when `path` is `root` or below it (both canonical). */
export function isWithin(path: string, root: string): boolean {
  if (path === root) return true;
  const prefix = root.endsWith(sep) ? root : root + sep;
  return path.startsWith(prefix);
}

/** True when `ancestor` is `path` or one of its ancestors. */
export function isAncestorOrSelf(ancestor: string, path: string): boolean {
  return isWithin(path, ancestor);
}

/** Expands a leading `~` or `~/` to the given home directory. */
export function expandHome(path: string, home: string = homedir()): string {
  if (path === '~') return home;
  if (path.startsWith('~/')) return join(home, path.slice(2));
  return path;
}

/** A tool's path argument, resolved against the workspace and canonicalised. */
export function resolveToolPath(path: string, workspaceRoot: string, home: string): string {
  const expanded = expandHome(path.trim(), home);
  return canonicalize(isAbsolute(expanded) ? expanded : resolve(workspaceRoot, expanded));
}

/** The path components of `path` below `root` (empty when equal); `path` must be within `root`. */
export function componentsBelow(path: string, root: string): string[] {
  if (path === root) return [];
  return path.slice(root.length).split(sep).filter((c) => c !== '');
}
