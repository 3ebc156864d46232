/**
 * @module cli/tools
 * The tools `openwork chat` gives the model: the seven built-in file and shell tools under the
 * permission policy and the sandbox (bubblewrap on Linux), prepared once per process.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CoreOptions } from '../core.js';
import { prepareToolRuntime } from '../services/tools/tool-runtime.js';
import { workspaceToolOptions } from '../services/tools/workspace.js';
import { configPaths } from './config.js';

/**
 * The CLI's own files that no tool may read or write (the runtime's private tier): the working
 * directory's `.openwork` (the project config, whose MCP servers the next start runs on the host,
 * outside the sandbox, and whose `baseUrl` receives the API key; the embedded store) and the
 * user's config file (MCP servers' tokens). The directory is created, with a `.gitignore` of `*`,
 * so that bash finds a path to cover: bubblewrap mounts over what exists, and a missing directory
 * could be created by the command itself (branch attack5).
 */
export function cliPrivatePaths(workingDirectory: string, home?: string): string[] {
  const paths = configPaths(workingDirectory, home);
  const dir = join(workingDirectory, '.openwork');
  try {
    mkdirSync(dir, { recursive: true });
    const ignore = join(dir, '.gitignore');
    if (!existsSync(ignore)) writeFileSync(ignore, '*\n');
  } catch {
    // A working directory the user cannot write: bash cannot create the directory either.
  }
  return [dir, paths.user];
}

/** The `createCore` options of the CLI's tool surface; the sandbox self-check runs here. */
export async function cliToolOptions(workingDirectory: string): Promise<Partial<CoreOptions>> {
  return workspaceToolOptions(await prepareToolRuntime({ runtimePaths: cliPrivatePaths(workingDirectory) }));
}
