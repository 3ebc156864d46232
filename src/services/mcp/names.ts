/**
 * @module services/mcp/names
 * Model-visible names of MCP tools: `<server>__<tool>`, within the providers' tool-name limit
 * (`^[a-zA-Z0-9_-]{1,64}$`, OpenAI's and the strictest of the common ones). Characters outside it
 * become `_`; a name too long, or equal to another after sanitising, gets a short hash of the
 * original server and tool names (cut to fit), so the same catalog always yields the same names.
 */
import { createHash } from 'node:crypto';

const MAX_NAME = 64;
const HASH_CHARS = 8;

function sanitize(part: string): string {
  const clean = part.replace(/[^a-zA-Z0-9_-]/g, '_');
  return clean === '' ? '_' : clean;
}

function hashOf(server: string, tool: string): string {
  return createHash('sha256').update(`${server}\u0000${tool}`).digest('hex').slice(0, HASH_CHARS);
}

/** `<prefix>_<hash>` cut so that the whole fits the limit. */
function hashed(base: string, server: string, tool: string, salt = ''): string {
  const suffix = `_${hashOf(server, tool + salt)}`;
  return `${base.slice(0, MAX_NAME - suffix.length)}${suffix}`;
}

/**
 * The namespaced names of one server's tools, in the order given: original tool name -> name the
 * model sees. Names that are taken already (`taken`) are avoided too.
 */
export function namespacedToolNames(server: string, tools: readonly string[], taken: ReadonlySet<string> = new Set()): Map<string, string> {
  const used = new Set(taken);
  const names = new Map<string, string>();
  // Names that need no change claim theirs first; the rest follow in sorted order, so which of two
  // clashing tools keeps the readable name never depends on the order the server listed them in.
  const unique = [...new Set(tools)].sort();
  const clean = (tool: string) => `${server}__${tool}`.length <= MAX_NAME && sanitize(server) === server && sanitize(tool) === tool;
  for (const tool of [...unique.filter(clean), ...unique.filter((t) => !clean(t))]) {
    const base = `${sanitize(server)}__${sanitize(tool)}`;
    let name = base.length <= MAX_NAME ? base : hashed(base, server, tool);
    for (let salt = 1; used.has(name); salt++) name = hashed(base, server, tool, salt === 1 ? '' : String(salt));
    used.add(name);
    names.set(tool, name);
  }
  return names;
}
