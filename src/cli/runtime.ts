/**
 * @module cli/runtime
 * What `openwork chat` and `openwork exec` open before their first turn: the OpenAI model from the
 * flags, then the store and the built-in tools. Each failure comes back as the one line the command
 * prints before it exits with "could not start".
 */
import { createCore, type Core } from '../core.js';
import { errorMessage, isOpenworkError } from '../errors.js';
import { loadMcpConfigFile } from '../services/mcp/config.js';
import { mcpToolsFromConfig, type McpServerSet } from '../services/mcp/from-config.js';
import { openaiModel, type OpenAIModel } from '../services/model/openai.js';
import type { ChatOptions } from './options.js';
import { openStorage, storageLabel, storeLockedLine } from './storage.js';
import { cliToolOptions } from './tools.js';

export type Opened<T> = { ok: true; value: T } | { ok: false; line: string };

/** The model the flags name; a missing key is said the way a user can fix it. */
export function openCliModel(options: Omit<ChatOptions, 'prompt'>): Opened<OpenAIModel> {
  try {
    return {
      ok: true,
      value: openaiModel({
        model: options.model,
        api: options.api,
        ...(options.baseURL ? { baseURL: options.baseURL } : {}),
        ...(options.reasoningEffort ? { reasoningEffort: options.reasoningEffort } : {}),
        ...(options.maxOutputTokens ? { maxOutputTokens: options.maxOutputTokens } : {}),
      }),
    };
  } catch (error) {
    if (isOpenworkError(error) && error.code === 'invalid_request' && /API key/.test(error.message)) {
      return { ok: false, line: 'no OpenAI API key: set OPENAI_API_KEY, or use --base-url with a local OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio)' };
    }
    return { ok: false, line: errorMessage(error) };
  }
}

/**
 * The core on the store the flags name, with the CLI's tools and the MCP servers of `--mcp`;
 * `userInput` offers request_user_input. Its `shutdown()` also stops the MCP servers.
 */
export async function openCliCore(options: Omit<ChatOptions, 'prompt'>, model: OpenAIModel, userInput: boolean): Promise<Opened<Core>> {
  let mcpServers;
  try {
    // Read and checked before anything is opened: a bad file costs nothing to report.
    mcpServers = options.mcpConfig ? loadMcpConfigFile(options.mcpConfig) : null;
  } catch (error) {
    return { ok: false, line: errorMessage(error) };
  }
  let mcp: McpServerSet | null = null;
  try {
    const storage = openStorage(options);
    // Opening the store (PGlite: about a second), preparing the tools (the sandbox probe) and
    // starting the MCP servers wait on different things, so they overlap; createCore's own
    // migrate then finds everything applied.
    const [toolOptions, , servers] = await Promise.all([
      cliToolOptions(),
      storage.migrate(),
      // Kept as soon as they run, so that a failing store still stops them below.
      mcpServers
        ? mcpToolsFromConfig(mcpServers).then(
            (set) => (mcp = set),
            (error: unknown) => Promise.reject(new McpStartError(error)),
          )
        : null,
    ]);
    const tools = [...(toolOptions.tools ?? []), ...(servers?.servers ?? [])];
    const core = await createCore({ storage, model, ...toolOptions, tools, resolveModel: () => model, userInput });
    if (!servers) return { ok: true, value: core };
    const started = servers;
    return {
      ok: true,
      value: {
        ...core,
        async shutdown() {
          try {
            await core.shutdown();
          } finally {
            await started.close();
          }
        },
      },
    };
  } catch (error) {
    await (mcp as McpServerSet | null)?.close().catch(() => undefined);
    if (error instanceof McpStartError) return { ok: false, line: errorMessage(error.cause) };
    return { ok: false, line: storeLockedLine(options, error) ?? `cannot open the session store (${storageLabel(options)}): ${errorMessage(error)}` };
  }
}

/** Marks a failure of the MCP servers apart from a failure of the store. */
class McpStartError extends Error {
  constructor(cause: unknown) {
    super(errorMessage(cause), { cause });
  }
}
