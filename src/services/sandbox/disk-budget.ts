/**
 * @module services/sandbox/disk-budget
 * The disk budget of one bash call (trust-lease): how many bytes and inodes it may take on the file
 * systems it can write (the workspace's and the temp directories'). Without root there is no quota
 * to set, so the budget is watched: the free blocks and free inodes of each of those file systems
 * are read (`statfs`) when the call starts and every `DISK_CHECK_MS` while it runs, and the call is
 * stopped once what they lost exceeds the budget. It is a bound on what one call can take, not an
 * exact count: another writer on the same file system counts against the call, and a command
 * writes on for up to one interval (plus the kill) before it is stopped.
 */
import { statfsSync, statSync } from 'node:fs';

/** What one bash call may take, by default: 4 GiB and 100,000 inodes. */
export const DEFAULT_BASH_DISK_BYTES = 4 * 1024 ** 3;
export const DEFAULT_BASH_DISK_INODES = 100_000;
/** The largest file one bash process may write, by default (RLIMIT_FSIZE): 1 GiB. */
export const DEFAULT_BASH_FILE_SIZE_BYTES = 1024 ** 3;
/** How often a running call's file systems are looked at. */
export const DISK_CHECK_MS = 100;

export interface DiskBudget {
  bytes: number;
  inodes: number;
}

interface Watched {
  path: string;
  blockSize: number;
  freeBlocks: number;
  freeInodes: number;
}

function look(path: string): { blockSize: number; freeBlocks: number; freeInodes: number } | null {
  try {
    const s = statfsSync(path);
    return { blockSize: Number(s.bsize), freeBlocks: Number(s.bfree), freeInodes: Number(s.ffree) };
  } catch {
    return null;
  }
}

/**
 * Starts watching the file systems of `paths` (one per device); `exceeded()` answers why the call
 * went past `budget` since, or null.
 */
export function watchDisk(paths: readonly string[], budget: DiskBudget): { exceeded(): string | null } {
  const devices = new Set<number>();
  const watched: Watched[] = [];
  for (const path of paths) {
    let dev: number;
    try {
      dev = statSync(path).dev;
    } catch {
      continue;
    }
    if (devices.has(dev)) continue;
    const first = look(path);
    if (!first) continue;
    devices.add(dev);
    watched.push({ path, ...first });
  }
  return {
    exceeded() {
      for (const w of watched) {
        const now = look(w.path);
        if (!now) continue;
        const bytes = (w.freeBlocks - now.freeBlocks) * w.blockSize;
        // A file system without inode accounting (btrfs answers 0 free inodes) is not judged by inodes.
        const inodes = w.freeInodes > 0 ? w.freeInodes - now.freeInodes : 0;
        if (bytes > budget.bytes) return `the command used more than ${budget.bytes} bytes of disk (${bytes} on the file system of ${w.path})`;
        if (inodes > budget.inodes) return `the command created more than ${budget.inodes} files (${inodes} inodes on the file system of ${w.path})`;
      }
      return null;
    },
  };
}
