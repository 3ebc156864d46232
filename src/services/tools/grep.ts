/**
 * @module services/tools/grep
 * `grep`: searches file contents with a regular expression (JavaScript syntax) below a directory,
 * honouring `.gitignore` and skipping binary files and what the policy does not let the file tools
 * read. At most 250 matching lines (50 per file, 2,000 bytes each) from 250 files, in 30 s.
 * The regex runs in a worker thread (`grep-matcher.ts`) that is terminated at the deadline or on
 * cancel, so a catastrophic pattern costs one call a timeout, never the host its event loop.
 */
import { z } from 'zod';
import { type ToolResult } from './define.js';
import { globTimeoutText } from './glob.js';
import { LineMatcher } from './grep-matcher.js';
import { matchPaths, pathPattern } from './path-matcher.js';
import { boundResultText, spillPath } from './output.js';
import { callPolicy, invalidArguments, type SandboxedTool } from './sandboxed.js';
import { failedResult } from '../../protocol/tool-result.js';
import { displayPath, searchRoot, skippedNote, stoppedNote } from './search-common.js';
import type { ToolRuntime } from './tool-runtime.js';
import { defineWorkspaceTool } from './workspace-tool.js';
import { openForRead, readJudged } from './verified-open.js';
import { walk, type WalkState } from './walk.js';

export const GREP_MAX_LINES = 250;
export const GREP_MAX_PER_FILE = 50;
export const GREP_MAX_LINE_BYTES = 2_000;
export const GREP_MAX_FILES = 250;
/** Files larger than this are not searched (they are counted in the footer). */
export const GREP_MAX_FILE_BYTES = 16 * 1024 * 1024;

const baseParameters = {
  pattern: z.string().min(1).describe('A regular expression (JavaScript syntax), matched against each line.'),
  path: z.string().optional().describe('A directory or file to search (default: the workspace root).'),
  include: z.string().optional().describe('Only files whose path matches this glob, e.g. "*.ts" or "src/**/*.{ts,tsx}".'),
  ignoreCase: z.boolean().optional().describe('Match case-insensitively.'),
};

const DESCRIPTION = [
  'Searches file contents for a regular expression and returns matching lines as path:line: text.',
  'Honours .gitignore, skips .git and binary files. At most 250 lines (50 per file) from 250 files.',
].join(' ');

/** What the model reads when matching ran out of time: the pattern, not the files, is the likely cause. */
export function grepTimeoutText(timeoutMs: number, file: string, partial: boolean): string {
  const found = partial ? '; the matches found before the stop are listed above' : '';
  return `grep stopped after ${timeoutMs / 1000} s while matching ${file}: the pattern is too slow on this input (nested quantifiers such as (a+)+ backtrack exponentially on long lines). Simplify the pattern or narrow the path${found}.`;
}

function clip(line: string): string {
  const buf = Buffer.from(line, 'utf8');
  if (buf.length <= GREP_MAX_LINE_BYTES) return line;
  let cut = GREP_MAX_LINE_BYTES;
  while (cut > 0 && (buf[cut]! & 0xc0) === 0x80) cut -= 1;
  return `${buf.subarray(0, cut).toString('utf8')}... (line truncated)`;
}

export function grepTool(runtime: ToolRuntime): SandboxedTool {
  return defineWorkspaceTool(runtime, {
    name: 'grep',
    description: DESCRIPTION,
    parameters: baseParameters,
    access: 'read',
    async execute(args, ctx) {
      const { pattern, path, include, ignoreCase } = args;
      let regex: RegExp;
      try {
        regex = new RegExp(pattern, ignoreCase ? 'iu' : 'u');
      } catch (error) {
        return invalidArguments(`pattern: ${(error as Error).message}`);
      }
      const includePattern = include ? pathPattern(include) : null;
      if (includePattern && !includePattern.ok) return invalidArguments(`include: ${includePattern.message}`);
      const policy = callPolicy(runtime, ctx);
      const root = await searchRoot(runtime, ctx, policy, path);
      if (!root.ok) return root.result;
      const state: WalkState = { skipped: 0, stopped: null };
      const timeoutMs = runtime.grepTimeoutMs;
      const deadline = Date.now() + timeoutMs;
      const files: Array<{ path: string; relative: string }> = [];
      if (root.isDirectory) {
        for await (const entry of walk(root.path, { policy, signal: ctx.signal, deadline, now: Date.now }, state)) {
          if (!entry.isDirectory) files.push({ path: entry.real, relative: entry.relative });
        }
      } else {
        files.push({ path: root.path, relative: root.path.split('/').pop()! });
      }
      if (state.stopped === 'aborted' || ctx.signal.aborted) throw ctx.signal.reason ?? new Error('cancelled');
      if (includePattern?.ok) {
        // Off the main thread, like the pattern itself: a backtracking glob costs this call a timeout.
        const included = await matchPaths(includePattern, files.map((f) => f.relative), { signal: ctx.signal, deadline });
        if (included.kind === 'aborted') throw ctx.signal.reason ?? new Error('cancelled');
        if (included.kind === 'deadline') {
          const message = globTimeoutText(timeoutMs, include!);
          return failedResult('timeout', message, { message });
        }
        if (included.kind === 'failed') return failedResult('execution_failed', `grep could not match include ${JSON.stringify(include)}: ${included.message}`);
        const kept = files.filter((_, i) => included.matched[i]);
        files.length = 0;
        files.push(...kept);
      }
      const out: string[] = [];
      let matchedFiles = 0;
      let tooLarge = 0;
      let truncated = false;
      /** The file whose matching ran into the deadline (the worker was terminated there). */
      let stuckIn: string | null = null;
      const matcher = new LineMatcher(regex.source, regex.flags);
      try {
        for (const file of files) {
          if (ctx.signal.aborted) throw ctx.signal.reason ?? new Error('cancelled');
          if (Date.now() > deadline) {
            state.stopped = 'deadline';
            break;
          }
          // Opened first, then judged (verified-open.ts): a file swapped for a link out is skipped.
          const opened = await openForRead({ runtime, ctx, policy }, file.path);
          if (!opened.ok) continue;
          let buf: Buffer;
          try {
            if (!opened.info.isFile()) continue;
            if (opened.info.size > GREP_MAX_FILE_BYTES) {
              tooLarge += 1;
              continue;
            }
            buf = await readJudged(opened.handle, opened.info.size, GREP_MAX_FILE_BYTES);
          } catch {
            continue;
          } finally {
            await opened.handle.close().catch(() => undefined);
          }
          if (buf.subarray(0, 8192).includes(0)) continue;
          if (matchedFiles >= GREP_MAX_FILES) {
            // Only a further matching file would be cut; ask for one match to know.
            const probe = await matcher.match(buf, 0, { signal: ctx.signal, deadline });
            if (probe.kind === 'matched' && probe.more) {
              truncated = true;
              break;
            }
            if (probe.kind === 'matched') continue;
            if (probe.kind === 'aborted') throw ctx.signal.reason ?? new Error('cancelled');
            if (probe.kind === 'deadline') stuckIn = displayPath(policy, file.path);
            else return failedResult('execution_failed', `grep could not match ${displayPath(policy, file.path)}: ${probe.message}`);
            break;
          }
          const limit = Math.min(GREP_MAX_PER_FILE, GREP_MAX_LINES - out.length);
          const outcome = await matcher.match(buf, limit, { signal: ctx.signal, deadline });
          if (outcome.kind === 'aborted') throw ctx.signal.reason ?? new Error('cancelled');
          if (outcome.kind === 'deadline') {
            stuckIn = displayPath(policy, file.path);
            break;
          }
          if (outcome.kind === 'failed') return failedResult('execution_failed', `grep could not match ${displayPath(policy, file.path)}: ${outcome.message}`);
          if (outcome.matches.length > 0) matchedFiles += 1;
          for (const match of outcome.matches) out.push(`${displayPath(policy, file.path)}:${match.line}: ${clip(match.text.replace(/\r$/, ''))}`);
          if (outcome.more) truncated = true;
          if (out.length >= GREP_MAX_LINES) {
            truncated = true;
            break;
          }
        }
      } finally {
        matcher.close();
      }
      const notes =
        (truncated ? `\n(results truncated: at most ${GREP_MAX_LINES} lines, ${GREP_MAX_PER_FILE} per file, from ${GREP_MAX_FILES} files; narrow the pattern or the path)` : '') +
        (tooLarge > 0 ? `\n(${tooLarge} file${tooLarge === 1 ? '' : 's'} larger than ${GREP_MAX_FILE_BYTES} bytes not searched)` : '') +
        skippedNote(state.skipped) +
        stoppedNote(state.stopped);
      const spillTo = spillPath(runtime.spillRoot, ctx.sessionId, ctx.toolCallId);
      if (stuckIn !== null) {
        const message = grepTimeoutText(timeoutMs, stuckIn, out.length > 0);
        const text = boundResultText(`${out.length > 0 ? `${out.join('\n')}\n` : ''}${message}`, spillTo, runtime.spill);
        return failedResult('timeout', text, { message });
      }
      const text = out.length === 0 ? `No matches for ${JSON.stringify(pattern)} in ${displayPath(policy, root.path)}.${notes}` : `${out.join('\n')}${notes}`;
      return boundResultText(text, spillTo, runtime.spill);
    },
  });
}
