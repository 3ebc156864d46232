/**
 * @module services/tools/file-write
 * What `write` and `edit` share: resolving and fencing the path, opening the file and judging what
 * was opened (verified-open.ts), reading its current content under read-before-edit through that
 * descriptor, creating a new file (and missing parent directories, only where the policy allows
 * writing them) through its verified parent, writing, recording the new hash, and the
 * `file_change` artifact.
 */
import type { FileHandle } from 'node:fs/promises';
import type { SandboxPolicy } from '../permissions/policy.js';
import type { ToolContext } from './define.js';
import { failedResult, succeededResult, type ToolResult } from '../../protocol/tool-result.js';
import { fileChangeArtifact, sha256 } from './file-change.js';
import type { ToolRuntime } from './tool-runtime.js';
import { callPolicy, fence, resolvePath } from './sandboxed.js';
import { createVerified, openForWrite, readJudged, writeAll } from './verified-open.js';

/** write/edit handle text files up to 1 MiB (reference §11.2). */
export const MAX_WRITE_BYTES = 1024 * 1024;

/** The file a write or edit works on: open and judged, or not there yet. */
export interface WriteTarget {
  path: string;
  /** The open descriptor of the existing file; `null` when it does not exist yet. */
  handle: FileHandle | null;
  /** Its current text; `null` when it does not exist. */
  content: string | null;
}

type Current = { ok: true; target: WriteTarget } | { ok: false; result: ToolResult };

/**
 * Opens `path` for writing and reads its current text through the descriptor, after the
 * read-before-edit check. On success the caller must `closeTarget` it.
 */
async function currentContent(runtime: ToolRuntime, ctx: ToolContext, policy: SandboxPolicy, path: string): Promise<Current> {
  const opened = await openForWrite({ runtime, ctx, policy }, path);
  if (!opened.ok) return opened;
  if (opened.handle === null) return { ok: true, target: { path, handle: null, content: null } };
  const handle = opened.handle;
  const refuse = async (text: string): Promise<Current> => {
    await handle.close();
    return { ok: false, result: failedResult('execution_failed', text) };
  };
  if (opened.info!.size > MAX_WRITE_BYTES) return refuse(`${path} is larger than ${MAX_WRITE_BYTES} bytes; write and edit handle files up to 1 MiB.`);
  const buf = await readJudged(handle, opened.info!.size, MAX_WRITE_BYTES);
  const refusal = runtime.observations.checkEditable(ctx.sessionId, path, sha256(buf));
  if (refusal) return refuse(refusal);
  if (buf.subarray(0, 8192).includes(0)) return refuse(`${path} is a binary file; write and edit handle text files only.`);
  return { ok: true, target: { path, handle, content: buf.toString('utf8') } };
}

/** Closes what `currentContent` opened. */
async function closeTarget(target: WriteTarget): Promise<void> {
  await target.handle?.close().catch(() => undefined);
}

/**
 * The opening steps `write` and `edit` share: the call's policy, `raw` resolved and fenced for
 * writing, and the file opened and judged by `currentContent`. `work` runs on what was opened, and
 * the file is closed after it, whatever it returns or throws. A refusal on the way is the result.
 */
export async function withWriteTarget(
  runtime: ToolRuntime,
  ctx: ToolContext,
  raw: string,
  work: (policy: SandboxPolicy, target: WriteTarget) => Promise<ToolResult>,
): Promise<ToolResult> {
  const policy = callPolicy(runtime, ctx);
  const resolved = resolvePath(runtime, policy, raw);
  if (!resolved.ok) return resolved.result;
  const denied = fence(runtime, ctx, policy, resolved.path, 'write');
  if (denied) return denied;
  const current = await currentContent(runtime, ctx, policy, resolved.path);
  if (!current.ok) return current.result;
  try {
    return await work(policy, current.target);
  } finally {
    await closeTarget(current.target);
  }
}

/**
 * Writes `after` through the target's descriptor (or creates the file through its verified
 * parent) and returns the result.
 */
export async function commitWrite(
  runtime: ToolRuntime,
  ctx: ToolContext,
  policy: SandboxPolicy,
  target: WriteTarget,
  after: string,
  summary: (artifact: ReturnType<typeof fileChangeArtifact>) => string,
): Promise<ToolResult> {
  const { path } = target;
  if (target.handle !== null) {
    await writeAll(target.handle, after);
  } else {
    const created = await createVerified({ runtime, ctx, policy }, path);
    if (!created.ok) return created.result;
    try {
      await writeAll(created.handle, after);
    } finally {
      await created.handle.close().catch(() => undefined);
    }
  }
  runtime.observations.record(ctx.sessionId, path, sha256(after));
  const artifact = fileChangeArtifact({ changeId: ctx.toolCallId, path, before: target.content, after });
  return succeededResult(summary(artifact), { artifacts: [artifact] });
}
