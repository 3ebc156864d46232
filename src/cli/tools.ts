/**
 * @module cli/tools
 * The tools `openwork chat` gives the model: the seven built-in file and shell tools under the
 * permission policy and the sandbox (bubblewrap on Linux), prepared once per process.
 */
import type { CoreOptions } from '../core.js';
import { prepareToolRuntime } from '../services/tools/tool-runtime.js';
import { workspaceToolOptions } from '../services/tools/workspace.js';

/** The `createCore` options of the CLI's tool surface; the sandbox self-check runs here. */
export async function cliToolOptions(): Promise<Partial<CoreOptions>> {
  return workspaceToolOptions(await prepareToolRuntime());
}
