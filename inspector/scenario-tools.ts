/**
 * @module inspector/scenario-tools
 * The tools of the inspector's scripted scenario: one that runs without asking, one that reports
 * progress while it runs, and one that needs an approval card. All of them are real: they read the
 * working directory, take time, and write a file under `.openwork/inspector/`.
 */
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { sleep } from '../src/services/abortable.js';
import { join } from 'node:path';
import { z } from 'zod';
import { defineTool, type AnyTool } from '../src/services/tools/define.js';

export interface ScenarioToolOptions {
  /** Multiplies every wait (default 1). */
  timeScale?: number;
}


/** The scenario's tools: `list_directory`, `run_checks` (progress) and `write_note` (asks first). */
export function scenarioTools(options: ScenarioToolOptions = {}): AnyTool[] {
  const scale = options.timeScale ?? 1;

  const listDirectory = defineTool({
    name: 'list_directory',
    description: 'Lists the entries of the working directory.',
    parameters: z.object({}),
    execute: async (_args, ctx) => {
      const entries = await readdir(ctx.workingDirectory, { withFileTypes: true });
      if (entries.length === 0) return '(empty directory)';
      return entries
        .slice(0, 30)
        .map((e) => `${e.isDirectory() ? 'dir ' : 'file'} ${e.name}`)
        .join('\n');
    },
  });

  const runChecks = defineTool({
    name: 'run_checks',
    description: 'Runs the project checks one by one, reporting progress.',
    parameters: z.object({ count: z.number().int().min(1).max(20).default(5) }),
    execute: async ({ count }, ctx) => {
      for (let i = 1; i <= count; i += 1) {
        await sleep(300 * scale, ctx.signal);
        ctx.progress({ kind: 'stdout', chunk: `check ${i}/${count}: ok\n` });
      }
      return `${count} checks passed`;
    },
  });

  const writeNote = defineTool({
    name: 'write_note',
    description: 'Writes a note file under .openwork/inspector/ (asks first).',
    parameters: z.object({ name: z.string().regex(/^[\w.-]+$/), text: z.string() }),
    authorize: ({ name }, ctx) => ({
      kind: 'card',
      card: {
        toolName: 'write_note',
        kind: 'approval',
        summary: `write .openwork/inspector/${name}`,
        path: join(ctx.workingDirectory, '.openwork', 'inspector', name),
        reason: 'the scenario wants to leave a note of the tour',
        environmentId: 'local',
        grantKey: 'write_note',
      },
    }),
    execute: async ({ name, text }, ctx) => {
      const dir = join(ctx.workingDirectory, '.openwork', 'inspector');
      await mkdir(dir, { recursive: true });
      await writeFile(join(dir, name), text);
      return `wrote .openwork/inspector/${name} (${text.length} characters)`;
    },
  });

  return [listDirectory, runChecks, writeNote];
}
