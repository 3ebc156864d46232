/**
 * @module storage/store-lock
 * One process per embedded store (issue 13.5): a lock file in the PGlite directory, created with
 * O_EXCL and holding the owner's pid and host. PGlite is a single-process database; two processes
 * on one directory overwrite each other's pages and lose whole sessions, so a second opener is
 * refused with `store_locked`, naming the holder. A lock left by a process that is gone (same host,
 * pid no longer running) is taken over.
 */
import { closeSync, constants, fstatSync, linkSync, openSync, readFileSync, readSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { StoreLockedError } from '../errors.js';

/** The lock file's name inside the data directory. */
export const STORE_LOCK_FILE = 'openwork.lock';

/** What a lock file says about its holder. */
export interface StoreLockHolder {
  pid: number;
  hostname: string;
  acquiredAt: string;
}

/** A held lock; `release()` removes the file if it is still this process's. */
export interface StoreLock {
  readonly path: string;
  release(): void;
}

function readHolder(path: string): StoreLockHolder | null {
  let fd: number | undefined;
  try {
    // Never blocks (integ8): a FIFO put at the lock's path would hold a plain read for ever.
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW);
    if (!fstatSync(fd).isFile()) return null;
    const buffer = Buffer.alloc(HOLDER_MAX_BYTES);
    const size = readSync(fd, buffer, 0, buffer.length, 0);
    const parsed = JSON.parse(buffer.subarray(0, size).toString('utf8')) as Partial<StoreLockHolder>;
    if (typeof parsed.pid !== 'number' || !Number.isInteger(parsed.pid) || parsed.pid <= 0) return null;
    return { pid: parsed.pid, hostname: typeof parsed.hostname === 'string' ? parsed.hostname : '', acquiredAt: String(parsed.acquiredAt ?? '') };
  } catch {
    return null;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/** A lock file holds one short JSON object; more than this is not a holder. */
const HOLDER_MAX_BYTES = 4096;

/** A holder on another host cannot be checked and counts as alive; on this host, signal 0 asks the kernel. */
function isAlive(holder: StoreLockHolder): boolean {
  if (holder.hostname !== hostname()) return true;
  try {
    process.kill(holder.pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function errnoOf(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | null)?.code;
}

function refuse(path: string, holder: StoreLockHolder | null): never {
  const who = holder ? `process ${holder.pid} on ${holder.hostname || 'an unknown host'}` : 'another process (its lock file is being written or unreadable)';
  throw new StoreLockedError(
    `the embedded store is in use by ${who} (lock file ${path}); PGlite allows one process per directory: use a Postgres server (--database-url) for several processes`,
    { details: { lockPath: path, ...(holder ? { holderPid: holder.pid, holderHostname: holder.hostname, acquiredAt: holder.acquiredAt } : {}) } },
  );
}

/**
 * Takes the lock of `dataDir` or throws `StoreLockedError`. Synchronous, so that no query can
 * reach the directory before the lock is held.
 */
export function acquireStoreLock(dataDir: string): StoreLock {
  const path = join(dataDir, STORE_LOCK_FILE);
  const mine: StoreLockHolder = { pid: process.pid, hostname: hostname(), acquiredAt: new Date().toISOString() };
  // A few rounds: each lost race with another taker starts over from the create.
  for (let round = 0; round < 5; round += 1) {
    let fd: number;
    try {
      fd = openSync(path, 'wx', 0o644);
    } catch (error) {
      if (errnoOf(error) !== 'EEXIST') throw error;
      const holder = readHolder(path);
      // An unreadable file may be a lock being written this instant: only a dead holder is taken over.
      if (holder === null || isAlive(holder)) refuse(path, holder);
      // Stale: move it aside atomically. Of two processes taking over, only one renames this file.
      const aside = `${path}.stale-${process.pid}`;
      try {
        renameSync(path, aside);
      } catch (renameError) {
        if (errnoOf(renameError) === 'ENOENT') continue;
        throw renameError;
      }
      const moved = readHolder(aside);
      if (moved && moved.pid !== holder.pid) {
        // Another taker's fresh lock was moved by mistake: put it back and give way.
        try {
          linkSync(aside, path);
        } catch {
          // The path was taken again meanwhile; that lock stands.
        }
        unlinkSync(aside);
        refuse(path, moved);
      }
      unlinkSync(aside);
      continue;
    }
    try {
      writeSync(fd, JSON.stringify(mine));
    } finally {
      closeSync(fd);
    }
    let released = false;
    return {
      path,
      release() {
        if (released) return;
        released = true;
        const holder = readHolder(path);
        if (holder && holder.pid === mine.pid && holder.acquiredAt === mine.acquiredAt) {
          try {
            unlinkSync(path);
          } catch {
            // Already gone.
          }
        }
      },
    };
  }
  refuse(path, readHolder(path));
}
