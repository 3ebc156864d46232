/**
 * @module services/tools/source
 * `ToolSource`: a set of tools that may change while the core runs (an MCP server's catalog). A
 * host passes it to `createCore({ tools })` beside plain tools; the session's toolset asks it for
 * its current tools before each model call, so the model always sees the latest catalog.
 */
import type { AnyTool } from './define.js';

export interface ToolSource {
  /** Marks the object as a source rather than a tool. */
  readonly kind: 'tool_source';
  /** A label for messages (the MCP server's name). */
  readonly label: string;
  /** The tools as they are now; a new array whenever the set changed. */
  tools(): readonly AnyTool[];
  /**
   * Settles a pending catalog refresh (after a `tools/list_changed` notification or a restart);
   * called before each model call. It never rejects: a source that cannot refresh keeps its tools.
   */
  refresh?(): Promise<void>;
}

/** One entry of `createCore({ tools })`: a tool, or a source of tools. */
export type ToolEntry = AnyTool | ToolSource;

export function isToolSource(entry: ToolEntry): entry is ToolSource {
  return (entry as Partial<ToolSource>).kind === 'tool_source';
}
