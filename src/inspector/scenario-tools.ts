/**
 * @module inspector/scenario-tools
 * The tools of the inspector's scripted scenario: one that runs without asking, one that reports
 * progress while it runs, and one that needs an approval card. All of them are real: they read the
 * working directory, take time, and write a file under `.openwork/inspector/`.
 */
import { listDirectoryTool, writeNoteTool } from '../cli/example-tools.js';
import { sleep } from '../services/abortable.js';
import { z } from 'zod';
import { defineTool, type AnyTool } from '../services/tools/define.js';

export interface ScenarioToolOptions {
  /** Multiplies every wait (default 1). */
  timeScale?: number;
}

/** The scenario's tools: `list_directory`, `run_checks` (progress) and `write_note` (asks first). */
export function scenarioTools(options: ScenarioToolOptions = {}): AnyTool[] {
  const scale = options.timeScale ?? 1;

  const listDirectory = listDirectoryTool(30);

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

  const writeNote = writeNoteTool('inspector', 'the scenario wants to leave a note of the tour');

  return [listDirectory, runChecks, writeNote];
}
