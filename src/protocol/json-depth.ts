/**
 * @module protocol/json-depth
 * How deeply a parsed JSON value nests, measured without recursion. `JSON.parse` reads a value
 * nested 100,000 levels deep without complaint, but everything after it that walks the value
 * recursively (canonical JSON for the doom-loop check and the trace's hashes, `JSON.stringify` for
 * the card and the store, the storable-text scan, a tool's schema) overflows the stack there; a
 * `RangeError` thrown inside the Turn chart's guard left the turn waiting forever. So values the
 * model chooses are measured here, at the boundary, before any of that sees them.
 */

/**
 * The deepest nesting a tool call's arguments (and a provider's opaque item) may have. Real
 * arguments nest a few levels; an MCP tool's input schema may nest 64 (`MCP_SCHEMA_MAX_DEPTH`),
 * which describes values of about half that depth.
 */
export const MAX_JSON_DEPTH = 64;

/**
 * True when `value` nests deeper than `maxDepth` arrays and objects (a scalar is depth 0, `[]` and
 * `{}` depth 1). It stops at the first path that is too deep, so the cost is bounded by what it
 * reads before then.
 */
export function nestsDeeperThan(value: unknown, maxDepth: number): boolean {
  const stack: Array<{ value: unknown; depth: number }> = [{ value, depth: 0 }];
  while (stack.length > 0) {
    const { value: current, depth } = stack.pop()!;
    if (current === null || typeof current !== 'object') continue;
    if (depth + 1 > maxDepth) return true;
    const children = Array.isArray(current) ? current : Object.values(current as Record<string, unknown>);
    for (const child of children) if (child !== null && typeof child === 'object') stack.push({ value: child, depth: depth + 1 });
  }
  return false;
}
