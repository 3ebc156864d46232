/**
 * @module services/tools/glob
 * `glob`: files whose path matches a glob pattern (picomatch), newest first, at most 100, in 30 s.
 */
import { stat } from 'node:fs/promises';
import picomatch from 'picomatch';
import { z } from 'zod';
import { escalationParameters } from '../permissions/escalation.js';
import { denialRuleText } from '../../protocol/model-texts.js';
import { defineTool } from './define.js';
import { boundResultText, spillPath } from './output.js';
import { callPolicy, type SandboxedTool } from './sandboxed.js';
import { failedResult } from '../../protocol/tool-result.js';
import { displayPath, searchRoot, SEARCH_TIMEOUT_MS, skippedNote, stoppedNote } from './search-common.js';
import type { ToolRuntime } from './tool-runtime.js';
import { walk, type WalkState } from './walk.js';

export const GLOB_MAX_RESULTS = 100;

const baseParameters = {
  pattern: z.string().min(1).describe('A glob such as "**/*.ts" or "src/**/index.{js,ts}", relative to path. Without a "/", it matches file names at any depth.'),
  path: z.string().optional().describe('The directory to search (default: the workspace root).'),
};

const DESCRIPTION = [
  `Finds files by a glob pattern and returns up to ${GLOB_MAX_RESULTS} paths, newest first.`,
  'Honours .gitignore and skips .git.',
].join(' ');

export function globTool(runtime: ToolRuntime): SandboxedTool {
  const parameters = z.object(runtime.launcher ? { ...baseParameters, ...escalationParameters } : baseParameters);
  const tool = defineTool({
    name: 'glob',
    // The denial rule names sandboxPermissions only while the sandbox works (issue 20.2).
    description: `${DESCRIPTION} ${denialRuleText(runtime.launcher !== null)}`,
    parameters,
    async execute(args, ctx) {
      const { pattern, path } = args as z.infer<z.ZodObject<typeof baseParameters>>;
      const matches = picomatch(pattern, { dot: true, basename: !pattern.includes('/') });
      const policy = callPolicy(runtime, ctx);
      const root = await searchRoot(runtime, ctx, policy, path);
      if (!root.ok) return root.result;
      if (!root.isDirectory) return failedResult('execution_failed', `${root.path} is not a directory.`);
      const state: WalkState = { skipped: 0, stopped: null };
      const found: Array<{ path: string; mtime: number }> = [];
      for await (const entry of walk(root.path, { policy, signal: ctx.signal, deadline: Date.now() + SEARCH_TIMEOUT_MS, now: Date.now }, state)) {
        if (entry.isDirectory || !matches(entry.relative)) continue;
        try {
          found.push({ path: entry.path, mtime: (await stat(entry.real)).mtimeMs });
        } catch {
          // Gone since the walk saw it.
        }
      }
      if (state.stopped === 'aborted' || ctx.signal.aborted) throw ctx.signal.reason ?? new Error('cancelled');
      found.sort((a, b) => b.mtime - a.mtime || (a.path < b.path ? -1 : 1));
      const shown = found.slice(0, GLOB_MAX_RESULTS).map((f) => displayPath(policy, f.path));
      const more = found.length > GLOB_MAX_RESULTS ? `\n(showing ${GLOB_MAX_RESULTS} of ${found.length} matches, newest first; narrow the pattern)` : '';
      const notes = more + skippedNote(state.skipped) + stoppedNote(state.stopped);
      const text = shown.length === 0 ? `No files match ${JSON.stringify(pattern)} in ${displayPath(policy, root.path)}.${notes}` : `${shown.join('\n')}${notes}`;
      return boundResultText(text, spillPath(runtime.spillRoot, ctx.sessionId, ctx.toolCallId), runtime.spill);
    },
  });
  return Object.assign(tool, {
    sandboxed: {
      actor: 'file_tool' as const,
      targets: (args: unknown) => [{ path: (args as { path?: string }).path ?? '.', access: 'read' as const }],
    },
  });
}
