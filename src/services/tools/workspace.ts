/**
 * @module services/tools/workspace
 * One call to give a core the real file and shell tools with everything that belongs with them:
 * the permission policy, the sandbox status, the spill directory, and the sandbox-policy World
 * State section rendered from the same policy object.
 */
import type { CoreOptions } from '../../core.js';
import { permissionPolicy } from '../permissions/authorizer.js';
import { renderSandboxPolicySection } from '../permissions/texts.js';
import { builtinTools, type BuiltinToolName } from './builtin.js';
import type { AnyTool } from './define.js';
import type { ToolRuntime } from './tool-runtime.js';

export interface WorkspaceToolOptions {
  /** Only these built-in tools (default: all seven). */
  only?: readonly BuiltinToolName[];
  /** More tools of the host's own, registered after the built-in ones. */
  extraTools?: readonly AnyTool[];
}

/**
 * The `createCore` options that wire the built-in tools to a prepared tool runtime.
 *
 * @example
 * const runtime = await prepareToolRuntime();
 * const core = await createCore({ storage, model, ...workspaceToolOptions(runtime) });
 */
export function workspaceToolOptions(runtime: ToolRuntime, options: WorkspaceToolOptions = {}): Partial<CoreOptions> {
  return {
    tools: [...builtinTools(runtime, options.only ? { only: options.only } : {}), ...(options.extraTools ?? [])],
    authorizer: permissionPolicy(runtime),
    sandbox: runtime.sandbox,
    toolResultSpillRoot: runtime.spillRoot,
    openworkHome: runtime.environment.openworkHome,
    skills: { root: runtime.environment.skillRoots[0] ?? null },
    worldState: {
      renderSandboxPolicy: ({ mode, workspace, sandbox }) =>
        renderSandboxPolicySection({
          mode,
          workspace,
          bashAvailable: sandbox.available,
          bashWritesWorkspace: runtime.policy(mode, workspace).bashWritesWorkspace(),
          platform: runtime.environment.platform,
        }),
    },
  };
}
