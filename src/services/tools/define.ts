/**
 * @module services/tools/define
 * `defineTool`: a tool is a zod schema for its arguments, a model-visible description, and an
 * `execute` function. The JSON Schema the model sees is derived from the zod schema.
 */
import { z } from 'zod';
import { InputError } from '../../errors.js';
import type { PermissionMode } from '../../protocol/input.js';
import type { ToolResult } from '../../protocol/tool-result.js';
import { returnedToolResult } from './returned-result.js';
import type { PermissionCard, ToolProgress } from '../../protocol/updates.js';
import { shownCard } from '../../protocol/shown-card.js';
import type { ToolDefinition } from '../model/port.js';

export interface ToolContext {
  sessionId: string;
  turnId: string;
  toolCallId: string;
  providerCallId: string;
  workingDirectory: string;
  permissionMode: PermissionMode;
  /** Aborted when the turn is cancelled or the runtime stops; tools must stop promptly. */
  signal: AbortSignal;
  /** Streams progress to the host as `tool_call_progress` (never stored, never seen by the model). */
  progress(progress: ToolProgress): void;
  /** Extra grants that the approval of this one call carries (escalated paths, for instance). */
  approval: { decision: 'none' | 'allow_once' | 'allow_for_turn' | 'allow_for_session' | 'grant'; card?: PermissionCard };
}

export type { ToolResult };

export type ToolExecuteResult = string | ToolResult;

/** The authorisation of one call (seed 000 §5): run it, refuse it by rule, or ask the host. */
export type Authorization =
  | { kind: 'execute' }
  | { kind: 'deny'; text: string; source: 'builtin' | 'non_interactive' | 'sandbox_unavailable' | 'policy' }
  | { kind: 'card'; card: AuthorizationCard };

/**
 * The card an `authorize` returns. Only `summary` has to be written; the runtime fills the rest:
 * `toolName` is the tool's name, `kind` is `approval`, `environmentId` is `workspace:<working
 * directory>` (the environment the built-in policy keys its grants by), and `grantKey` is
 * `tool:<name>`, so that "allow for this turn/session" covers later calls of the same tool and
 * never those of another tool. A tool whose calls differ in risk gives its own `grantKey`.
 */
export type AuthorizationCard = Omit<PermissionCard, 'decisions' | 'toolName' | 'kind' | 'environmentId' | 'grantKey'> &
  Partial<Pick<PermissionCard, 'toolName' | 'kind' | 'environmentId' | 'grantKey'>>;

/**
 * The card as the host sees it, with the defaults of `AuthorizationCard` filled in and every field
 * a host shows made visible (`shownCard`): whatever a tool or policy wrote, no invisible character
 * reaches the human, while the grant key and requested paths stay exact.
 */
export function completeCard(card: AuthorizationCard, toolName: string, workingDirectory: string, decisions: PermissionCard['decisions']): PermissionCard {
  return shownCard({
    ...card,
    toolName: card.toolName ?? toolName,
    kind: card.kind ?? 'approval',
    environmentId: card.environmentId ?? `workspace:${workingDirectory}`,
    grantKey: card.grantKey ?? `tool:${toolName}`,
    decisions,
  });
}

export interface AuthorizeContext {
  sessionId: string;
  turnId: string;
  workingDirectory: string;
  permissionMode: PermissionMode;
  nonInteractive: boolean;
}

export interface Tool<Schema extends z.ZodType = z.ZodType> {
  readonly name: string;
  readonly description: string;
  readonly parameters: Schema;
  /**
   * A raw JSON Schema shown to the model instead of the one derived from `parameters` (MCP tools
   * carry their server's schema as is); `parameters` still checks the arguments before a call.
   */
  readonly inputJsonSchema?: Record<string, unknown>;
  /** Decides whether this call may run without asking; absent means "execute". */
  authorize?(args: z.output<Schema>, ctx: AuthorizeContext): Authorization | Promise<Authorization>;
  execute(args: z.output<Schema>, ctx: ToolContext): Promise<ToolExecuteResult> | ToolExecuteResult;
}

export type AnyTool = Tool<z.ZodType>;

/**
 * Defines a tool.
 *
 * @example
 * const echo = defineTool({
 *   name: 'echo',
 *   description: 'Repeats its input.',
 *   parameters: z.object({ text: z.string() }),
 *   execute: ({ text }) => text,
 * });
 */
export function defineTool<Schema extends z.ZodType>(tool: Tool<Schema>): Tool<Schema> {
  checkToolName(tool?.name);
  return tool;
}

/** The names a model provider accepts for a function (OpenAI: `^[a-zA-Z0-9_-]{1,64}$`). */
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/**
 * A tool whose name a provider would refuse: `configuration_invalid`, thrown by `defineTool` and by
 * `createCore` (for a tool made without `defineTool`) before anything is opened. `toolName` is what
 * was given, whatever its type.
 */
export class InvalidToolNameError extends InputError {
  readonly toolName: unknown;
  constructor(name: unknown) {
    const shown = typeof name === 'string' ? JSON.stringify(name) : `a ${name === null ? 'null' : typeof name}`;
    super('configuration_invalid', `tool name ${shown} must match ^[a-zA-Z0-9_-]{1,64}$`, { details: { toolName: typeof name === 'string' ? name : String(typeof name) } });
    this.toolName = name;
  }
}

/** Throws `InvalidToolNameError` unless `name` is a string a provider accepts as a function name. */
export function checkToolName(name: unknown): void {
  if (typeof name !== 'string' || !TOOL_NAME.test(name)) throw new InvalidToolNameError(name);
}

/** The JSON Schema of a tool's arguments, as sent to the model. */
export function toolDefinition(tool: Pick<AnyTool, 'name' | 'description' | 'parameters' | 'inputJsonSchema'>): ToolDefinition {
  if (tool.inputJsonSchema) {
    const { $schema: _ignored, ...schema } = tool.inputJsonSchema;
    return { name: tool.name, description: tool.description, parameters: schema };
  }
  const schema = z.toJSONSchema(tool.parameters, { target: 'draft-7', io: 'input' }) as Record<string, unknown>;
  delete schema.$schema;
  return { name: tool.name, description: tool.description, parameters: schema };
}

/** What `execute` returned as a result; anything else is a failed call (services/tools/returned-result). */
export function normalizeToolResult(result: ToolExecuteResult | unknown): ToolResult {
  return returnedToolResult(result);
}
