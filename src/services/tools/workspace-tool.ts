/**
 * @module services/tools/workspace-tool
 * `defineWorkspaceTool`: the setup the workspace file tools (read, write, edit, glob, grep, list)
 * share. Each adds the escalation parameters only while the sandbox works, appends the denial rule
 * to its description (issue 20.2: it names sandboxPermissions only then), and declares the one path
 * it touches so that the sandboxed file actor checks it (`path`, or the working directory).
 */
import { z } from 'zod';
import { escalationParameters } from '../permissions/escalation.js';
import { denialRuleText } from '../../protocol/model-texts.js';
import { defineTool, type ToolContext, type ToolExecuteResult } from './define.js';
import type { SandboxedTool } from './sandboxed.js';
import type { ToolRuntime } from './tool-runtime.js';

/** What a workspace tool says about itself; the rest is the same for all of them. */
export interface WorkspaceToolSpec<Shape extends z.ZodRawShape> {
  name: string;
  /** The model-visible description, before the denial rule is appended. */
  description: string;
  /** The tool's own arguments, without the escalation parameters. */
  parameters: Shape;
  /** How the tool uses its `path` argument. */
  access: 'read' | 'write';
  execute(args: z.infer<z.ZodObject<Shape>>, ctx: ToolContext): Promise<ToolExecuteResult>;
}

/** A workspace file tool over `runtime`, run by the sandboxed file actor. */
export function defineWorkspaceTool<Shape extends z.ZodRawShape>(runtime: ToolRuntime, spec: WorkspaceToolSpec<Shape>): SandboxedTool {
  const sandboxWorks = runtime.launcher !== null;
  const parameters = z.object(sandboxWorks ? { ...spec.parameters, ...escalationParameters } : spec.parameters);
  const tool = defineTool({
    name: spec.name,
    description: `${spec.description} ${denialRuleText(sandboxWorks)}`,
    parameters,
    execute: (args, ctx) => spec.execute(args as z.infer<z.ZodObject<Shape>>, ctx),
  });
  return Object.assign(tool, {
    sandboxed: {
      actor: 'file_tool' as const,
      targets: (args: unknown) => [{ path: (args as { path?: string }).path ?? '.', access: spec.access }],
    },
  });
}
