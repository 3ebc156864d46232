/**
 * @module services/tools/read
 * `read`: a text file's lines with their numbers. At most 2,000 lines, 31,488 bytes of content
 * (ending at the last full line) and 2,000 characters per line; never spills. Reading records the
 * file's hash for read-before-edit.
 */
import { z } from 'zod';
import { sha256 } from './file-change.js';
import { FOOTER_RESERVE_BYTES, MAX_RESULT_BYTES } from './output.js';
import { callPolicy, fence, resolvePath, type SandboxedTool } from './sandboxed.js';
import { failedResult } from '../../protocol/tool-result.js';
import type { ToolRuntime } from './tool-runtime.js';
import { defineWorkspaceTool } from './workspace-tool.js';
import { openForRead, readJudged } from './verified-open.js';

export const READ_MAX_LINES = 2_000;
export const READ_MAX_CONTENT_BYTES = MAX_RESULT_BYTES - FOOTER_RESERVE_BYTES;
export const READ_MAX_LINE_CHARS = 2_000;
/** Larger files are refused: use bash (`head`, `sed -n`) or grep on them. */
export const READ_MAX_FILE_BYTES = 64 * 1024 * 1024;

const baseParameters = {
  path: z.string().min(1).describe('The file: absolute, or relative to the workspace root.'),
  offset: z.number().int().min(1).optional().describe('The first line to read (1-based; default 1).'),
  limit: z.number().int().min(1).max(READ_MAX_LINES).optional().describe(`How many lines to read (default and maximum ${READ_MAX_LINES}).`),
};

const DESCRIPTION = [
  'Reads a text file and returns its lines, each prefixed with its line number and a tab.',
  `At most ${READ_MAX_LINES} lines and about 31 KB per call; use offset and limit to page through longer files (the footer says where to continue).`,
  'Any file outside the credential directories can be read. Reading a file is required before editing or overwriting it.',
].join(' ');

function isBinary(buf: Buffer): boolean {
  return buf.subarray(0, 8192).includes(0);
}

export function readTool(runtime: ToolRuntime): SandboxedTool {
  return defineWorkspaceTool(runtime, {
    name: 'read',
    description: DESCRIPTION,
    parameters: baseParameters,
    access: 'read',
    async execute(args, ctx) {
      const { path: raw, offset = 1, limit = READ_MAX_LINES } = args;
      const policy = callPolicy(runtime, ctx);
      const resolved = resolvePath(runtime, policy, raw);
      if (!resolved.ok) return resolved.result;
      const path = resolved.path;
      const denied = fence(runtime, ctx, policy, path, 'read');
      if (denied) return denied;
      // Opened first, then judged (verified-open.ts): what is read is the file the fence allowed.
      const opened = await openForRead({ runtime, ctx, policy }, path);
      if (!opened.ok) return opened.result;
      let buf: Buffer;
      try {
        const { info } = opened;
        if (info.isDirectory()) return failedResult('execution_failed', `${path} is a directory; use list to see what it contains.`);
        if (!info.isFile()) return failedResult('execution_failed', `${path} is not a regular file; use bash to read it.`);
        if (info.size > READ_MAX_FILE_BYTES) {
          return failedResult('execution_failed', `${path} is ${info.size} bytes, larger than read handles (${READ_MAX_FILE_BYTES} bytes); use grep, or bash with head/tail/sed, to look at parts of it.`);
        }
        buf = await readJudged(opened.handle, info.size, READ_MAX_FILE_BYTES);
      } finally {
        await opened.handle.close().catch(() => undefined);
      }
      runtime.observations.record(ctx.sessionId, path, sha256(buf));
      if (isBinary(buf)) return `${path} is a binary file (${buf.length} bytes); it was not read.`;
      const text = buf.toString('utf8');
      if (text === '') return `${path} is empty.`;
      const lines = text.split('\n');
      if (lines[lines.length - 1] === '') lines.pop();
      const total = lines.length;
      if (offset > total) return failedResult('execution_failed', `offset ${offset} is past the end of ${path} (${total} lines).`);
      const out: string[] = [];
      let bytes = 0;
      let last = offset - 1;
      for (let i = offset - 1; i < total && out.length < limit; i += 1) {
        let line = lines[i]!;
        if (line.length > READ_MAX_LINE_CHARS) line = `${line.slice(0, READ_MAX_LINE_CHARS)}... (line truncated to ${READ_MAX_LINE_CHARS} characters)`;
        const rendered = `${i + 1}\t${line}`;
        const size = Buffer.byteLength(rendered) + 1;
        if (bytes + size > READ_MAX_CONTENT_BYTES) break;
        out.push(rendered);
        bytes += size;
        last = i + 1;
      }
      if (out.length === 0) {
        return failedResult('execution_failed', `line ${offset} of ${path} does not fit in one result; use grep or bash to look at it.`);
      }
      const footer = last < total ? `\n(lines ${offset}-${last} of ${total}; continue with offset=${last + 1})` : `\n(lines ${offset}-${last} of ${total}; end of file)`;
      return `${out.join('\n')}${footer}`;
    },
  });
}
