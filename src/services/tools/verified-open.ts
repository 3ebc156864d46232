/**
 * @module services/tools/verified-open
 * How the file tools open what they read and write (issue 12, point 2): open first, then judge
 * what was opened. The fence checks a canonical path, but a concurrent process (bash in the
 * workspace) can swap a component for a symbolic link before the tool looks the name up again, so
 * no tool reads or writes by name after the check:
 *
 * - The last component is opened with `O_NOFOLLOW` (a link there now fails the open), directories
 *   with `O_DIRECTORY`; a symlink swapped into an intermediate component is not stopped by that,
 *   so the kernel's own path of the open descriptor (`/proc/self/fd/N`) is read back and must be
 *   the path the fence allowed, and the policy judges it once more.
 * - A new file (and each missing parent directory) is created through its verified parent's
 *   descriptor, `/proc/self/fd/<dir>/<name>` with `O_CREAT|O_EXCL|O_NOFOLLOW`, so it lands in the
 *   directory that was judged whatever happens to the names above it.
 * - Content is read and written through the descriptor only.
 * - write and edit refuse a file with more than one hard link (issue 12, point 7): writing it would
 *   change the same inode under its other names, which may be outside the workspace.
 *
 * macOS has no `/proc`: there the path route stays (open with `O_NOFOLLOW`, then the descriptor's
 * device and inode must be those the canonical path names now; new files are created by path).
 * It narrows the window but does not close it for intermediate components.
 */
import { constants, type Stats } from 'node:fs';
import { mkdir, open, readlink, stat, unlink, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { Access, SandboxPolicy } from '../permissions/policy.js';
import type { ToolContext, ToolResult } from './define.js';
import { fence } from './sandboxed.js';
import { failedResult } from '../../protocol/tool-result.js';
import type { ToolRuntime } from './tool-runtime.js';

const { O_RDONLY, O_RDWR, O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_DIRECTORY, O_NONBLOCK } = constants;

/** Linux answers "which file is this descriptor" from `/proc/self/fd`; other systems go by path. */
const PROC_FD = process.platform === 'linux';

/** What judging an opened file needs: the call's policy and where denials are recorded. */
export interface Judge {
  runtime: ToolRuntime;
  ctx: ToolContext;
  policy: SandboxPolicy;
}

export const changedWhileOpeningText = (path: string) =>
  `${path} changed while it was being opened (a file or directory on its path was replaced, for example by a symbolic link); nothing was read or written. Try again once it is stable.`;

export const hardLinkText = (path: string, links: number) =>
  `[sandbox: ${path} has ${links} hard links, so writing it would also change the same file under its other names, which may be outside the workspace; write and edit refuse files with more than one link. To change only this copy, replace it by a file of its own (copy it, then move the copy over it), or ask the user.]`;

/** A refusal the model sees for a file with more than one hard link (issue 12, point 7). */
function hardLinkRefusal(path: string, links: number): ToolResult {
  return failedResult('permission_denied', hardLinkText(path, links));
}

function errnoOf(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | undefined)?.code;
}

/** The path of an open descriptor as the kernel sees it, or `null` when it is not `expected` (non-Linux). */
async function descriptorPath(handle: FileHandle, expected: string): Promise<string | null> {
  if (PROC_FD) return readlink(`/proc/self/fd/${handle.fd}`);
  const [held, named] = await Promise.all([handle.stat(), stat(expected).catch(() => null)]);
  return named !== null && named.dev === held.dev && named.ino === held.ino ? expected : null;
}

/**
 * Judges an open descriptor: `null` when it is the file at `path` and the policy allows `access`
 * to it; otherwise the refusal (a fence denial when the file really opened is not allowed).
 */
async function judge(j: Judge, handle: FileHandle, path: string, access: Access): Promise<ToolResult | null> {
  const real = await descriptorPath(handle, path);
  if (real === null) return failedResult('execution_failed', changedWhileOpeningText(path));
  // A replaced component shows as the real path of what was opened; a deleted one ends in " (deleted)".
  const denied = fence(j.runtime, j.ctx, j.policy, real, access);
  if (denied) return denied;
  return real === path ? null : failedResult('execution_failed', changedWhileOpeningText(path));
}

/** The name of `name` inside an open, verified directory (by descriptor on Linux, by path elsewhere). */
function childOf(dir: FileHandle, dirPath: string, name: string): string {
  return PROC_FD ? `/proc/self/fd/${dir.fd}/${name}` : join(dirPath, name);
}

async function closeQuietly(handle: FileHandle | null | undefined): Promise<void> {
  await handle?.close().catch(() => undefined);
}

/** The open errors a tool reports as a result; anything else is a fault and is thrown. */
function openFailure(error: unknown, path: string, missingText: string): ToolResult | null {
  switch (errnoOf(error)) {
    case 'ENOENT':
    case 'ENOTDIR':
      return failedResult('execution_failed', missingText);
    case 'ELOOP':
      // The path is canonical, so a symbolic link at its end appeared after it was resolved.
      return failedResult('execution_failed', changedWhileOpeningText(path));
    case 'EISDIR':
      return failedResult('execution_failed', `${path} is a directory.`);
    case 'ENXIO':
    case 'ETXTBSY':
      return failedResult('execution_failed', `${path} is not a regular file.`);
    case 'EACCES':
    case 'EPERM':
      return failedResult('execution_failed', `${path} cannot be opened: the file system refused access.`);
    default:
      return null;
  }
}

export type OpenedForRead = { ok: true; handle: FileHandle; info: Stats } | { ok: false; missing: boolean; result: ToolResult };

/**
 * Opens `path` (canonical, fenced) for reading and judges the descriptor. `O_NONBLOCK` keeps a
 * FIFO from blocking the open; the caller sees the file type in `info`. The caller closes `handle`.
 */
export async function openForRead(j: Judge, path: string, missingText = `File not found: ${path}`): Promise<OpenedForRead> {
  let handle: FileHandle;
  try {
    handle = await open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  } catch (error) {
    const result = openFailure(error, path, missingText);
    if (result === null) throw error;
    const code = errnoOf(error);
    return { ok: false, missing: code === 'ENOENT' || code === 'ENOTDIR', result };
  }
  try {
    const refusal = await judge(j, handle, path, 'read');
    if (refusal) {
      await closeQuietly(handle);
      return { ok: false, missing: false, result: refusal };
    }
    return { ok: true, handle, info: await handle.stat() };
  } catch (error) {
    await closeQuietly(handle);
    throw error;
  }
}

/**
 * Opens a directory of a walk (`grep`, `glob`, `list`) and returns a path that names exactly the
 * directory judged (its descriptor on Linux), or `null` when it is gone, is no longer a plain
 * directory at that path, or may not be read. The caller closes `handle` after listing.
 */
export async function openWalkDirectory(policy: SandboxPolicy, dir: string): Promise<{ handle: FileHandle; listPath: string } | null> {
  let handle: FileHandle;
  try {
    handle = await open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  } catch {
    return null;
  }
  try {
    const real = await descriptorPath(handle, dir);
    if (real !== dir || !policy.check(real, 'read', 'file_tool')) {
      await closeQuietly(handle);
      return null;
    }
    return { handle, listPath: PROC_FD ? `/proc/self/fd/${handle.fd}` : dir };
  } catch (error) {
    await closeQuietly(handle);
    throw error;
  }
}

export type OpenedForWrite = { ok: true; handle: FileHandle | null; info: Stats | null } | { ok: false; result: ToolResult };

/**
 * Opens an existing file for write/edit (read and write through the same descriptor), judged for
 * writing; `handle: null` when there is no file yet (it is created later by `createVerified`).
 * Files with more than one hard link are refused. The caller closes `handle`.
 */
export async function openForWrite(j: Judge, path: string): Promise<OpenedForWrite> {
  let handle: FileHandle;
  try {
    // Not O_TRUNC: nothing changes before the descriptor has been judged.
    handle = await open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK);
  } catch (error) {
    const code = errnoOf(error);
    if (code === 'ENOENT') return { ok: true, handle: null, info: null };
    const result = openFailure(error, path, `${path} cannot be created here: a component of its directory is not a directory.`);
    if (result === null) throw error;
    return { ok: false, result };
  }
  try {
    const refusal = await judge(j, handle, path, 'write');
    const info = refusal ? null : await handle.stat();
    const problem =
      refusal ??
      (!info!.isFile() ? failedResult('execution_failed', `${path} is not a regular file.`) : null) ??
      (info!.nlink > 1 ? hardLinkRefusal(path, info!.nlink) : null);
    if (problem) {
      await closeQuietly(handle);
      return { ok: false, result: problem };
    }
    return { ok: true, handle, info };
  } catch (error) {
    await closeQuietly(handle);
    throw error;
  }
}

type OpenedDirectory = { ok: true; handle: FileHandle } | { ok: false; result: ToolResult };

/**
 * Opens directory `dir` (canonical) for creating entries in it, creating it (and missing ancestors)
 * through each verified parent's descriptor where the policy lets the file tools write them.
 */
async function openParent(j: Judge, dir: string, forPath: string): Promise<OpenedDirectory> {
  let handle: FileHandle | undefined;
  try {
    handle = await open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  } catch (error) {
    if (errnoOf(error) !== 'ENOENT' || dir === dirname(dir)) {
      const result = openFailure(error, dir, `${forPath} cannot be created: ${dir} is not a directory.`);
      if (result === null) throw error;
      return { ok: false, result };
    }
    if (!j.policy.check(dir, 'write', 'file_tool')) {
      return { ok: false, result: failedResult('execution_failed', `the directory ${dirname(forPath)} does not exist, and ${dir} may not be created under the current grants.`) };
    }
    const parent = await openParent(j, dirname(dir), forPath);
    if (!parent.ok) return parent;
    try {
      const child = childOf(parent.handle, dirname(dir), basename(dir));
      await mkdir(child).catch((e: unknown) => {
        if (errnoOf(e) !== 'EEXIST') throw e;
      });
      handle = await open(child, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    } catch (inner) {
      const result = openFailure(inner, dir, `${forPath} cannot be created: ${dir} is not a directory.`);
      if (result === null) throw inner;
      return { ok: false, result };
    } finally {
      await closeQuietly(parent.handle);
    }
  }
  try {
    const real = await descriptorPath(handle, dir);
    if (real !== dir) {
      await closeQuietly(handle);
      const denied = real === null ? null : fence(j.runtime, j.ctx, j.policy, join(real, basename(forPath)), 'write');
      return { ok: false, result: denied ?? failedResult('execution_failed', changedWhileOpeningText(forPath)) };
    }
    return { ok: true, handle };
  } catch (error) {
    await closeQuietly(handle);
    throw error;
  }
}

/**
 * Creates the new file `path` (canonical, fenced for writing) inside its verified parent with
 * `O_CREAT|O_EXCL|O_NOFOLLOW`, creating missing parent directories the policy lets the file tools
 * write. The caller writes through and closes `handle`.
 */
export async function createVerified(j: Judge, path: string): Promise<{ ok: true; handle: FileHandle } | { ok: false; result: ToolResult }> {
  const parent = await openParent(j, dirname(path), path);
  if (!parent.ok) return parent;
  const child = childOf(parent.handle, dirname(path), basename(path));
  let handle: FileHandle;
  try {
    handle = await open(child, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o666);
  } catch (error) {
    await closeQuietly(parent.handle);
    if (errnoOf(error) === 'EEXIST') {
      return { ok: false, result: failedResult('execution_failed', `${path} appeared while it was being created (something else made it); read it, then write again.`) };
    }
    const result = openFailure(error, path, changedWhileOpeningText(path));
    if (result === null) throw error;
    return { ok: false, result };
  }
  try {
    const refusal = await judge(j, handle, path, 'write');
    if (refusal) {
      // The directory moved after it was judged: take back the empty file this call made there.
      await closeQuietly(handle);
      await unlink(child).catch(() => undefined);
      return { ok: false, result: refusal };
    }
    return { ok: true, handle };
  } catch (error) {
    await closeQuietly(handle);
    throw error;
  } finally {
    await closeQuietly(parent.handle);
  }
}

/** Replaces the whole content of an open file through its descriptor. */
export async function writeAll(handle: FileHandle, content: string): Promise<void> {
  const buf = Buffer.from(content, 'utf8');
  await handle.truncate(0);
  for (let at = 0; at < buf.length; ) {
    const { bytesWritten } = await handle.write(buf, at, buf.length - at, at);
    at += bytesWritten;
  }
}

/**
 * The content of an opened regular file, at most the `size` it had when it was judged. Not
 * `handle.readFile()`: that takes the size from a second `fstat` of its own, so a file truncated to
 * a sparse gigabyte between the judgement and the read (one `ftruncate`, by any process writing
 * the directory) was allocated and read whole past every size bound. A file judged empty is read
 * to its end but never past `limit` bytes: the few `/proc` facts the file tools may read report
 * size 0, and an empty file that a writer keeps appending to must not be read without end.
 */
export async function readJudged(handle: FileHandle, size: number, limit: number): Promise<Buffer> {
  const capacity = size > 0 ? Math.min(size, limit) : Math.min(64 * 1024, limit);
  let buf = Buffer.alloc(capacity);
  let length = 0;
  for (;;) {
    if (length === buf.length) {
      if (size > 0 || length >= limit) break;
      const grown = Buffer.alloc(Math.min(buf.length * 2, limit));
      buf.copy(grown, 0, 0, length);
      buf = grown;
    }
    const { bytesRead } = await handle.read(buf, length, buf.length - length, length);
    if (bytesRead === 0) break;
    length += bytesRead;
  }
  return length === buf.length ? buf : buf.subarray(0, length);
}
