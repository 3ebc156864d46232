/**
 * @module services/tools/builtin
 * `builtinTools`: the seven built-in tools of reference §11.2 (`read`, `write`, `edit`, `grep`,
 * `glob`, `list`, `bash`), sharing one `ToolRuntime`. Their escalation parameters
 * (`sandboxPermissions`, `justification`) are in the schemas only while the sandbox is available.
 */
import type { AnyTool } from './define.js';
import { bashTool } from './bash.js';
import { editTool } from './edit.js';
import { globTool } from './glob.js';
import { grepTool } from './grep.js';
import { listTool } from './list.js';
import { readTool } from './read.js';
import type { ToolRuntime } from './tool-runtime.js';
import { writeTool } from './write.js';

export type BuiltinToolName = 'read' | 'write' | 'edit' | 'grep' | 'glob' | 'list' | 'bash';

export const BUILTIN_TOOL_NAMES: readonly BuiltinToolName[] = ['read', 'write', 'edit', 'grep', 'glob', 'list', 'bash'];

/**
 * The built-in tools, optionally a subset (the explorer role, for instance, has no write or edit).
 *
 * @example
 * const runtime = await prepareToolRuntime();
 * const core = await createCore({ storage, model, tools: builtinTools(runtime), authorizer: permissionPolicy(runtime), sandbox: runtime.sandbox });
 */
export function builtinTools(runtime: ToolRuntime, options: { only?: readonly BuiltinToolName[] } = {}): AnyTool[] {
  const all: Record<BuiltinToolName, () => AnyTool> = {
    read: () => readTool(runtime),
    write: () => writeTool(runtime),
    edit: () => editTool(runtime),
    grep: () => grepTool(runtime),
    glob: () => globTool(runtime),
    list: () => listTool(runtime),
    bash: () => bashTool(runtime),
  };
  return (options.only ?? BUILTIN_TOOL_NAMES).map((name) => all[name]());
}
