/**
 * @module services/mcp/from-config
 * `mcpToolsFromConfig`: every server of an `mcpServers` map connected at once, for hosts (and the
 * CLI's `--mcp` file or its configuration file) that read the format other MCP hosts use.
 */
import { parseMcpServers } from './config.js';
import { mcpTools, type McpTools } from './tools.js';

/** The connected servers of one configuration; `close()` stops them all. */
export interface McpServerSet {
  readonly servers: readonly McpTools[];
  close(): Promise<void>;
}

/**
 * Validates `mcpServers` and connects to every server in parallel. If one cannot be reached, the
 * others are closed again and its error is thrown, so a host never runs with half a configuration.
 *
 * @throws InputError `configuration_invalid`; McpServerError `mcp_server_unavailable`.
 * @example
 * const mcp = await mcpToolsFromConfig(loadMcpConfigFile('mcp.json'));
 * const core = await createCore({ storage, model, tools: [...builtinTools(runtime), ...mcp.servers] });
 */
export async function mcpToolsFromConfig(mcpServers: unknown): Promise<McpServerSet> {
  const servers = parseMcpServers(mcpServers);
  const settled = await Promise.allSettled(Object.entries(servers).map(([name, config]) => mcpTools({ ...config, name })));
  const opened = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failure = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  const close = async () => {
    await Promise.all(opened.map((s) => s.close()));
  };
  if (failure) {
    await close();
    throw failure.reason;
  }
  return { servers: opened, close };
}
