/**
 * @module cli/options
 * The command line of `openwork chat`, `exec`, `sessions` and `config`, parsed and checked once,
 * with the config files (config.ts) and the environment defaults (OPENAI_*, DATABASE_URL) applied
 * here and nowhere else. Precedence, highest first: flag, environment, `./.openwork/config.json`,
 * `~/.openwork/config.json`, default; each resolved value keeps where it came from.
 */
import { resolve, join } from 'node:path';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { z } from 'zod';
import { permissionModeSchema, type PermissionMode } from '../protocol/input.js';
import type { LoadedConfigFile, McpServers } from './config.js';

/** A command line the CLI refuses; `main` prints its message as one line. */
export class UsageError extends Error {
  readonly code = 'usage_error';
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

const positiveInt = z.coerce.number().int().positive();

export interface StorageOptions {
  /** Postgres connection string; absent means PGlite in `dataDir`. */
  databaseUrl?: string;
  dataDir: string;
  workingDirectory: string;
}

/** Where a resolved setting came from. */
export type SettingSource =
  | { kind: 'flag'; flag: string }
  | { kind: 'env'; name: string }
  | { kind: 'file'; path: string }
  | { kind: 'session'; sessionId: string }
  | { kind: 'default'; note?: string };

/** How `openwork config` names a source. */
export function sourceLabel(source: SettingSource): string {
  switch (source.kind) {
    case 'flag':
      return `flag ${source.flag}`;
    case 'env':
      return `env ${source.name}`;
    case 'file':
      return source.path;
    case 'session':
      return `session ${source.sessionId}`;
    case 'default':
      return source.note ? `default (${source.note})` : 'default';
    default: {
      const never: never = source;
      return never;
    }
  }
}

/** The sources of the settings a config file can hold (plus the store, which only flags and env set). */
export interface ChatSources {
  model: SettingSource;
  api: SettingSource;
  baseURL: SettingSource;
  mode: SettingSource;
  contextWindow: SettingSource;
  /** Per MCP server name: the file that defined it. */
  mcpServers: Record<string, SettingSource>;
  databaseUrl: SettingSource;
  dataDir: SettingSource;
}

export interface ChatOptions extends StorageOptions {
  prompt?: string;
  sessionId?: string;
  model: string;
  api: 'responses' | 'chat';
  baseURL?: string;
  reasoningEffort?: string;
  maxOutputTokens?: number;
  /** `--mcp <config.json>`: MCP servers (`{"mcpServers": {...}}`) whose tools the model also gets. */
  mcpConfig?: string;
  /** The model's context window in tokens: turns on automatic compaction and /status's fill. */
  contextWindow?: number;
  /** The permission mode of a new session (a continued one keeps its own unless `--mode` says). */
  mode: PermissionMode;
  /** MCP servers from the config files, in the map format of other MCP hosts. */
  mcpServers?: McpServers;
  sources: ChatSources;
}

/** How `openwork exec` answers permission cards (there is nobody to ask unless on-request on a TTY). */
export type ApprovePolicy = 'never' | 'on-request' | 'full-auto';

export interface ExecOptions extends Omit<ChatOptions, 'prompt'> {
  prompt: string;
  json: boolean;
  approve: ApprovePolicy;
}

export interface SessionsOptions extends StorageOptions {
  limit: number;
}

export const DEFAULT_MODEL = 'gpt-5-mini';

type Picked<T> = { value: T; source: SettingSource } | null;

/** The first of flag, environment variables (in order), config files (the project's first). */
function pick<T>(
  flag: { name: string; value: T | undefined },
  env: NodeJS.ProcessEnv,
  envNames: string[],
  files: LoadedConfigFile[],
  fromFile: (f: LoadedConfigFile) => T | undefined,
): Picked<T | string> {
  if (flag.value !== undefined) return { value: flag.value, source: { kind: 'flag', flag: flag.name } };
  for (const name of envNames) {
    const value = env[name]?.trim();
    if (value) return { value, source: { kind: 'env', name } };
  }
  for (const file of [...files].reverse()) {
    const value = fromFile(file);
    if (value !== undefined) return { value, source: { kind: 'file', path: file.path } };
  }
  return null;
}

function storageOptions(values: { 'database-url'?: string; 'data-dir'?: string }, env: NodeJS.ProcessEnv, cwd: string): StorageOptions & { sources: Pick<ChatSources, 'databaseUrl' | 'dataDir'> } {
  const workingDirectory = resolve(cwd);
  const databaseUrl = pick({ name: '--database-url', value: values['database-url'] }, env, ['DATABASE_URL'], [], () => undefined);
  return {
    ...(databaseUrl ? { databaseUrl: databaseUrl.value } : {}),
    dataDir: resolve(workingDirectory, values['data-dir'] ?? join('.openwork', 'db')),
    workingDirectory,
    sources: {
      databaseUrl: databaseUrl?.source ?? { kind: 'default', note: 'none: PGlite' },
      dataDir: values['data-dir'] !== undefined ? { kind: 'flag', flag: '--data-dir' } : { kind: 'default' },
    },
  };
}

function parse(argv: string[], options: NonNullable<ParseArgsConfig['options']>) {
  try {
    return parseArgs({ args: argv, options, allowPositionals: true, strict: true });
  } catch (error) {
    // The parser explains over several lines; the first one says what is wrong.
    throw new UsageError((error as Error).message.split('\n')[0]!);
  }
}

const CHAT_FLAGS = {
  session: { type: 'string' },
  model: { type: 'string' },
  api: { type: 'string' },
  'base-url': { type: 'string' },
  'reasoning-effort': { type: 'string' },
  'max-output-tokens': { type: 'string' },
  mode: { type: 'string' },
  'context-window': { type: 'string' },
  'database-url': { type: 'string' },
  'data-dir': { type: 'string' },
  mcp: { type: 'string' },
} as const;

/** `openwork exec "<prompt>" [--json] [--approve never|on-request|full-auto] [chat options]`. */
export function parseExecOptions(argv: string[], env: NodeJS.ProcessEnv = process.env, cwd = process.cwd(), files: LoadedConfigFile[] = []): ExecOptions {
  const { values } = parse(argv, { ...CHAT_FLAGS, json: { type: 'boolean' }, approve: { type: 'string' } });
  const v = values as Record<string, string | boolean | undefined>;
  const approve = (v.approve as string | undefined) ?? 'never';
  if (approve !== 'never' && approve !== 'on-request' && approve !== 'full-auto') {
    throw new UsageError(`--approve must be "never", "on-request" or "full-auto", not ${JSON.stringify(approve)}`);
  }
  // The chat options are parsed by the chat parser, without the two flags only exec knows.
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--json') continue;
    if (arg === '--approve') {
      i++;
      continue;
    }
    if (arg.startsWith('--approve=')) continue;
    rest.push(arg);
    if (arg === '--') rest.push(...argv.slice(i + 1));
    if (arg === '--') break;
  }
  const { prompt, ...chat } = parseChatOptions(rest, env, cwd, files);
  if (!prompt) throw new UsageError('exec needs a prompt: openwork exec "<prompt>"');
  return { ...chat, prompt, json: v.json === true, approve };
}

/** `openwork chat [prompt] [options]`; `files` are the config files that exist, the user's first. */
export function parseChatOptions(argv: string[], env: NodeJS.ProcessEnv = process.env, cwd = process.cwd(), files: LoadedConfigFile[] = []): ChatOptions {
  const { values, positionals } = parse(argv, CHAT_FLAGS);
  const v = values as Record<string, string | undefined>;
  const baseURL = pick({ name: '--base-url', value: v['base-url'] }, env, ['OPENAI_BASE_URL'], files, (f) => f.config.baseUrl);
  const api = pick({ name: '--api', value: v.api }, env, ['OPENWORK_API'], files, (f) => f.config.api) ?? {
    value: baseURL ? 'chat' : 'responses',
    source: { kind: 'default', note: baseURL ? 'a base URL is set' : undefined },
  };
  if (api.value !== 'responses' && api.value !== 'chat') throw new UsageError(`--api must be "responses" or "chat", not ${JSON.stringify(api.value)}`);
  const model = pick({ name: '--model', value: v.model }, env, ['OPENWORK_MODEL', 'OPENAI_MODEL'], files, (f) => f.config.model) ?? {
    value: DEFAULT_MODEL,
    source: { kind: 'default' },
  };
  const mode = pick({ name: '--mode', value: v.mode }, env, ['OPENWORK_MODE'], files, (f) => f.config.mode) ?? { value: 'auto', source: { kind: 'default' } };
  const parsedMode = permissionModeSchema.safeParse(mode.value);
  if (!parsedMode.success) throw new UsageError(`--mode must be "auto" or "accept_edits", not ${JSON.stringify(mode.value)}`);
  let maxOutputTokens: number | undefined;
  if (v['max-output-tokens'] !== undefined) {
    const parsed = positiveInt.safeParse(v['max-output-tokens']);
    if (!parsed.success) throw new UsageError('--max-output-tokens must be a positive integer');
    maxOutputTokens = parsed.data;
  }
  const window = pick({ name: '--context-window', value: v['context-window'] }, env, ['OPENWORK_CONTEXT_WINDOW'], files, (f) => (f.config.contextWindow !== undefined ? String(f.config.contextWindow) : undefined));
  let contextWindow: number | undefined;
  if (window) {
    const parsed = positiveInt.safeParse(window.value);
    if (!parsed.success) throw new UsageError('--context-window must be a positive integer');
    contextWindow = parsed.data;
  }
  // MCP servers merge by name; the project's file replaces a server of the same name.
  let mcpServers: McpServers | undefined;
  const mcpSources: Record<string, SettingSource> = {};
  for (const file of files) {
    for (const [name, server] of Object.entries(file.config.mcpServers ?? {})) {
      mcpServers = { ...mcpServers, [name]: server };
      mcpSources[name] = { kind: 'file', path: file.path };
    }
  }
  const prompt = positionals.join(' ').trim();
  const { sources: storageSources, ...storage } = storageOptions(v, env, cwd);
  return {
    ...storage,
    ...(prompt !== '' ? { prompt } : {}),
    ...(v.session ? { sessionId: v.session } : {}),
    model: model.value,
    api: api.value,
    ...(baseURL ? { baseURL: baseURL.value } : {}),
    ...(v['reasoning-effort'] ? { reasoningEffort: v['reasoning-effort'] } : {}),
    ...(maxOutputTokens !== undefined ? { maxOutputTokens } : {}),
    ...(v.mcp ? { mcpConfig: resolve(cwd, v.mcp) } : {}),
    ...(contextWindow !== undefined ? { contextWindow } : {}),
    mode: parsedMode.data,
    ...(mcpServers ? { mcpServers } : {}),
    sources: {
      model: model.source,
      api: api.source,
      baseURL: baseURL?.source ?? { kind: 'default', note: 'https://api.openai.com/v1' },
      mode: mode.source,
      contextWindow: window?.source ?? { kind: 'default', note: 'unknown' },
      mcpServers: mcpSources,
      ...storageSources,
    },
  };
}

/** `openwork sessions [options]`. */
export function parseSessionsOptions(argv: string[], env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): SessionsOptions {
  const { values, positionals } = parse(argv, {
    limit: { type: 'string' },
    'database-url': { type: 'string' },
    'data-dir': { type: 'string' },
  });
  if (positionals.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`);
  const v = values as Record<string, string | undefined>;
  const limit = positiveInt.safeParse(v.limit ?? '50');
  if (!limit.success) throw new UsageError('--limit must be a positive integer');
  const { sources: _sources, ...storage } = storageOptions(v, env, cwd);
  return { ...storage, limit: limit.data };
}
