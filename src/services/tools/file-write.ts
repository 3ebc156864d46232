/**
 * @module services/tools/file-write
 * What `write` and `edit` share: reading the current content under read-before-edit, creating
 * missing parent directories only where the policy allows writing them, writing, recording the
 * new hash, and the `file_change` artifact.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { SandboxPolicy } from '../permissions/policy.js';
import type { ToolContext, ToolResult } from './define.js';
import { fileChangeArtifact, sha256 } from './file-change.js';
import { failedResult } from './sandboxed.js';
import type { ToolRuntime } from './tool-runtime.js';

/** write/edit handle text files up to 1 MiB (reference §11.2). */
export const MAX_WRITE_BYTES = 1024 * 1024;

export type Current = { ok: true; content: string | null } | { ok: false; result: ToolResult };

/** The file's current text (null when it does not exist), after the read-before-edit check. */
export async function currentContent(runtime: ToolRuntime, ctx: ToolContext, path: string): Promise<Current> {
  let info;
  try {
    info = await stat(path);
  } catch {
    return { ok: true, content: null };
  }
  if (info.isDirectory()) return { ok: false, result: failedResult('execution_failed', `${path} is a directory.`) };
  if (info.size > MAX_WRITE_BYTES) return { ok: false, result: failedResult('execution_failed', `${path} is larger than ${MAX_WRITE_BYTES} bytes; write and edit handle files up to 1 MiB.`) };
  const buf = await readFile(path);
  const refusal = runtime.observations.checkEditable(ctx.sessionId, path, sha256(buf));
  if (refusal) return { ok: false, result: failedResult('execution_failed', refusal) };
  if (buf.subarray(0, 8192).includes(0)) return { ok: false, result: failedResult('execution_failed', `${path} is a binary file; write and edit handle text files only.`) };
  return { ok: true, content: buf.toString('utf8') };
}

/** Writes `after`, creating parents the policy lets the file tools write; returns the result. */
export async function commitWrite(
  runtime: ToolRuntime,
  ctx: ToolContext,
  policy: SandboxPolicy,
  path: string,
  before: string | null,
  after: string,
  summary: (artifact: ReturnType<typeof fileChangeArtifact>) => string,
): Promise<ToolResult> {
  const missing: string[] = [];
  for (let dir = dirname(path); !existsSync(dir); dir = dirname(dir)) missing.unshift(dir);
  for (const dir of missing) {
    if (!policy.check(dir, 'write', 'file_tool')) {
      return failedResult('execution_failed', `the directory ${dirname(path)} does not exist, and ${dir} may not be created under the current grants.`);
    }
  }
  if (missing.length > 0) await mkdir(dirname(path), { recursive: true });
  await writeFile(path, after, 'utf8');
  runtime.observations.record(ctx.sessionId, path, sha256(after));
  const artifact = fileChangeArtifact({ changeId: ctx.toolCallId, path, before, after });
  return { status: 'succeeded', text: summary(artifact), artifacts: [artifact] };
}
