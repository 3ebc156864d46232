/**
 * @module services/mcp/config
 * The configuration of MCP servers: one server (`mcpTools` options) and the `mcpServers` map that
 * other MCP hosts use in their configuration files (`{"mcpServers": {"name": {"command", "args",
 * "env"} | {"url", "headers"}}}`), validated with zod. A bad configuration is a typed
 * `configuration_invalid` error that names the server and the field.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { errorMessage, InputError } from '../../errors.js';

/**
 * How far a server is trusted:
 * - `ask` (the default): every call shows a permission card;
 * - `read-only-auto`: calls of tools the server declares read-only (`readOnlyHint: true`, not
 *   `destructiveHint: true`) run without a card; the others show one;
 * - `trusted`: every call runs without a card.
 */
export const mcpTrustSchema = z.enum(['ask', 'read-only-auto', 'trusted']);
export type McpTrust = z.infer<typeof mcpTrustSchema>;

const commonFields = {
  /** See `McpTrust`. */
  trust: mcpTrustSchema.optional(),
  /** How long one call may run without progress before it fails with `timeout` (default 600,000 ms). */
  callTimeoutMs: z.number().int().positive().optional(),
  /**
   * How long one call may run in all, progress or not, before it fails with `timeout` (default
   * 3,600,000 ms): a server that sends progress forever would otherwise hold the turn forever.
   */
  callMaxMs: z.number().int().positive().optional(),
  /** How long connecting and listing the tools may take (default 30,000 ms). */
  connectTimeoutMs: z.number().int().positive().optional(),
};

/** A server started as a child process speaking MCP over its stdin and stdout. */
export const mcpStdioServerSchema = z.object({
  type: z.literal('stdio').optional(),
  command: z.string().min(1),
  args: z.array(z.string()).optional(),
  /** Added to the SDK's safe default environment (HOME, PATH, USER, ...), not to all of ours. */
  env: z.record(z.string(), z.string()).optional(),
  cwd: z.string().min(1).optional(),
  ...commonFields,
});

/** A server reached over Streamable HTTP, falling back to the older HTTP+SSE transport. */
export const mcpHttpServerSchema = z.object({
  /** `sse` goes straight to the HTTP+SSE transport; anything else tries Streamable HTTP first. */
  type: z.enum(['http', 'streamable-http', 'streamableHttp', 'sse']).optional(),
  url: z.url({ protocol: /^https?$/ }),
  headers: z.record(z.string(), z.string()).optional(),
  ...commonFields,
});

/**
 * One server as a configuration file gives it. Fields other MCP hosts add (`disabled`,
 * `autoApprove`, ...) are ignored, so a file written for them works here; an entry with both or
 * neither of `command` and `url` is refused.
 */
export const mcpServerConfigSchema = z.unknown().transform((value, ctx): McpStdioServerConfig | McpHttpServerConfig => {
  const record = typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  const hasCommand = record !== null && 'command' in record;
  const hasUrl = record !== null && 'url' in record;
  if (hasCommand === hasUrl) {
    ctx.addIssue({ code: 'custom', message: hasCommand ? 'give either "command" (stdio) or "url" (HTTP), not both' : 'needs "command" (stdio) or "url" (HTTP)' });
    return z.NEVER;
  }
  const parsed = (hasCommand ? mcpStdioServerSchema : mcpHttpServerSchema).safeParse(value);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) ctx.addIssue({ code: 'custom', message: issue.message, path: issue.path });
    return z.NEVER;
  }
  return parsed.data;
});

export type McpStdioServerConfig = z.infer<typeof mcpStdioServerSchema>;
export type McpHttpServerConfig = z.infer<typeof mcpHttpServerSchema>;
export type McpServerConfig = McpStdioServerConfig | McpHttpServerConfig;

/** Server names become the prefix of tool names (sanitised there), so any non-empty name will do. */
const serverNameSchema = z.string().min(1, 'a server name must not be empty');

/** The `mcpServers` map of a configuration file. */
export const mcpServersSchema = z.record(serverNameSchema, mcpServerConfigSchema);
export type McpServers = Record<string, McpServerConfig>;

/** A whole MCP configuration file: `{"mcpServers": {...}}`. */
export const mcpConfigFileSchema = z.object({ mcpServers: mcpServersSchema });

function issuesText(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.length > 0 ? i.path.map(String).join('.') : '(root)'}: ${i.message}`).join('; ');
}

/**
 * Validates an `mcpServers` map (from any configuration file that carries one).
 *
 * @throws InputError `configuration_invalid`, naming each bad field.
 */
export function parseMcpServers(value: unknown, source = 'mcpServers'): McpServers {
  const parsed = mcpServersSchema.safeParse(value);
  if (!parsed.success) throw new InputError('configuration_invalid', `invalid MCP configuration in ${source}: ${issuesText(parsed.error)}`);
  return parsed.data;
}

/**
 * Reads and validates an MCP configuration file (`{"mcpServers": {...}}`).
 *
 * @throws InputError `configuration_invalid` when the file cannot be read, is not JSON, or does
 *   not match the format.
 */
export function loadMcpConfigFile(path: string): McpServers {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new InputError('configuration_invalid', `cannot read the MCP configuration ${path}: ${errorMessage(error)}`, { cause: error });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new InputError('configuration_invalid', `the MCP configuration ${path} is not JSON: ${errorMessage(error)}`, { cause: error });
  }
  const parsed = mcpConfigFileSchema.safeParse(json);
  if (!parsed.success) throw new InputError('configuration_invalid', `invalid MCP configuration in ${path}: ${issuesText(parsed.error)}`);
  return parsed.data.mcpServers;
}
