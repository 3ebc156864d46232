/**
 * @module cli/example-tools
 * The two small tools of the demo and of the inspector's scripted scenario: one that runs without
 * asking and one that needs an approval card. Both are real: they read the working directory and
 * write a file under `.openwork/<folder>/`.
 */
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { defineTool } from '../services/tools/define.js';

/** `list_directory`: the first `limit` entries of the working directory. */
export function listDirectoryTool(limit: number) {
  return defineTool({
    name: 'list_directory',
    description: 'Lists the entries of the working directory.',
    parameters: z.object({}),
    execute: async (_args, ctx) => {
      const entries = await readdir(ctx.workingDirectory, { withFileTypes: true });
      if (entries.length === 0) return '(empty directory)';
      return entries
        .slice(0, limit)
        .map((e) => `${e.isDirectory() ? 'dir ' : 'file'} ${e.name}`)
        .join('\n');
    },
  });
}

/** `write_note`: writes a note under `.openwork/<folder>/`, after an approval card that says `reason`. */
export function writeNoteTool(folder: string, reason: string) {
  return defineTool({
    name: 'write_note',
    description: `Writes a note file under .openwork/${folder}/ (asks first).`,
    parameters: z.object({ name: z.string().regex(/^[\w.-]+$/), text: z.string() }),
    authorize: ({ name }, ctx) => ({
      kind: 'card',
      card: {
        toolName: 'write_note',
        kind: 'approval',
        summary: `write .openwork/${folder}/${name}`,
        path: join(ctx.workingDirectory, '.openwork', folder, name),
        reason,
        environmentId: 'local',
        grantKey: 'write_note',
      },
    }),
    execute: async ({ name, text }, ctx) => {
      const dir = join(ctx.workingDirectory, '.openwork', folder);
      await mkdir(dir, { recursive: true });
      await writeFile(join(dir, name), text);
      return `wrote .openwork/${folder}/${name} (${text.length} characters)`;
    },
  });
}
