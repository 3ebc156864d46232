/**
 * @module cli/config
 * The CLI's config files: `~/.openwork/config.json` (the user's), then `./.openwork/config.json`
 * (the project's), each optional, each checked with zod. They set the model, base URL, API,
 * permission mode, context window and MCP servers; the environment and the flags override them (see options.ts).
 * JSON only: no TOML parser is installed, and a second format is not worth a dependency.
 */
import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { InputError } from '../errors.js';
import { permissionModeSchema } from '../protocol/input.js';
import { mcpServersSchema } from '../services/mcp/config.js';

/** MCP servers use the map format of other MCP hosts, checked by the MCP module's own schema. */
export { mcpServersSchema, type McpServerConfig, type McpServers } from '../services/mcp/config.js';

/** A config file's content; unknown keys are refused so that a typo does not pass silently. */
export const configFileSchema = z.strictObject({
  model: z.string().trim().min(1).optional(),
  baseUrl: z.url().optional(),
  api: z.enum(['responses', 'chat']).optional(),
  mode: permissionModeSchema.optional(),
  contextWindow: z.int().positive().optional(),
  mcpServers: mcpServersSchema.optional(),
});
export type ConfigFile = z.infer<typeof configFileSchema>;

/** A config file that was found and read. */
export interface LoadedConfigFile {
  path: string;
  config: ConfigFile;
}

/** Where the two config files are: `home` is the user's home directory, `cwd` the working directory. */
export function configPaths(cwd: string, home: string = homedir()): { user: string; project: string } {
  return { user: join(home, '.openwork', 'config.json'), project: join(cwd, '.openwork', 'config.json') };
}

/**
 * Reads one config file; null when it does not exist. A file that is not JSON or not the schema is
 * `configuration_invalid`, naming the file and the first problem (the CLI exits 2 on it).
 */
export function readConfigFile(path: string): LoadedConfigFile | null {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new InputError('configuration_invalid', `cannot read ${path}: ${(error as Error).message}`, { cause: error, details: { path } });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new InputError('configuration_invalid', `${path} is not valid JSON: ${(error as Error).message}`, { cause: error, details: { path } });
  }
  const parsed = configFileSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const where = issue.path.length > 0 ? issue.path.join('.') : '(top level)';
    throw new InputError('configuration_invalid', `${path}: ${where}: ${issue.message}`, { details: { path, issues: parsed.error.issues } });
  }
  return { path, config: parsed.data };
}

/** The config files that exist, the user's first (the project's overrides it). */
export function loadConfigFiles(cwd: string, home?: string): LoadedConfigFile[] {
  const paths = configPaths(cwd, home);
  // One file when the working directory is the home directory.
  const unique = paths.user === paths.project ? [paths.user] : [paths.user, paths.project];
  return unique.map(readConfigFile).filter((f): f is LoadedConfigFile => f !== null);
}
