/**
 * @module services/tools/small-file
 * Reads a small file the runtime itself consults (a `.gitignore` during a walk, `AGENTS.md` for
 * World State) without trusting its name. The workspace is the model's: bash can make that name a
 * FIFO (an open for reading waits for a writer, forever), a symbolic link to `/dev/zero` (a read
 * that never ends) or to `/dev/tty`, or a sparse file of terabytes. So the file is opened with
 * `O_NOFOLLOW | O_NONBLOCK` (a link at the name is refused, a FIFO opens at once), judged by its
 * descriptor (a regular file, at most `maxBytes`), and at most one byte past its judged size is read
 * through that descriptor, so a file that grows after the check is refused, never read on.
 */
import { constants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';

const { O_RDONLY, O_NOFOLLOW, O_NONBLOCK } = constants;

/** Why a small file was not read. */
export type SmallFileProblem = 'missing' | 'symlink' | 'not_regular' | 'too_large' | 'unreadable';

export type SmallFile = { ok: true; bytes: Buffer } | { ok: false; problem: SmallFileProblem; message: string; size?: number };

/**
 * The content of the regular file at `path`, at most `maxBytes` bytes; never blocks on a FIFO or a
 * device, never follows a symbolic link at the last component, never reads more than
 * one byte past the size it had when it was judged.
 */
export async function readSmallFile(path: string, maxBytes: number): Promise<SmallFile> {
  let handle: FileHandle;
  try {
    handle = await open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return { ok: false, problem: 'missing', message: 'it does not exist' };
    if (code === 'ELOOP') return { ok: false, problem: 'symlink', message: 'it is a symbolic link' };
    if (code === 'ENXIO') return { ok: false, problem: 'not_regular', message: 'it is not a regular file' };
    return { ok: false, problem: 'unreadable', message: `it cannot be opened: ${(error as Error).message}` };
  }
  try {
    const info = await handle.stat();
    if (!info.isFile()) return { ok: false, problem: 'not_regular', message: 'it is not a regular file' };
    if (info.size > maxBytes) return { ok: false, problem: 'too_large', message: `it is ${info.size} bytes; the limit is ${maxBytes}`, size: info.size };
    // One byte more than the size tells a file that grew since the stat from one that did not.
    const buf = Buffer.alloc(info.size + 1);
    let length = 0;
    while (length < buf.length) {
      const { bytesRead } = await handle.read(buf, length, buf.length - length, length);
      if (bytesRead === 0) break;
      length += bytesRead;
    }
    if (length > info.size) return { ok: false, problem: 'unreadable', message: 'it grew while it was read' };
    return { ok: true, bytes: buf.subarray(0, length) };
  } catch (error) {
    return { ok: false, problem: 'unreadable', message: `it cannot be read: ${(error as Error).message}` };
  } finally {
    await handle.close().catch(() => undefined);
  }
}
