/**
 * @module testing/tools
 * Small tools for tests and the demo: they exercise every path of the tool-call lifecycle
 * (success, failure, a card, a slow run that must be cancelled, progress).
 */
import { appendFile } from 'node:fs/promises';
import { z } from 'zod';
import { defineTool, type Tool } from '../services/tools/define.js';

/** Returns its text; never asks. */
export const echoTool = defineTool({
  name: 'echo',
  description: 'Returns the given text unchanged.',
  parameters: z.object({ text: z.string() }),
  execute: ({ text }) => text,
});

/** Always fails with the given message, as a tool error (the loop continues). */
export const failTool = defineTool({
  name: 'fail',
  description: 'Fails with the given message.',
  parameters: z.object({ message: z.string() }),
  execute: ({ message }) => {
    throw new Error(message);
  },
});

/** Needs an approval card for every call; grants are keyed by `scope`. */
export const approvalTool = defineTool({
  name: 'guarded',
  description: 'Does something that needs the user\'s approval.',
  parameters: z.object({ action: z.string(), scope: z.string().default('default') }),
  authorize: ({ action, scope }) => ({
    kind: 'card',
    card: {
      toolName: 'guarded',
      kind: 'approval',
      summary: `run guarded action ${action}`,
      command: action,
      reason: 'the guarded tool always asks',
      environmentId: 'local',
      grantKey: `guarded:${scope}`,
    },
  }),
  execute: ({ action }) => `did ${action}`,
});

/** Runs until cancelled (or for `ms`), reporting progress every 10 ms. */
export const slowTool = defineTool({
  name: 'slow',
  description: 'Waits for the given time, reporting progress.',
  parameters: z.object({ ms: z.number().int().min(0).default(60_000) }),
  execute: ({ ms }, ctx) =>
    new Promise<string>((resolve, reject) => {
      let elapsed = 0;
      const timer = setInterval(() => {
        elapsed += 10;
        ctx.progress({ kind: 'stdout', chunk: `tick ${elapsed}\n` });
        if (elapsed >= ms) {
          clearInterval(timer);
          resolve(`waited ${ms} ms`);
        }
      }, 10);
      ctx.signal.addEventListener(
        'abort',
        () => {
          clearInterval(timer);
          reject(ctx.signal.reason);
        },
        { once: true },
      );
    }),
});

/** Appends a line to a journal file: a side effect that must never happen twice. */
export function journalTool(path: string): Tool<z.ZodObject<{ entry: z.ZodString }>> {
  return defineTool({
    name: 'journal',
    description: 'Appends an entry to the journal.',
    parameters: z.object({ entry: z.string() }),
    execute: async ({ entry }, ctx) => {
      await appendFile(path, `${ctx.providerCallId}\t${entry}\n`);
      return `recorded ${entry}`;
    },
  });
}
