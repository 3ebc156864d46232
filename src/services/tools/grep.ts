/**
 * @module services/tools/grep
 * `grep`: searches file contents with a regular expression (JavaScript syntax) below a directory,
 * honouring `.gitignore` and skipping binary files and what the policy does not let the file tools
 * read. At most 250 matching lines (50 per file, 2,000 bytes each) from 250 files, in 30 s.
 */
import picomatch from 'picomatch';
import { z } from 'zod';
import { escalationParameters } from '../permissions/escalation.js';
import { denialRuleText } from '../permissions/texts.js';
import { defineTool } from './define.js';
import { boundResultText, spillPath } from './output.js';
import { callPolicy, invalidArguments, type SandboxedTool } from './sandboxed.js';
import { displayPath, searchRoot, SEARCH_TIMEOUT_MS, skippedNote, stoppedNote } from './search-common.js';
import type { ToolRuntime } from './tool-runtime.js';
import { openForRead } from './verified-open.js';
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

function clip(line: string): string {
  const buf = Buffer.from(line, 'utf8');
  if (buf.length <= GREP_MAX_LINE_BYTES) return line;
  let cut = GREP_MAX_LINE_BYTES;
  while (cut > 0 && (buf[cut]! & 0xc0) === 0x80) cut -= 1;
  return `${buf.subarray(0, cut).toString('utf8')}... (line truncated)`;
}

export function grepTool(runtime: ToolRuntime): SandboxedTool {
  const parameters = z.object(runtime.launcher ? { ...baseParameters, ...escalationParameters } : baseParameters);
  const tool = defineTool({
    name: 'grep',
    // The denial rule names sandboxPermissions only while the sandbox works (issue 20.2).
    description: `${DESCRIPTION} ${denialRuleText(runtime.launcher !== null)}`,
    parameters,
    async execute(args, ctx) {
      const { pattern, path, include, ignoreCase } = args as z.infer<z.ZodObject<typeof baseParameters>>;
      let regex: RegExp;
      try {
        regex = new RegExp(pattern, ignoreCase ? 'iu' : 'u');
      } catch (error) {
        return invalidArguments(`pattern: ${(error as Error).message}`);
      }
      const matchesInclude = include ? picomatch(include, { dot: true, basename: !include.includes('/') }) : null;
      const policy = callPolicy(runtime, ctx);
      const root = await searchRoot(runtime, ctx, policy, path);
      if (!root.ok) return root.result;
      const state: WalkState = { skipped: 0, stopped: null };
      const deadline = Date.now() + SEARCH_TIMEOUT_MS;
      const files: Array<{ path: string; relative: string }> = [];
      if (root.isDirectory) {
        for await (const entry of walk(root.path, { policy, signal: ctx.signal, deadline, now: Date.now }, state)) {
          if (!entry.isDirectory) files.push({ path: entry.real, relative: entry.relative });
        }
      } else {
        files.push({ path: root.path, relative: root.path.split('/').pop()! });
      }
      if (state.stopped === 'aborted' || ctx.signal.aborted) throw ctx.signal.reason ?? new Error('cancelled');
      const out: string[] = [];
      let matchedFiles = 0;
      let tooLarge = 0;
      let truncated = false;
      for (const file of files) {
        if (ctx.signal.aborted) throw ctx.signal.reason ?? new Error('cancelled');
        if (Date.now() > deadline) {
          state.stopped = 'deadline';
          break;
        }
        if (matchesInclude && !matchesInclude(file.relative)) continue;
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
          buf = await opened.handle.readFile();
        } catch {
          continue;
        } finally {
          await opened.handle.close().catch(() => undefined);
        }
        if (buf.subarray(0, 8192).includes(0)) continue;
        const lines = buf.toString('utf8').split('\n');
        let inFile = 0;
        for (let i = 0; i < lines.length; i += 1) {
          if (!regex.test(lines[i]!)) continue;
          if (inFile === 0) {
            if (matchedFiles >= GREP_MAX_FILES) {
              truncated = true;
              break;
            }
            matchedFiles += 1;
          }
          if (inFile >= GREP_MAX_PER_FILE || out.length >= GREP_MAX_LINES) {
            truncated = true;
            break;
          }
          out.push(`${displayPath(policy, file.path)}:${i + 1}: ${clip(lines[i]!.replace(/\r$/, ''))}`);
          inFile += 1;
        }
        if (out.length >= GREP_MAX_LINES || (truncated && matchedFiles >= GREP_MAX_FILES)) {
          truncated = true;
          break;
        }
      }
      const notes =
        (truncated ? `\n(results truncated: at most ${GREP_MAX_LINES} lines, ${GREP_MAX_PER_FILE} per file, from ${GREP_MAX_FILES} files; narrow the pattern or the path)` : '') +
        (tooLarge > 0 ? `\n(${tooLarge} file${tooLarge === 1 ? '' : 's'} larger than ${GREP_MAX_FILE_BYTES} bytes not searched)` : '') +
        skippedNote(state.skipped) +
        stoppedNote(state.stopped);
      const text = out.length === 0 ? `No matches for ${JSON.stringify(pattern)} in ${displayPath(policy, root.path)}.${notes}` : `${out.join('\n')}${notes}`;
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
