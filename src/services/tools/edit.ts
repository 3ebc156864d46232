/**
 * @module services/tools/edit
 * `edit`: replaces an exact string in an existing text file. The file must have been read in this
 * session and not changed since; the string must occur once (or `replaceAll`).
 */
import { z } from 'zod';
import { type ToolContext, type ToolResult } from './define.js';
import type { SandboxPolicy } from '../permissions/policy.js';
import { commitWrite, MAX_WRITE_BYTES, withWriteTarget, type WriteTarget } from './file-write.js';
import { invalidArguments, type SandboxedTool } from './sandboxed.js';
import { failedResult } from '../../protocol/tool-result.js';
import type { ToolRuntime } from './tool-runtime.js';
import { defineWorkspaceTool } from './workspace-tool.js';

const baseParameters = {
  path: z.string().min(1).describe('The file: absolute, or relative to the workspace root.'),
  oldString: z.string().describe('The exact text to replace (including whitespace and indentation).'),
  newString: z.string().describe('The text to put in its place.'),
  replaceAll: z.boolean().optional().describe('Replace every occurrence (default: oldString must occur exactly once).'),
};

const DESCRIPTION = [
  'Replaces an exact piece of text in an existing text file (at most 1 MiB).',
  'Read the file first in this session; if it changed since (for example through bash), read it again.',
  'oldString must occur exactly once unless replaceAll is true; include enough surrounding lines to make it unique. Use write to create files.',
].join(' ');

const tooLargeText = (bytes: number) => `the edited file would be ${bytes} bytes, larger than ${MAX_WRITE_BYTES} bytes; nothing was changed.`;

function occurrences(text: string, needle: string): number {
  let count = 0;
  for (let at = text.indexOf(needle); at !== -1; at = text.indexOf(needle, at + needle.length)) count += 1;
  return count;
}

/** The edit itself, on a file opened and judged by `withWriteTarget`. */
async function replaceIn(runtime: ToolRuntime, ctx: ToolContext, policy: SandboxPolicy, target: WriteTarget, oldString: string, newString: string, replaceAll: boolean): Promise<ToolResult> {
  const { path } = target;
  if (target.content === null) return failedResult('execution_failed', `${path} does not exist; use write to create it.`);
  const before = target.content;
  const count = occurrences(before, oldString);
  if (count === 0) return failedResult('execution_failed', `oldString was not found in ${path}.`);
  if (count > 1 && !replaceAll) {
    return failedResult('execution_failed', `oldString occurs ${count} times in ${path}; include more surrounding text to make it unique, or set replaceAll.`);
  }
  // The size is known before the text is built: `replaceAll` of a one-character oldString in a
  // 1 MiB file by a newString of 500 characters built a 500-million-character string (1 GiB of
  // memory, seconds of the main thread) only to refuse it. Lone surrogates can make the real size
  // a few bytes smaller than this sum, so the exact check below stays.
  const replaced = replaceAll ? count : 1;
  const estimated = Buffer.byteLength(before) + replaced * (Buffer.byteLength(newString) - Buffer.byteLength(oldString));
  if (estimated > MAX_WRITE_BYTES) return failedResult('execution_failed', tooLargeText(estimated));
  // split/join, not String.replace: `$&` and friends in newString must stay literal.
  const after = replaceAll ? before.split(oldString).join(newString) : before.replace(oldString, () => newString);
  const size = Buffer.byteLength(after);
  if (size > MAX_WRITE_BYTES) return failedResult('execution_failed', tooLargeText(size));
  return commitWrite(runtime, ctx, policy, target, after, (a) => `Edited ${path}: replaced ${replaceAll ? count : 1} occurrence${(replaceAll ? count : 1) === 1 ? '' : 's'} (+${a.additions} -${a.deletions} lines).`);
}

export function editTool(runtime: ToolRuntime): SandboxedTool {
  return defineWorkspaceTool(runtime, {
    name: 'edit',
    description: DESCRIPTION,
    parameters: baseParameters,
    access: 'write',
    async execute(args, ctx) {
      const { path: raw, oldString, newString, replaceAll = false } = args;
      if (oldString === '') return invalidArguments('oldString must not be empty; use write to create a file');
      if (oldString === newString) return invalidArguments('oldString and newString are the same');
      return withWriteTarget(runtime, ctx, raw, (policy, target) => replaceIn(runtime, ctx, policy, target, oldString, newString, replaceAll));
    },
  });
}
