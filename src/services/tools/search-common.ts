/**
 * @module services/tools/search-common
 * The walk root of `grep`, `glob` and `list`: the `path` argument (default: the workspace root),
 * fenced for reading, and how a result mentions paths.
 */
import { relative, sep } from 'node:path';
import type { SandboxPolicy } from '../permissions/policy.js';
import { isWithin } from '../permissions/paths.js';
import type { ToolContext, ToolResult } from './define.js';
import { fence, resolvePath } from './sandboxed.js';
import { SEARCH_TIMEOUT_MS, type ToolRuntime } from './tool-runtime.js';
import { openForRead } from './verified-open.js';

export { SEARCH_TIMEOUT_MS };

export type Root = { ok: true; path: string; isDirectory: boolean } | { ok: false; result: ToolResult };

export async function searchRoot(runtime: ToolRuntime, ctx: ToolContext, policy: SandboxPolicy, raw: string | undefined): Promise<Root> {
  const resolved = resolvePath(runtime, policy, raw ?? '.');
  if (!resolved.ok) return resolved;
  const denied = fence(runtime, ctx, policy, resolved.path, 'read');
  if (denied) return { ok: false, result: denied };
  const opened = await openForRead({ runtime, ctx, policy }, resolved.path, `Path not found: ${resolved.path}`);
  if (!opened.ok) return opened;
  await opened.handle.close().catch(() => undefined);
  return { ok: true, path: resolved.path, isDirectory: opened.info.isDirectory() };
}

/** Workspace paths are shown relative to the workspace root, others in full. */
export function displayPath(policy: SandboxPolicy, path: string): string {
  if (path !== policy.workspaceRoot && isWithin(path, policy.workspaceRoot)) return relative(policy.workspaceRoot, path).split(sep).join('/');
  return path;
}

export function skippedNote(skipped: number): string {
  return skipped > 0 ? `\n(${skipped} path${skipped === 1 ? ' was' : 's were'} skipped: not readable under the current mode)` : '';
}

export function stoppedNote(stopped: 'deadline' | 'aborted' | null): string {
  if (stopped === 'deadline') return `\n(search stopped after ${SEARCH_TIMEOUT_MS / 1000} s; results are partial)`;
  return '';
}
