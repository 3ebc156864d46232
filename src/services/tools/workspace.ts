/**
 * @module services/tools/workspace
 * One call to give a core the real file and shell tools with everything that belongs with them:
 * the permission policy, the sandbox status, the spill directory, and the sandbox-policy World
 * State section rendered from the same policy object.
 */
import type { SandboxStatus } from '../../protocol/snapshot.js';
import { permissionPolicy } from '../permissions/authorizer.js';
import { renderSandboxPolicySection } from '../../protocol/model-texts.js';
import type { WorldStateSources } from '../context/world-state.js';
import type { Authorizer } from '../runtime.js';
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
 * The `createCore` options `workspaceToolOptions` sets, typed as `CoreOptions` types them and, like
 * them, optional (the return type was `Partial<CoreOptions>`; a host spreads it before or after
 * options of its own). Named here because services sit below the core: the core's options accept
 * this shape, and the type check of every `createCore({ ...workspaceToolOptions(runtime) })` says so.
 */
export interface WorkspaceCoreOptions {
  tools?: AnyTool[];
  authorizer?: Authorizer;
  sandbox?: SandboxStatus;
  toolResultSpillRoot?: string;
  openworkHome?: string;
  skills?: { root?: string | null };
  protectedSkillRoots?: readonly string[];
  protectRuntimePaths?: (paths: readonly string[]) => void;
  worldState?: { renderSandboxPolicy?: WorldStateSources['renderSandboxPolicy'] };
}

/**
 * The skill root a core discovers with this runtime: the one configured with
 * `prepareToolRuntime({ skillRoots })` (the last, when several are given; all of them are
 * protected), else `<home>/.agents/skills`. The permission policy protects it from writes.
 */
export function discoveredSkillRoot(runtime: ToolRuntime): string | null {
  return runtime.environment.skillRoots.at(-1) ?? null;
}

/**
 * The `createCore` options that wire the built-in tools to a prepared tool runtime.
 *
 * @example
 * const runtime = await prepareToolRuntime();
 * const core = await createCore({ storage, model, ...workspaceToolOptions(runtime) });
 */
export function workspaceToolOptions(runtime: ToolRuntime, options: WorkspaceToolOptions = {}): WorkspaceCoreOptions {
  return {
    tools: [...builtinTools(runtime, options.only ? { only: options.only } : {}), ...(options.extraTools ?? [])],
    authorizer: permissionPolicy(runtime),
    sandbox: runtime.sandbox,
    toolResultSpillRoot: runtime.spillRoot,
    openworkHome: runtime.environment.openworkHome,
    // One skill root, discovered and protected (reference §7.2): the configured one, else ~/.agents/skills.
    skills: { root: discoveredSkillRoot(runtime) },
    protectedSkillRoots: runtime.environment.skillRoots,
    // The core's store (a PGlite directory) becomes a private path of this runtime's policy.
    protectRuntimePaths: (paths) => runtime.protectRuntimePaths(paths),
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
