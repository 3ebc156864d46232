/**
 * @module services/tools/registry
 * The tool surface of a session: registered tools plus the Core control tools, resolved by name
 * from one table so that every advertised name dispatches and nothing else does (reference §2.6).
 */
import { InputError } from '../../errors.js';
import type { ToolDefinition } from '../model/port.js';
import { checkToolName, toolDefinition, type AnyTool } from './define.js';
import { isToolSource, type ToolEntry, type ToolSource } from './source.js';

export type ControlToolName = 'update_plan' | 'request_user_input' | 'spawn_agent' | 'wait_agent' | 'list_agents' | 'followup_task' | 'interrupt_agent';

export type ResolvedTool = { kind: 'control'; name: ControlToolName } | { kind: 'registered'; tool: AnyTool };

export interface ControlToolSpec {
  name: ControlToolName;
  definition: ToolDefinition;
  /** Prompt rules appended to the system context when this tool is advertised. */
  promptRules?: string;
}

/**
 * Two tools of one surface share a name (two registered tools, or a registered tool and a control
 * tool): `configuration_invalid`, thrown by `createCore` before it opens anything.
 */
export class ToolNameCollisionError extends InputError {
  readonly toolName: string;
  constructor(name: string) {
    super('configuration_invalid', `tool name collision: ${name} is offered by more than one tool (registered tools and the control tools must have distinct names)`, { details: { toolName: name } });
    this.toolName = name;
  }
}

/**
 * Built once per session kind and shared by every turn. Plain tools and control tools are fixed at
 * construction (a name collision among them throws); the tools of a `ToolSource` are read again
 * whenever the source hands out a new array, so a changed MCP catalog reaches the next model call.
 * A source tool whose name is already taken is left out, so a fixed tool is never shadowed.
 */
export class Toolset {
  readonly systemPromptRules: string;
  private readonly fixed: ReadonlyMap<string, ResolvedTool>;
  private readonly fixedDefinitions: readonly ToolDefinition[];
  private readonly sources: readonly ToolSource[];
  /** The source arrays the current view was built from, compared by identity. */
  private seen: ReadonlyArray<readonly AnyTool[]> = [];
  private view: { byName: ReadonlyMap<string, ResolvedTool>; definitions: readonly ToolDefinition[] };

  constructor(tools: readonly ToolEntry[], controls: readonly ControlToolSpec[]) {
    const byName = new Map<string, ResolvedTool>();
    const definitions: ToolDefinition[] = [];
    const sources: ToolSource[] = [];
    for (const tool of tools) {
      if (isToolSource(tool)) {
        sources.push(tool);
        continue;
      }
      checkToolName(tool.name);
      if (byName.has(tool.name)) throw new ToolNameCollisionError(tool.name);
      byName.set(tool.name, { kind: 'registered', tool });
      definitions.push(toolDefinition(tool));
    }
    for (const control of controls) {
      if (byName.has(control.name)) throw new ToolNameCollisionError(control.name);
      byName.set(control.name, { kind: 'control', name: control.name });
      definitions.push(control.definition);
    }
    this.fixed = byName;
    this.fixedDefinitions = Object.freeze(definitions);
    this.sources = sources;
    // At construction a source tool colliding with a fixed one is a configuration error, as for plain tools.
    for (const source of sources) for (const tool of source.tools()) if (byName.has(tool.name)) throw new ToolNameCollisionError(tool.name);
    this.view = { byName, definitions: this.fixedDefinitions };
    this.sync();
    this.systemPromptRules = controls
      .map((c) => c.promptRules)
      .filter((r): r is string => Boolean(r))
      .join('\n\n');
  }

  /** Every advertised tool, the sources' current tools included. */
  get definitions(): readonly ToolDefinition[] {
    return this.sync().definitions;
  }

  resolve(name: string): ResolvedTool | undefined {
    return this.sync().byName.get(name);
  }

  get names(): string[] {
    return [...this.sync().byName.keys()];
  }

  /** Lets every source finish a pending catalog refresh; the turn calls it before each model call. */
  async refresh(): Promise<void> {
    await Promise.all(this.sources.map((s) => s.refresh?.()));
  }

  private sync(): { byName: ReadonlyMap<string, ResolvedTool>; definitions: readonly ToolDefinition[] } {
    if (this.sources.length === 0) return this.view;
    const current = this.sources.map((s) => s.tools());
    if (current.length === this.seen.length && current.every((tools, i) => tools === this.seen[i])) return this.view;
    const byName = new Map(this.fixed);
    const definitions = [...this.fixedDefinitions];
    for (const tools of current) {
      for (const tool of tools) {
        if (byName.has(tool.name)) continue;
        byName.set(tool.name, { kind: 'registered', tool });
        definitions.push(toolDefinition(tool));
      }
    }
    this.seen = current;
    this.view = { byName, definitions: Object.freeze(definitions) };
    return this.view;
  }
}
