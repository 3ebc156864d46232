/**
 * @module services/tools/walk
 * The directory walk behind `grep`, `glob` and `list`: breadth-first, never following directory
 * symlinks, skipping `.git`, honouring `.gitignore` files (via the `ignore` package), and skipping
 * every entry the policy does not let the file tools read (credential paths, symlinks pointing into
 * them). Each directory is opened and judged before it is listed (verified-open.ts). It stops at a
 * deadline or on abort and says so.
 */
import { opendir, stat } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import ignore, { type Ignore } from 'ignore';
import { canonicalize } from '../permissions/paths.js';
import type { SandboxPolicy } from '../permissions/policy.js';
import { readSmallFile } from './small-file.js';
import { openWalkDirectory } from './verified-open.js';

/**
 * A larger `.gitignore` is not honoured (its directory is walked as if it had none). Real ones are
 * a few KiB; the bound keeps a planted file of gigabytes from being read into memory.
 */
export const GITIGNORE_MAX_BYTES = 1024 * 1024;

export interface WalkEntry {
  /** As found (below the walk root, symlinks not resolved). */
  path: string;
  /** Relative to the walk root, with `/` separators. */
  relative: string;
  isDirectory: boolean;
  /** The canonical path (a symlink's target). */
  real: string;
}

export interface WalkOptions {
  policy: SandboxPolicy;
  signal: AbortSignal;
  deadline: number;
  now: () => number;
  /** Descend into directories (default true). */
  recursive?: boolean;
  /** Show `.git` entries (never descended into); grep and glob leave them out. */
  showGit?: boolean;
}

export interface WalkState {
  /** Entries the policy did not allow reading. */
  skipped: number;
  /** The walk ran out of time or was cancelled. */
  stopped: 'deadline' | 'aborted' | null;
}

interface IgnoreLayer {
  base: string;
  rules: Ignore;
}

/**
 * The `.gitignore` of a directory being walked, read through the directory's verified descriptor
 * (`listPath`) and never by following a name: the model can make it a FIFO, which froze the whole
 * host when it was read synchronously by name (the open waits for a writer on the main thread), or
 * a symbolic link to `/dev/zero` or a credential. Like git since 2.32, a symbolic link is not
 * followed; a FIFO, a device or an oversized file is not honoured.
 */
async function loadGitignore(dir: string, listPath: string): Promise<IgnoreLayer | null> {
  const file = await readSmallFile(join(listPath, '.gitignore'), GITIGNORE_MAX_BYTES);
  if (!file.ok) return null;
  return { base: dir, rules: ignore().add(file.bytes.toString('utf8')) };
}

function ignored(layers: readonly IgnoreLayer[], path: string, isDirectory: boolean): boolean {
  for (const layer of layers) {
    const rel = relative(layer.base, path).split(sep).join('/');
    if (rel === '' || rel.startsWith('..')) continue;
    if (layer.rules.ignores(isDirectory ? `${rel}/` : rel)) return true;
  }
  return false;
}

/** Walks below `root` (canonical, readable); yields files and directories in breadth-first order. */
export async function* walk(root: string, options: WalkOptions, state: WalkState): AsyncGenerator<WalkEntry> {
  const queue: Array<{ dir: string; layers: IgnoreLayer[] }> = [{ dir: root, layers: [] }];
  while (queue.length > 0) {
    const { dir, layers: parentLayers } = queue.shift()!;
    // The directory is opened and judged first, then listed through its descriptor: a directory
    // swapped for a symlink (to ~/.ssh, say) after it was queued is skipped, never listed.
    const opened = await openWalkDirectory(options.policy, dir);
    if (opened === null) continue;
    const names: Array<{ name: string; isDirectory: boolean; isSymlink: boolean }> = [];
    let layers = parentLayers;
    try {
      const own = await loadGitignore(dir, opened.listPath);
      if (own) layers = [...parentLayers, own];
      for await (const entry of await opendir(opened.listPath)) {
        // A directory of millions of names (bash makes them fast) is listed only until the deadline.
        if (options.signal.aborted || options.now() > options.deadline) break;
        names.push({ name: entry.name, isDirectory: entry.isDirectory(), isSymlink: entry.isSymbolicLink() });
      }
    } catch {
      continue;
    } finally {
      await opened.handle.close().catch(() => undefined);
    }
    if (options.signal.aborted || options.now() > options.deadline) {
      state.stopped = options.signal.aborted ? 'aborted' : 'deadline';
      return;
    }
    names.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const entry of names) {
      if (options.signal.aborted) {
        state.stopped = 'aborted';
        return;
      }
      if (options.now() > options.deadline) {
        state.stopped = 'deadline';
        return;
      }
      const path = join(dir, entry.name);
      if (entry.name === '.git') {
        if (options.showGit) yield { path, relative: relative(root, path).split(sep).join('/'), isDirectory: entry.isDirectory, real: path };
        continue;
      }
      let isDirectory = entry.isDirectory;
      let real = path;
      if (entry.isSymlink) {
        try {
          real = canonicalize(path);
          // A symlinked directory is listed but not descended into (no cycles, no escapes).
          isDirectory = (await stat(real)).isDirectory();
        } catch {
          continue;
        }
      }
      if (!options.policy.check(real, 'read', 'file_tool')) {
        state.skipped += 1;
        continue;
      }
      if (ignored(layers, path, isDirectory)) continue;
      const rel = relative(root, path).split(sep).join('/');
      yield { path, relative: rel, isDirectory, real };
      if (isDirectory && !entry.isSymlink && options.recursive !== false) queue.push({ dir: path, layers });
    }
  }
}
