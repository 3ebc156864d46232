/**
 * @module cli/runtime
 * What `openwork chat` and `openwork exec` open before their first turn: the OpenAI model from the
 * resolved options (with `--session`, from the settings stored with that session unless a flag
 * overrides them), the store, the built-in tools and the tools of the MCP servers (the config
 * files' `mcpServers`, then `--mcp`). Each failure comes back as the one line the command prints
 * before it exits with "could not start".
 */
import { z } from 'zod';
import { createCore, type Core } from '../core.js';
import { errorMessage, isOpenworkError } from '../errors.js';
import { loadMcpConfigFile, type McpServers } from '../services/mcp/config.js';
import type { McpServerSet } from '../services/mcp/from-config.js';
import type { ModelStreamEvent } from '../services/model/port.js';
import { openaiModel, type OpenAIModel } from '../services/model/openai.js';
import type { SessionHandle } from '../session-handle.js';
import type { SessionStorage } from '../storage/storage.js';
import { discardEarlyStore, type EarlyStore } from './early-store.js';
import type { ChatOptions } from './options.js';
import { openStorage, storageLabel, storeLockedLine } from './storage.js';
import { cliToolOptions } from './tools.js';

export type Opened<T> = { ok: true; value: T } | { ok: false; line: string };

type ModelOptions = Omit<ChatOptions, 'prompt'>;

/** The model the options name; a missing key is said the way a user can fix it. */
export function openCliModel(options: ModelOptions): Opened<OpenAIModel> {
  try {
    return {
      ok: true,
      value: openaiModel({
        model: options.model,
        api: options.api,
        ...(options.baseURL ? { baseURL: options.baseURL } : {}),
        ...(options.reasoningEffort ? { reasoningEffort: options.reasoningEffort } : {}),
        ...(options.maxOutputTokens ? { maxOutputTokens: options.maxOutputTokens } : {}),
        ...(options.contextWindow ? { contextWindow: options.contextWindow } : {}),
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
 * What the CLI stores with a session (`sessions.client_settings`) to continue it on the same
 * model. Read with zod: the column is any host's JSON, and an unreadable value is ignored.
 */
const cliSessionSettingsSchema = z.object({
  model: z.string().min(1),
  api: z.enum(['responses', 'chat']),
  baseUrl: z.string().nullable(),
});
export type CliSessionSettings = z.infer<typeof cliSessionSettingsSchema>;

export function sessionSettingsOf(options: ModelOptions): CliSessionSettings {
  return { model: options.model, api: options.api, baseUrl: options.baseURL ?? null };
}

/**
 * The options with a continued session's stored model, API and base URL in place of every one
 * that no flag set (a flag given now wins); unchanged when the session stored none.
 */
export function withSessionSettings<T extends ModelOptions>(options: T, stored: Record<string, unknown> | null): T {
  const parsed = cliSessionSettingsSchema.safeParse(stored);
  if (!parsed.success || !options.sessionId) return options;
  const s = parsed.data;
  const source = { kind: 'session' as const, sessionId: options.sessionId };
  const next: T = { ...options, sources: { ...options.sources } };
  if (options.sources.model.kind !== 'flag') {
    next.model = s.model;
    next.sources.model = source;
  }
  if (options.sources.api.kind !== 'flag') {
    next.api = s.api;
    next.sources.api = source;
  }
  if (options.sources.baseURL.kind !== 'flag') {
    if (s.baseUrl === null) delete next.baseURL;
    else next.baseURL = s.baseUrl;
    next.sources.baseURL = source;
  }
  return next;
}

/** A model whose stream events are also shown to `observe` (the chat's spinner counts retries). */
function observed(model: OpenAIModel, observe: (event: ModelStreamEvent) => void): OpenAIModel {
  return {
    ...model,
    async *stream(request, callOptions) {
      for await (const event of model.stream(request, callOptions)) {
        observe(event);
        yield event;
      }
    },
  };
}

export interface CliRuntime {
  core: Core;
  model: OpenAIModel;
  /** The options after a continued session's stored settings were applied. */
  options: ModelOptions;
}

/**
 * The MCP servers to start: the config files' map, with `--mcp`'s file over it (a server of the
 * same name is replaced). Read and checked before anything is opened: a bad file costs nothing.
 */
function mcpServersOf(options: ModelOptions): McpServers | null {
  const fromFlag = options.mcpConfig ? loadMcpConfigFile(options.mcpConfig) : {};
  const merged = { ...options.mcpServers, ...fromFlag };
  return Object.keys(merged).length > 0 ? merged : null;
}

/**
 * The model and the core on the store the options name, with the CLI's tools and the MCP servers';
 * `userInput` offers request_user_input, `observe` sees every model stream event. Without
 * `--session` the model is opened first, so that a missing key is said before any store is
 * created. The core's `shutdown()` also stops the MCP servers. `early` is the store `main` began
 * to open before this module was loaded (cli/early-store).
 */
export async function openCliRuntime(
  given: ModelOptions,
  userInput: boolean,
  observe?: (event: ModelStreamEvent) => void,
  early?: EarlyStore,
): Promise<Opened<CliRuntime>> {
  let options = given;
  let mcpServers: McpServers | null;
  try {
    mcpServers = mcpServersOf(options);
  } catch (error) {
    await discardEarlyStore(early);
    return { ok: false, line: errorMessage(error) };
  }
  let model: OpenAIModel | null = null;
  if (!options.sessionId) {
    const opened = openCliModel(options);
    if (!opened.ok) {
      await discardEarlyStore(early);
      return opened;
    }
    model = opened.value;
  }
  let storage: ReturnType<typeof openStorage> | null = null;
  let mcp: McpServerSet | null = null;
  try {
    if (early && 'error' in early) throw early.error;
    storage = early ? early.storage : openStorage(options);
    // Opening the store (PGlite: about a second), preparing the tools (the sandbox probe) and
    // starting the MCP servers wait on different things, so they overlap; createCore's own
    // migrate then finds everything applied.
    const [toolOptions, , servers] = await Promise.all([
      cliToolOptions(options.workingDirectory),
      early ? early.migrated : storage.migrate(),
      // Kept as soon as they run, so that a failing store still stops them below.
      mcpServers
        ? // The MCP SDK (and the JSON-schema validator it brings) loads only when a server is configured.
          import('../services/mcp/from-config.js')
            .then(({ mcpToolsFromConfig }) => mcpToolsFromConfig(mcpServers))
            .then(
              (set) => (mcp = set),
              (error: unknown) => Promise.reject(new McpStartError(error)),
            )
        : null,
    ]);
    if (options.sessionId) {
      options = withSessionSettings(options, await storage.getClientSettings(options.sessionId));
      const opened = openCliModel(options);
      if (!opened.ok) {
        await servers?.close().catch(() => undefined);
        await storage.close().catch(() => undefined);
        return opened;
      }
      model = opened.value;
    }
    const used = observe ? observed(model!, observe) : model!;
    const tools = [...(toolOptions.tools ?? []), ...(servers?.servers ?? [])];
    const opened = await createCore({ storage, model: used, ...toolOptions, tools, resolveModel: () => used, userInput, plan: true, conversationHistory: true, agents: true });
    const core: Core = servers
      ? {
          ...opened,
          async shutdown() {
            try {
              await opened.shutdown();
            } finally {
              await servers.close();
            }
          },
        }
      : opened;
    return { ok: true, value: { core, model: model!, options } };
  } catch (error) {
    await (mcp as McpServerSet | null)?.close().catch(() => undefined);
    await storage?.close().catch(() => undefined);
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

/**
 * Stores the settings a session runs on, so that `--session` continues it on the same model; a
 * failure is not worth stopping the conversation for (the next continue falls back to the flags).
 */
export async function rememberSessionSettings(storage: SessionStorage, sessionId: string, options: ModelOptions): Promise<void> {
  await storage.setClientSettings(sessionId, sessionSettingsOf(options)).catch(() => undefined);
}

/**
 * The session `openwork chat` and `openwork exec` run in: `--session`'s (its permission mode set
 * when `--mode` was given) or a new one in the working directory, titled by the prompt. Its settings
 * are remembered for the next `--session`. On failure the core is shut down and the line to print
 * comes back; an unknown `--session` says where it looked.
 */
export async function openCliSession(started: CliRuntime, options: ChatOptions): Promise<Opened<SessionHandle>> {
  const { core } = started;
  try {
    let session: SessionHandle;
    if (options.sessionId) {
      session = await core.loadSession(options.sessionId);
      if (options.sources.mode.kind === 'flag') await session.setPermissionMode(options.mode);
    } else {
      session = await core.createSession({
        workingDirectory: options.workingDirectory,
        permissionMode: options.mode,
        ...(options.prompt ? { title: options.prompt.slice(0, 80) } : {}),
      });
    }
    await rememberSessionSettings(core.storage, session.sessionId, started.options);
    return { ok: true, value: session };
  } catch (error) {
    await core.shutdown().catch(() => undefined);
    const code = isOpenworkError(error) ? error.code : undefined;
    return { ok: false, line: code === 'session_not_found' ? `no session ${options.sessionId} in ${storageLabel(options)} (see \`openwork sessions\`)` : errorMessage(error) };
  }
}
