/**
 * @module services/tools/registry
 * The tool surface of a session: registered tools plus the Core control tools, resolved by name
 * from one table so that every advertised name dispatches and nothing else does (reference §2.6).
 */
import type { ToolDefinition } from '../model/port.js';
import { toolDefinition, type AnyTool } from './define.js';

export type ControlToolName = 'update_plan' | 'request_user_input' | 'spawn_agent' | 'wait_agent' | 'list_agents' | 'followup_task' | 'interrupt_agent';

export type ResolvedTool = { kind: 'control'; name: ControlToolName } | { kind: 'registered'; tool: AnyTool };

export interface ControlToolSpec {
  name: ControlToolName;
  definition: ToolDefinition;
  /** Prompt rules appended to the system context when this tool is advertised. */
  promptRules?: string;
}

export class ToolNameCollisionError extends Error {
  readonly code = 'invalid_request';
  constructor(name: string) {
    super(`tool name collision: ${name} is both a control tool and a registered tool`);
    this.name = 'ToolNameCollisionError';
  }
}

/** Immutable after construction; built once per session kind and shared by every turn. */
export class Toolset {
  readonly definitions: readonly ToolDefinition[];
  readonly systemPromptRules: string;
  private readonly byName: ReadonlyMap<string, ResolvedTool>;

  constructor(tools: readonly AnyTool[], controls: readonly ControlToolSpec[]) {
    const byName = new Map<string, ResolvedTool>();
    const definitions: ToolDefinition[] = [];
    for (const tool of tools) {
      if (byName.has(tool.name)) throw new ToolNameCollisionError(tool.name);
      byName.set(tool.name, { kind: 'registered', tool });
      definitions.push(toolDefinition(tool));
    }
    for (const control of controls) {
      if (byName.has(control.name)) throw new ToolNameCollisionError(control.name);
      byName.set(control.name, { kind: 'control', name: control.name });
      definitions.push(control.definition);
    }
    this.byName = byName;
    this.definitions = Object.freeze(definitions);
    this.systemPromptRules = controls
      .map((c) => c.promptRules)
      .filter((r): r is string => Boolean(r))
      .join('\n\n');
  }

  resolve(name: string): ResolvedTool | undefined {
    return this.byName.get(name);
  }

  get names(): string[] {
    return [...this.byName.keys()];
  }
}
