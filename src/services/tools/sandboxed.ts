/**
 * @module services/tools/sandboxed
 * What a built-in tool tells the permission policy about a call before it runs: which actor it is
 * (file tool or bash), which paths it reads or writes, and the command. The policy decides from
 * this; the tool then enforces the same policy while it runs.
 */
import type { AnyTool, ToolContext, ToolResult } from './define.js';
import type { Access, Actor, PathGrant, SandboxPolicy } from '../permissions/policy.js';
import { PathResolutionError, resolveToolPath } from '../permissions/paths.js';
import { fileDenialText, invalidInputText, kernelPathText, protectedPathText, runtimePathText } from '../../protocol/model-texts.js';
import { deniedResult, failedResult } from '../../protocol/tool-result.js';
import type { ToolRuntime } from './tool-runtime.js';

export interface SandboxedAccess {
  actor: Actor;
  /** The paths (as the model wrote them) this call reads or writes. */
  targets(args: unknown): Array<{ path: string; access: Access }>;
  /** bash: the command line. */
  command?(args: unknown): string;
}

export type SandboxedTool = AnyTool & { readonly sandboxed: SandboxedAccess };

export function isSandboxedTool(tool: AnyTool): tool is SandboxedTool {
  return typeof (tool as Partial<SandboxedTool>).sandboxed === 'object' && (tool as Partial<SandboxedTool>).sandboxed !== null;
}


export function invalidArguments(message: string): ToolResult {
  return failedResult('invalid_arguments', invalidInputText(message));
}

/** The grants an approved escalation card carries for this one call (none otherwise). */
export function approvedGrants(ctx: ToolContext): PathGrant[] {
  if (ctx.approval.decision === 'none') return [];
  return (ctx.approval.card?.requestedPaths ?? []).map((p) => ({ path: p.path, access: p.access, scope: p.scope }));
}

/** Whether an approved escalation card of this call granted bash the network. */
export function approvedNetwork(ctx: ToolContext): boolean {
  return ctx.approval.decision !== 'none' && ctx.approval.card?.network === true;
}

/** The policy this call runs under: the mode read fresh for the call, plus its approved grants. */
export function callPolicy(runtime: ToolRuntime, ctx: ToolContext): SandboxPolicy {
  return runtime.policy(ctx.permissionMode, ctx.workingDirectory, approvedGrants(ctx));
}

export type Resolved = { ok: true; path: string } | { ok: false; result: ToolResult };

/** Resolves a path argument against the workspace, canonically. */
export function resolvePath(runtime: ToolRuntime, policy: SandboxPolicy, raw: string): Resolved {
  try {
    return { ok: true, path: resolveToolPath(raw, policy.workspaceRoot, runtime.environment.home) };
  } catch (error) {
    if (error instanceof PathResolutionError) return { ok: false, result: invalidArguments(error.message) };
    throw error;
  }
}

/**
 * The file-tool fence (reference §4.4): in-process, on the canonical path. A hard-protected write,
 * any access to the runtime's own store or configuration and any access to a kernel interface
 * (`/proc`, `/sys`, `/dev`) are rule denials; any other refusal
 * is a sandbox denial with the escalation hint.
 */
export function fence(runtime: ToolRuntime, ctx: ToolContext, policy: SandboxPolicy, path: string, access: Access): ToolResult | null {
  const reason = policy.denial(path, access, 'file_tool');
  if (reason === null) return null;
  if (reason === 'hard_protected' || reason === 'runtime_private' || reason === 'kernel_interface') {
    const text = reason === 'hard_protected' ? protectedPathText(path) : reason === 'runtime_private' ? runtimePathText(path) : kernelPathText(path);
    return deniedResult(text);
  }
  const text = fileDenialText(access, path, policy.mode, runtime.launcher !== null);
  runtime.denials.record(ctx.sessionId, ctx.turnId, text.split('\n')[0]!);
  return failedResult('permission_denied', text, { sandboxDenied: true });
}
