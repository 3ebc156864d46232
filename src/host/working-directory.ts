/**
 * @module host/working-directory
 * `workingDirectory` is optional for hosts whose tools do not touch files (issue 16.3). Such a
 * session is given an empty directory of the runtime's own (`<openworkHome>/no-workspace`) rather
 * than the host process's current directory: World State samples the working directory (its layout,
 * AGENTS.md), and the host's own files have no business in the model's context.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { InputError } from '../errors.js';
import { requireWorkingDirectory } from '../protocol/command-input.js';
import type { AnyTool } from '../services/tools/define.js';
import { isSandboxedTool } from '../services/tools/sandboxed.js';
import { isToolSource, type ToolEntry } from '../services/tools/source.js';

/**
 * The directory a new session runs in: the host's, checked as before, or the empty stand-in when it
 * gave none. `invalid_request` when it gave none but file tools are registered: they resolve every
 * path against it, and guessing one would hand them a workspace the host never chose.
 */
export async function sessionWorkingDirectory(requested: string | undefined, tools: readonly ToolEntry[], openworkHome: string): Promise<string> {
  if (requested !== undefined) return requireWorkingDirectory(requested);
  // A tool source (an MCP server) resolves its own paths: only the built-in file tools need a workspace.
  const fileTools = tools.filter((t): t is AnyTool => !isToolSource(t)).filter(isSandboxedTool).map((t) => t.name);
  if (fileTools.length > 0) {
    throw new InputError('invalid_request', `workingDirectory is required: file tools are registered (${fileTools.join(', ')})`, {
      details: { field: 'workingDirectory', fileTools },
    });
  }
  const empty = join(openworkHome, 'no-workspace');
  await mkdir(empty, { recursive: true, mode: 0o700 });
  return empty;
}
