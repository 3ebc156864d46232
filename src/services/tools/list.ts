/**
 * @module services/tools/list
 * `list`: the entries of a directory (optionally recursive, breadth-first), directories marked
 * with a trailing `/`. Default 200 entries, at most 2,000.
 */
import { z } from 'zod';
import { boundResultText, spillPath } from './output.js';
import { callPolicy, type SandboxedTool } from './sandboxed.js';
import { failedResult } from '../../protocol/tool-result.js';
import { displayPath, searchRoot, SEARCH_TIMEOUT_MS, skippedNote, stoppedNote } from './search-common.js';
import type { ToolRuntime } from './tool-runtime.js';
import { defineWorkspaceTool } from './workspace-tool.js';
import { walk, type WalkState } from './walk.js';

export const LIST_DEFAULT_LIMIT = 200;
export const LIST_MAX_LIMIT = 2_000;

const baseParameters = {
  path: z.string().optional().describe('The directory (default: the workspace root).'),
  recursive: z.boolean().optional().describe('Also list everything below, breadth-first (honours .gitignore, skips .git).'),
  limit: z.number().int().min(1).max(LIST_MAX_LIMIT).optional().describe(`At most this many entries (default ${LIST_DEFAULT_LIMIT}).`),
};

const DESCRIPTION = 'Lists the entries of a directory; directories end with "/".';

export function listTool(runtime: ToolRuntime): SandboxedTool {
  return defineWorkspaceTool(runtime, {
    name: 'list',
    description: DESCRIPTION,
    parameters: baseParameters,
    access: 'read',
    async execute(args, ctx) {
      const { path, recursive = false, limit = LIST_DEFAULT_LIMIT } = args;
      const policy = callPolicy(runtime, ctx);
      const root = await searchRoot(runtime, ctx, policy, path);
      if (!root.ok) return root.result;
      if (!root.isDirectory) return failedResult('execution_failed', `${root.path} is not a directory; use read for files.`);
      const state: WalkState = { skipped: 0, stopped: null };
      const lines: string[] = [];
      let more = false;
      for await (const entry of walk(root.path, { policy, signal: ctx.signal, deadline: Date.now() + SEARCH_TIMEOUT_MS, now: Date.now, recursive, showGit: true }, state)) {
        if (lines.length >= limit) {
          more = true;
          break;
        }
        lines.push(entry.isDirectory ? `${entry.relative}/` : entry.relative);
      }
      if (state.stopped === 'aborted' || ctx.signal.aborted) throw ctx.signal.reason ?? new Error('cancelled');
      const header = `${displayPath(policy, root.path)}:`;
      const notes = (more ? `\n(first ${limit} entries shown; raise limit (at most ${LIST_MAX_LIMIT}) or list a subdirectory)` : '') + skippedNote(state.skipped) + stoppedNote(state.stopped);
      const text = lines.length === 0 ? `${header}\n(empty)${notes}` : `${header}\n${lines.join('\n')}${notes}`;
      return boundResultText(text, spillPath(runtime.spillRoot, ctx.sessionId, ctx.toolCallId), runtime.spill);
    },
  });
}
