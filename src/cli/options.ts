/**
 * @module cli/options
 * The command line of `openwork chat` and `openwork sessions`, parsed and checked once, with the
 * environment defaults (OPENAI_*, DATABASE_URL) applied here and nowhere else.
 */
import { resolve, join } from 'node:path';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { z } from 'zod';

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

function storageOptions(values: { 'database-url'?: string; 'data-dir'?: string }, env: NodeJS.ProcessEnv, cwd: string): StorageOptions {
  const workingDirectory = resolve(cwd);
  const databaseUrl = values['database-url'] ?? (env.DATABASE_URL?.trim() || undefined);
  return {
    ...(databaseUrl ? { databaseUrl } : {}),
    dataDir: resolve(workingDirectory, values['data-dir'] ?? join('.openwork', 'db')),
    workingDirectory,
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
  'database-url': { type: 'string' },
  'data-dir': { type: 'string' },
  mcp: { type: 'string' },
} as const;

/** `openwork exec "<prompt>" [--json] [--approve never|on-request|full-auto] [chat options]`. */
export function parseExecOptions(argv: string[], env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): ExecOptions {
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
  const { prompt, ...chat } = parseChatOptions(rest, env, cwd);
  if (!prompt) throw new UsageError('exec needs a prompt: openwork exec "<prompt>"');
  return { ...chat, prompt, json: v.json === true, approve };
}

/** `openwork chat [prompt] [options]`. */
export function parseChatOptions(argv: string[], env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): ChatOptions {
  const { values, positionals } = parse(argv, CHAT_FLAGS);
  const v = values as Record<string, string | undefined>;
  const baseURL = v['base-url'] ?? (env.OPENAI_BASE_URL?.trim() || undefined);
  const api = v.api ?? (env.OPENWORK_API?.trim() || undefined) ?? (baseURL ? 'chat' : 'responses');
  if (api !== 'responses' && api !== 'chat') throw new UsageError(`--api must be "responses" or "chat", not ${JSON.stringify(api)}`);
  let maxOutputTokens: number | undefined;
  if (v['max-output-tokens'] !== undefined) {
    const parsed = positiveInt.safeParse(v['max-output-tokens']);
    if (!parsed.success) throw new UsageError('--max-output-tokens must be a positive integer');
    maxOutputTokens = parsed.data;
  }
  const prompt = positionals.join(' ').trim();
  return {
    ...storageOptions(v, env, cwd),
    ...(prompt !== '' ? { prompt } : {}),
    ...(v.session ? { sessionId: v.session } : {}),
    model: v.model ?? (env.OPENWORK_MODEL?.trim() || undefined) ?? (env.OPENAI_MODEL?.trim() || undefined) ?? DEFAULT_MODEL,
    api,
    ...(baseURL ? { baseURL } : {}),
    ...(v['reasoning-effort'] ? { reasoningEffort: v['reasoning-effort'] } : {}),
    ...(maxOutputTokens !== undefined ? { maxOutputTokens } : {}),
    ...(v.mcp ? { mcpConfig: resolve(cwd, v.mcp) } : {}),
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
  return { ...storageOptions(v, env, cwd), limit: limit.data };
}
