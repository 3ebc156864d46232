/**
 * @module services/tools/write
 * `write`: creates a file or replaces its whole content (text, at most 1 MiB). Replacing an
 * existing file needs a read of its current content first.
 */
import { z } from 'zod';
import { commitWrite, MAX_WRITE_BYTES, withWriteTarget } from './file-write.js';
import { invalidArguments, type SandboxedTool } from './sandboxed.js';
import type { ToolRuntime } from './tool-runtime.js';
import { defineWorkspaceTool } from './workspace-tool.js';

const baseParameters = {
  path: z.string().min(1).describe('The file: absolute, or relative to the workspace root. Missing parent directories are created.'),
  content: z.string().describe('The complete new content of the file.'),
};

const DESCRIPTION = [
  'Creates a text file, or replaces the whole content of one (at most 1 MiB).',
  'To overwrite an existing file, read it first in this session; if it changed since, read it again. Prefer edit for small changes.',
  'Writes inside the workspace and the temp directories are allowed; protected paths (.git/hooks, ~/.openwork, skill roots) can never be written.',
].join(' ');

export function writeTool(runtime: ToolRuntime): SandboxedTool {
  return defineWorkspaceTool(runtime, {
    name: 'write',
    description: DESCRIPTION,
    parameters: baseParameters,
    access: 'write',
    async execute(args, ctx) {
      const { path: raw, content } = args;
      if (Buffer.byteLength(content) > MAX_WRITE_BYTES) return invalidArguments(`content is larger than ${MAX_WRITE_BYTES} bytes`);
      return withWriteTarget(runtime, ctx, raw, (policy, target) =>
        commitWrite(runtime, ctx, policy, target, content, (a) =>
          a.kind === 'created'
            ? `Created ${target.path} (${Buffer.byteLength(content)} bytes).`
            : `Wrote ${target.path} (${Buffer.byteLength(content)} bytes; +${a.additions} -${a.deletions} lines).`,
        ),
      );
    },
  });
}
