/**
 * @module cli/tools
 * The tools `openwork chat` gives the model: the one place that decides the CLI's tool list.
 * For now a small safe set confined to the working directory: list a directory, read a file
 * (hidden files such as `.env` ask first). The file-editing and shell tools plug in here.
 */
import { open, readdir, realpath, stat } from 'node:fs/promises';
import { isAbsolute, join, relative, resolve, sep } from 'node:path';
import { z } from 'zod';
import { defineTool, type AnyTool } from '../services/tools/define.js';

const MAX_ENTRIES = 200;
const MAX_READ_BYTES = 64 * 1024;

/** Resolves `path` inside `root`, following symlinks, or throws: nothing outside the working directory. */
export async function confined(root: string, path: string): Promise<{ absolute: string; shown: string }> {
  const base = await realpath(root);
  const target = resolve(base, path);
  let real: string;
  try {
    real = await realpath(target);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') throw new Error(`${path}: no such file or directory`);
    throw error;
  }
  const rel = relative(base, real);
  if (rel.startsWith('..') || isAbsolute(rel)) throw new Error(`${path} is outside the working directory`);
  return { absolute: real, shown: rel === '' ? '.' : rel };
}

/** True when a path has a segment starting with a dot (`.env`, `.git/config`, `.ssh/...`). */
function isHidden(shown: string): boolean {
  return shown.split(sep).some((segment) => segment.startsWith('.') && segment !== '.' && segment !== '..');
}

const listDirectory = defineTool({
  name: 'list_directory',
  description: `Lists the entries of a directory inside the working directory (at most ${MAX_ENTRIES}); directories end with "/".`,
  parameters: z.object({ path: z.string().default('.').describe('Directory, relative to the working directory.') }),
  execute: async ({ path }, ctx) => {
    const { absolute, shown } = await confined(ctx.workingDirectory, path);
    const entries = await readdir(absolute, { withFileTypes: true });
    entries.sort((a, b) => a.name.localeCompare(b.name));
    const lines = entries.slice(0, MAX_ENTRIES).map((e) => (e.isDirectory() ? `${e.name}/` : e.name));
    if (entries.length > MAX_ENTRIES) lines.push(`... ${entries.length - MAX_ENTRIES} more entries`);
    return lines.length === 0 ? `${shown} is empty` : lines.join('\n');
  },
});

const readFile = defineTool({
  name: 'read_file',
  description: `Reads a text file inside the working directory (at most ${MAX_READ_BYTES / 1024} KiB from \`offset\` bytes). Hidden files such as .env need the user's approval.`,
  parameters: z.object({
    path: z.string().min(1).describe('File, relative to the working directory.'),
    offset: z.number().int().min(0).default(0).describe('Byte offset to start at.'),
  }),
  authorize: ({ path }, ctx) => {
    const shown = relative(ctx.workingDirectory, resolve(ctx.workingDirectory, path));
    if (!isHidden(shown)) return { kind: 'execute' };
    return {
      kind: 'card',
      card: {
        toolName: 'read_file',
        kind: 'approval',
        summary: `read ${shown}`,
        path: join(ctx.workingDirectory, shown),
        reason: 'hidden files often hold secrets (.env, .git, .ssh)',
        environmentId: 'local',
        grantKey: 'read_file:hidden',
      },
    };
  },
  execute: async ({ path, offset }, ctx) => {
    const { absolute, shown } = await confined(ctx.workingDirectory, path);
    // A link with an ordinary name may lead to a hidden file: that read was never approved.
    if (isHidden(shown) && ctx.approval.decision === 'none') throw new Error(`${path} leads to the hidden file ${shown}: read it by that name`);
    const info = await stat(absolute);
    if (!info.isFile()) throw new Error(`${shown} is not a file`);
    const handle = await open(absolute, 'r');
    try {
      const buffer = Buffer.alloc(Math.min(MAX_READ_BYTES, Math.max(0, info.size - offset)));
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, offset);
      const bytes = buffer.subarray(0, bytesRead);
      if (bytes.includes(0)) return `${shown} is a binary file (${info.size} bytes)`;
      const end = offset + bytesRead;
      const text = bytes.toString('utf8');
      return end < info.size ? `${text}\n[... ${info.size - end} more bytes: read again with offset ${end}]` : text;
    } finally {
      await handle.close();
    }
  },
});

/** The CLI's tools. */
export function cliTools(): AnyTool[] {
  return [listDirectory, readFile] as AnyTool[];
}
