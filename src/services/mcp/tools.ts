/**
 * @module services/mcp/tools
 * `mcpTools`: the tools of one MCP server as a `ToolSource` a host passes to `createCore({ tools })`.
 * Each server tool becomes a tool named `<server>__<tool>` whose parameters are the server's JSON
 * Schema as is. Every call goes through the permission policy (a card per call unless the
 * server's `trust` says otherwise, with the tool's annotations on the card; grants keyed per
 * server tool), streams `notifications/progress` as `tool_call_progress`, and is cancelled with
 * `notifications/cancelled` when the turn is. The catalog follows `tools/list_changed` before the
 * next model call; a server that dies is restarted by the next call.
 */
import { ErrorCode, McpError, type Tool as McpToolDefinition } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { errorMessage, InputError, McpServerError } from '../../errors.js';
import type { ToolErrorCode } from '../../protocol/content.js';
import type { PermissionCard } from '../../protocol/updates.js';
import type { Authorization, AnyTool, ToolContext, ToolResult } from '../tools/define.js';
import { failedResult } from '../../protocol/tool-result.js';
import type { ToolSource } from '../tools/source.js';
import { mcpServerConfigSchema, type McpServerConfig, type McpTrust } from './config.js';
import { McpConnection, redirected, sessionExpired } from './connection.js';
import { namespacedToolNames } from './names.js';
import { mcpToolResult } from './results.js';

/** Default wait for one call with no progress from the server: 10 minutes. */
export const MCP_CALL_TIMEOUT_MS = 600_000;
/** How long a model call waits for a catalog refresh before it goes on with the old catalog. */
export const MCP_REFRESH_WAIT_MS = 5_000;
/** Default longest run of one call, progress or not: an hour. */
export const MCP_CALL_MAX_MS = 3_600_000;
/**
 * The most `tools/list` pages and tools taken from one server. A server whose pages never end (every
 * page names a next cursor) kept `mcpTools` and every catalog refresh listing forever; past either
 * bound the listing fails with `mcp_server_unavailable`.
 */
export const MCP_MAX_LIST_PAGES = 100;
export const MCP_MAX_TOOLS = 1_000;
/**
 * The deepest nesting and the most values a tool's input schema may have. The schema is sent to the
 * provider on every request; one nested 20,000 levels deep made serialising the request overflow the
 * stack, so every model call of every session using the server failed. A tool past either bound is
 * left out of the catalog (its siblings stay).
 */
export const MCP_SCHEMA_MAX_DEPTH = 64;
export const MCP_SCHEMA_MAX_NODES = 20_000;
/** Characters of a server's tool description the model sees (it rides on every request). */
export const MCP_DESCRIPTION_CHARS = 4_096;
/** Characters of a server-chosen tool title or name a card's summary quotes. */
const CARD_NAME_CHARS = 120;
/** Characters of the arguments a card shows. */
const CARD_ARGUMENTS_CHARS = 4_000;

/** One server: its name (the tool-name prefix) and how to reach it. */
export type McpToolsOptions = McpServerConfig & { name: string };

/** The tools of one MCP server; pass it in `createCore({ tools })` and `close()` it after `shutdown()`. */
export interface McpTools extends ToolSource {
  readonly name: string;
  readonly trust: McpTrust;
  /** The pid of the stdio server's current process (null for HTTP or while none runs). */
  readonly pid: number | null;
  /** Stops the server process (stdio) or ends the session (HTTP). Calls after it fail. */
  close(): Promise<void>;
}

type Annotations = NonNullable<McpToolDefinition['annotations']>;

/** Any object: the server checks its own schema, so nothing is refused or dropped here. */
const argumentsSchema = z.record(z.string(), z.unknown());

function failed(code: ToolErrorCode, text: string): ToolResult {
  return failedResult(code, text, { retryable: code !== 'mcp_tool_error' && code !== 'mcp_protocol_error' });
}

/** A schema check's rejection (zod's `ZodError`, whichever copy of zod the SDK carries). */
function isSchemaError(error: unknown): error is { issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }> } {
  return error instanceof Error && (error.name === 'ZodError' || error.name === '$ZodError') && Array.isArray((error as { issues?: unknown }).issues);
}

/** The first issue of a schema check, short: where, and what was wrong. */
function schemaIssueText(error: { issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }> }): string {
  const issue = error.issues[0];
  if (!issue) return 'no detail';
  const where = issue.path.length > 0 ? issue.path.map(String).join('.') : '(root)';
  return `${where}: ${issue.message}`.slice(0, 300);
}

function hints(annotations: Annotations): string {
  const said: string[] = [];
  if (annotations.readOnlyHint === true) said.push('read-only');
  else if (annotations.destructiveHint === false) said.push('not destructive');
  else if (annotations.destructiveHint === true) said.push('destructive');
  if (annotations.openWorldHint === true) said.push('reaches outside systems');
  return said.length > 0 ? ` (the server says: ${said.join(', ')})` : ' (the server says nothing about what it changes)';
}

/**
 * A server-chosen title or name as a card's summary quotes it: control, format and bidirectional
 * characters replaced, cut to `CARD_NAME_CHARS`, and JSON-quoted, so that a title such as
 * `x" of the MCP server "trusted" (read-only)` or one with a newline or an escape sequence
 * cannot pass for the card's own words.
 */
function quotedName(text: string): string {
  // eslint-disable-next-line no-control-regex
  const clean = text.replace(/[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/g, '\ufffd');
  return JSON.stringify(clean.length <= CARD_NAME_CHARS ? clean : `${clean.slice(0, CARD_NAME_CHARS)}…`);
}

function argumentsText(args: unknown): string {
  const text = JSON.stringify(args) ?? '{}';
  return text.length <= CARD_ARGUMENTS_CHARS ? text : `${text.slice(0, CARD_ARGUMENTS_CHARS)}…`;
}

/** Whether a JSON value stays within the schema bounds, walked without recursion. */
function schemaFits(schema: unknown): boolean {
  const stack: Array<{ value: unknown; depth: number }> = [{ value: schema, depth: 0 }];
  let nodes = 0;
  while (stack.length > 0) {
    const { value, depth } = stack.pop()!;
    nodes += 1;
    if (nodes > MCP_SCHEMA_MAX_NODES || depth > MCP_SCHEMA_MAX_DEPTH) return false;
    if (value === null || typeof value !== 'object') continue;
    for (const child of Object.values(value as Record<string, unknown>)) stack.push({ value: child, depth: depth + 1 });
  }
  return true;
}

function boundedDescription(text: string): string {
  return text.length <= MCP_DESCRIPTION_CHARS ? text : `${text.slice(0, MCP_DESCRIPTION_CHARS)}…`;
}

/** The card of one call: an approval of this tool on this server, with what the server says of it. */
function approvalCard(server: string, tool: McpToolDefinition, modelName: string, args: unknown): Omit<PermissionCard, 'decisions'> {
  const annotations = tool.annotations ?? {};
  const title = tool.title ?? annotations.title;
  return {
    toolName: modelName,
    kind: 'approval',
    summary: `call the tool ${quotedName(title ?? tool.name)} of the MCP server ${JSON.stringify(server)}${hints(annotations)}`,
    mcp: {
      server,
      tool: tool.name,
      ...(title !== undefined ? { title } : {}),
      ...(annotations.readOnlyHint !== undefined ? { readOnlyHint: annotations.readOnlyHint } : {}),
      ...(annotations.destructiveHint !== undefined ? { destructiveHint: annotations.destructiveHint } : {}),
      ...(annotations.idempotentHint !== undefined ? { idempotentHint: annotations.idempotentHint } : {}),
      ...(annotations.openWorldHint !== undefined ? { openWorldHint: annotations.openWorldHint } : {}),
      arguments: argumentsText(args),
    },
    // Grants are per server tool: "allow for this session" covers this tool of this server only.
    environmentId: `mcp:${server}`,
    grantKey: `mcp:${server}:${tool.name}`,
  };
}

function authorization(trust: McpTrust, server: string, tool: McpToolDefinition, modelName: string, args: unknown): Authorization {
  switch (trust) {
    case 'trusted':
      return { kind: 'execute' };
    case 'read-only-auto':
      // A hint from the server, trusted only because the host said so for this server.
      if (tool.annotations?.readOnlyHint === true && tool.annotations.destructiveHint !== true) return { kind: 'execute' };
      return { kind: 'card', card: approvalCard(server, tool, modelName, args) };
    case 'ask':
      return { kind: 'card', card: approvalCard(server, tool, modelName, args) };
    default: {
      const never: never = trust;
      throw new Error(`unknown trust ${String(never)}`);
    }
  }
}

function progressText(progress: { progress: number; total?: number; message?: string }): string {
  const amount = progress.total !== undefined ? `${progress.progress}/${progress.total}` : String(progress.progress);
  return `progress ${amount}${progress.message ? `: ${progress.message}` : ''}`;
}

/**
 * Connects to one MCP server and lists its tools.
 *
 * @throws InputError `configuration_invalid` for bad options; McpServerError
 *   `mcp_server_unavailable` when the server cannot be started, reached or listed.
 * @example
 * const everything = await mcpTools({ name: 'everything', command: 'npx', args: ['-y', '@modelcontextprotocol/server-everything'] });
 * const core = await createCore({ storage, model, tools: [everything] });
 * // ...
 * await core.shutdown();
 * await everything.close();
 */
export async function mcpTools(options: McpToolsOptions): Promise<McpTools> {
  const { name, ...rest } = options;
  if (typeof name !== 'string' || name.length === 0) throw new InputError('configuration_invalid', 'mcpTools needs a non-empty server name');
  const parsed = mcpServerConfigSchema.safeParse(rest);
  if (!parsed.success) {
    const text = parsed.error.issues.map((i) => `${i.path.length > 0 ? i.path.map(String).join('.') : '(root)'}: ${i.message}`).join('; ');
    throw new InputError('configuration_invalid', `invalid options for the MCP server "${name}": ${text}`);
  }
  const config = parsed.data;
  const trust = config.trust ?? 'ask';
  const callTimeoutMs = config.callTimeoutMs ?? MCP_CALL_TIMEOUT_MS;
  const callMaxMs = config.callMaxMs ?? MCP_CALL_MAX_MS;

  let stale = false;
  let refreshing: Promise<void> | null = null;
  let tools: readonly AnyTool[] = [];
  const connection = new McpConnection(name, config, {
    toolsChanged: () => {
      stale = true;
      // Started now, so that it is usually done before the next model call asks for it.
      void refresh();
    },
  });

  const call = async (tool: McpToolDefinition, args: Record<string, unknown>, ctx: ToolContext): Promise<ToolResult> => {
    const send = async () => {
      const client = await connection.client();
      return client.callTool({ name: tool.name, arguments: args }, undefined, {
        // Aborting sends `notifications/cancelled` for this request (the SDK does it) and rejects.
        signal: ctx.signal,
        onprogress: (progress) => ctx.progress({ kind: 'message', message: progressText(progress) }),
        timeout: callTimeoutMs,
        resetTimeoutOnProgress: true,
        maxTotalTimeout: callMaxMs,
      });
    };
    try {
      let result;
      try {
        result = await send();
      } catch (error) {
        // An HTTP server that restarted since the last call refuses our old session before running
        // anything: a new session, and the same request once more.
        if (!sessionExpired(error) || ctx.signal.aborted) throw error;
        await connection.reset();
        result = await send();
      }
      return mcpToolResult(result);
    } catch (error) {
      if (error instanceof McpServerError) return failed('mcp_server_unavailable', error.message);
      // The runtime reports a cancelled call itself once the promise settles.
      if (ctx.signal.aborted) throw error;
      if (error instanceof McpError && error.code === ErrorCode.ConnectionClosed) {
        const tail = connection.stderr ? ` (its stderr: ${connection.stderr.split('\n').slice(-3).join(' | ')})` : '';
        const again = 'command' in config ? 'it is started again for the next call' : 'the next call connects again';
        return failed('mcp_server_exited', `the MCP server "${name}" went away during the call${tail}; ${again}`);
      }
      if (error instanceof McpError && error.code === ErrorCode.RequestTimeout) {
        const whole = /total timeout/i.test(error.message);
        const text = whole ? `the MCP server "${name}" did not answer within ${callMaxMs} ms in all` : `the MCP server "${name}" sent nothing for ${callTimeoutMs} ms`;
        return failedResult('timeout', `${text}; the call was cancelled`, { retryable: true });
      }
      if (error instanceof McpError) {
        return failed('mcp_protocol_error', `the MCP server "${name}" refused the call of "${tool.name}": ${error.message}`);
      }
      // The SDK checks the answer against the tool-result schema and rejects with its zod error (zod's
      // class of the SDK's own copy, so it is known by name): the server is alive and answered, with
      // something that is not a tool result. Before, this was taken for a broken transport, the
      // server was restarted, and the model read the whole issue list as `mcp_server_exited`.
      if (isSchemaError(error)) {
        return failed('mcp_protocol_error', `the MCP server "${name}" answered the call of "${tool.name}" with something that is not a tool result (${schemaIssueText(error)})`);
      }
      // Redirects are followed within the server's origin only, a few times: this one was not.
      if (redirected(error)) {
        return failed('mcp_protocol_error', `the MCP server "${name}" answered the call of "${tool.name}" with a redirect: ${errorMessage(error)}`);
      }
      // A transport failure (an HTTP connection that broke): the next call connects again.
      await connection.reset();
      return failed('mcp_server_exited', `the connection to the MCP server "${name}" failed during the call: ${errorMessage(error)}; it is made again for the next call`);
    }
  };

  const build = (all: readonly McpToolDefinition[]): readonly AnyTool[] => {
    const listed = all.filter((tool) => schemaFits(tool.inputSchema));
    const names = namespacedToolNames(name, listed.map((t) => t.name));
    return Object.freeze(
      listed.map((tool): AnyTool => {
        const modelName = names.get(tool.name)!;
        return {
          name: modelName,
          description: boundedDescription(tool.description ?? tool.title ?? `The tool "${tool.name}" of the MCP server "${name}".`),
          parameters: argumentsSchema,
          inputJsonSchema: tool.inputSchema as Record<string, unknown>,
          authorize: (args) => authorization(trust, name, tool, modelName, args),
          execute: (args, ctx) => call(tool, args as Record<string, unknown>, ctx),
        };
      }),
    );
  };

  const list = async (): Promise<McpToolDefinition[]> => {
    const client = await connection.client();
    const listed: McpToolDefinition[] = [];
    const cursors = new Set<string>();
    let cursor: string | undefined;
    do {
      if (cursors.size >= MCP_MAX_LIST_PAGES) throw new McpServerError(name, `the MCP server "${name}" listed its tools in more than ${MCP_MAX_LIST_PAGES} pages`);
      const page = await client.listTools(cursor === undefined ? {} : { cursor }, { timeout: config.connectTimeoutMs ?? 30_000 });
      listed.push(...page.tools);
      if (listed.length > MCP_MAX_TOOLS) throw new McpServerError(name, `the MCP server "${name}" listed more than ${MCP_MAX_TOOLS} tools`);
      cursor = page.nextCursor;
      if (cursor !== undefined && cursors.has(cursor)) throw new McpServerError(name, `the MCP server "${name}" listed the page ${JSON.stringify(cursor.slice(0, 64))} twice`);
      if (cursor !== undefined) cursors.add(cursor);
    } while (cursor !== undefined);
    return listed;
  };

  const refresh = (): Promise<void> => {
    if (refreshing) return refreshing;
    if (!stale) return Promise.resolve();
    stale = false;
    refreshing = list()
      .then(
        (listed) => {
          tools = build(listed);
        },
        () => {
          // The old catalog stays until the next notification or restart; a call of a tool that
          // went away gets the server's own error.
        },
      )
      .finally(() => {
        refreshing = null;
      });
    return refreshing;
  };

  try {
    tools = build(await list());
  } catch (error) {
    await connection.close();
    if (error instanceof McpServerError) throw error;
    throw new McpServerError(name, `the MCP server "${name}" did not list its tools: ${errorMessage(error)}`, { cause: error });
  }

  return {
    kind: 'tool_source',
    label: `MCP server "${name}"`,
    name,
    trust,
    get pid() {
      return connection.pid;
    },
    tools: () => tools,
    // A model call waits for a pending refresh, but not for long: a slow server keeps its old catalog.
    refresh: () => {
      const pending = refresh();
      let timer: NodeJS.Timeout | undefined;
      const bound = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, MCP_REFRESH_WAIT_MS);
      });
      return Promise.race([pending, bound]).finally(() => clearTimeout(timer));
    },
    close: () => connection.close(),
  };
}
