/**
 * @module cli/config-command
 * `openwork config`: the settings chat and exec would use here, merged from the flags, the
 * environment and the config files, each with where it came from.
 */
import { configPaths, type LoadedConfigFile } from './config.js';
import { sourceLabel, type ChatOptions } from './options.js';
import { storageLabel } from './storage.js';

/** The lines `openwork config` prints; `files` are the files that were found. */
export function configLines(options: Omit<ChatOptions, 'prompt'>, files: LoadedConfigFile[], home?: string): string[] {
  const paths = configPaths(options.workingDirectory, home);
  const found = new Set(files.map((f) => f.path));
  const s = options.sources;
  const row = (key: string, value: string, source: string) => `  ${key.padEnd(13)} ${value.padEnd(40)} ${source}`;
  const lines = [
    'precedence, highest first: flag, environment, ./.openwork/config.json, ~/.openwork/config.json, default',
    'config files:',
    `  ${paths.user} (${found.has(paths.user) ? 'read' : 'not found'})`,
    ...(paths.project !== paths.user ? [`  ${paths.project} (${found.has(paths.project) ? 'read' : 'not found'})`] : []),
    'settings:',
    row('model', options.model, sourceLabel(s.model)),
    row('api', options.api, sourceLabel(s.api)),
    row('baseUrl', options.baseURL ?? 'https://api.openai.com/v1', sourceLabel(s.baseURL)),
    row('mode', options.mode, sourceLabel(s.mode)),
    row('contextWindow', options.contextWindow !== undefined ? String(options.contextWindow) : '(unknown)', sourceLabel(s.contextWindow)),
    row('store', storageLabel(options), sourceLabel(options.databaseUrl ? s.databaseUrl : s.dataDir)),
  ];
  const servers = Object.entries(options.mcpServers ?? {});
  lines.push(servers.length === 0 ? row('mcpServers', '(none)', 'default') : 'mcpServers:');
  for (const [name, server] of servers) {
    const what = 'command' in server ? [server.command, ...(server.args ?? [])].join(' ') : server.url;
    lines.push(row(`  ${name}`, what, sourceLabel(s.mcpServers[name]!)));
  }
  return lines;
}
