/**
 * @module services/tools/glob
 * `glob`: files whose path matches a glob pattern (picomatch), newest first, at most 100, in 30 s.
 * The pattern is matched in a worker thread with a deadline (`path-matcher.ts`), never on the main
 * thread: a backtracking pattern costs the call a timeout, not the host its event loop.
 */
import { stat } from 'node:fs/promises';
import { z } from 'zod';
import { boundResultText, spillPath } from './output.js';
import { matchPaths, pathPattern } from './path-matcher.js';
import { callPolicy, invalidArguments, type SandboxedTool } from './sandboxed.js';
import { failedResult } from '../../protocol/tool-result.js';
import { displayPath, searchRoot, SEARCH_TIMEOUT_MS, skippedNote, stoppedNote } from './search-common.js';
import type { ToolRuntime } from './tool-runtime.js';
import { defineWorkspaceTool } from './workspace-tool.js';
import { walk, type WalkState } from './walk.js';

export const GLOB_MAX_RESULTS = 100;

/** What the model reads when a pattern (glob's, or grep's include) ran out of time. */
export function globTimeoutText(timeoutMs: number, pattern: string): string {
  return `matching the pattern ${JSON.stringify(pattern)} stopped after ${timeoutMs / 1000} s: it is too slow on these file names (nested extglobs such as +(+(a|aa)) or many stars backtrack on long names). Simplify the pattern or narrow the path.`;
}

const baseParameters = {
  pattern: z.string().min(1).describe('A glob such as "**/*.ts" or "src/**/index.{js,ts}", relative to path. Without a "/", it matches file names at any depth.'),
  path: z.string().optional().describe('The directory to search (default: the workspace root).'),
};

const DESCRIPTION = [
  `Finds files by a glob pattern and returns up to ${GLOB_MAX_RESULTS} paths, newest first.`,
  'Honours .gitignore and skips .git.',
].join(' ');

export function globTool(runtime: ToolRuntime): SandboxedTool {
  return defineWorkspaceTool(runtime, {
    name: 'glob',
    description: DESCRIPTION,
    parameters: baseParameters,
    access: 'read',
    async execute(args, ctx) {
      const { pattern, path } = args;
      const compiled = pathPattern(pattern);
      if (!compiled.ok) return invalidArguments(`pattern: ${compiled.message}`);
      const policy = callPolicy(runtime, ctx);
      const root = await searchRoot(runtime, ctx, policy, path);
      if (!root.ok) return root.result;
      if (!root.isDirectory) return failedResult('execution_failed', `${root.path} is not a directory.`);
      const state: WalkState = { skipped: 0, stopped: null };
      const started = Date.now();
      const files: Array<{ path: string; relative: string; real: string }> = [];
      for await (const entry of walk(root.path, { policy, signal: ctx.signal, deadline: started + SEARCH_TIMEOUT_MS, now: Date.now }, state)) {
        if (!entry.isDirectory) files.push(entry);
      }
      if (state.stopped === 'aborted' || ctx.signal.aborted) throw ctx.signal.reason ?? new Error('cancelled');
      // The pattern's own budget starts with its matching: a long walk does not eat into it.
      const outcome = await matchPaths(compiled, files.map((f) => f.relative), { signal: ctx.signal, deadline: Date.now() + runtime.grepTimeoutMs });
      if (outcome.kind === 'aborted') throw ctx.signal.reason ?? new Error('cancelled');
      if (outcome.kind === 'deadline') {
        const message = globTimeoutText(runtime.grepTimeoutMs, pattern);
        return failedResult('timeout', message, { message });
      }
      if (outcome.kind === 'failed') return failedResult('execution_failed', `glob could not match ${JSON.stringify(pattern)}: ${outcome.message}`);
      const found: Array<{ path: string; mtime: number }> = [];
      for (const [i, file] of files.entries()) {
        if (!outcome.matched[i]) continue;
        try {
          found.push({ path: file.path, mtime: (await stat(file.real)).mtimeMs });
        } catch {
          // Gone since the walk saw it.
        }
      }
      found.sort((a, b) => b.mtime - a.mtime || (a.path < b.path ? -1 : 1));
      const shown = found.slice(0, GLOB_MAX_RESULTS).map((f) => displayPath(policy, f.path));
      const more = found.length > GLOB_MAX_RESULTS ? `\n(showing ${GLOB_MAX_RESULTS} of ${found.length} matches, newest first; narrow the pattern)` : '';
      const notes = more + skippedNote(state.skipped) + stoppedNote(state.stopped);
      const text = shown.length === 0 ? `No files match ${JSON.stringify(pattern)} in ${displayPath(policy, root.path)}.${notes}` : `${shown.join('\n')}${notes}`;
      return boundResultText(text, spillPath(runtime.spillRoot, ctx.sessionId, ctx.toolCallId), runtime.spill);
    },
  });
}
