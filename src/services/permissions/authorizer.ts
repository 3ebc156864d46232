/**
 * @module services/permissions/authorizer
 * `permissionPolicy`: the decision flow of reference §4.1 as an `Authorizer`. Per call, from the
 * mode the call runs under and the danger detector only:
 *   1. a file tool reaching the runtime's store or configuration, or writing a hard-protected
 *      path → rule denial (no card);
 *   2. an escalation request → refused with an explanation if invalid (no card), else an
 *      escalation card for its paths and/or bash's network (annotated when the command is
 *      dangerous);
 *   3. bash without a working sandbox → `sandbox_unavailable` (not run, no card);
 *   4. bash in `auto` whose command hits the danger list → a danger card;
 *   5. otherwise run; the sandbox (kernel or fence) refuses what the policy does not allow.
 * Tools that are not sandboxed keep their own `authorize`.
 */
import { existsSync } from 'node:fs';
import { join, sep } from 'node:path';
import type { Authorizer } from '../runtime.js';
import type { Authorization, AuthorizeContext } from '../tools/define.js';
import type { PermissionCard } from '../../protocol/updates.js';
import { isSandboxedTool, type SandboxedTool } from '../tools/sandboxed.js';
import type { ToolRuntime } from '../tools/tool-runtime.js';
import { deletesFiles, type DangerHit } from './danger.js';
import { hasEscalation, validateEscalation } from './escalation.js';
import { PathResolutionError, resolveToolPath } from './paths.js';
import type { PathGrant, SandboxPolicy } from './policy.js';
import { GIT_GRANT_NOTE, kernelPathText, protectedPathText, runtimePathText, sandboxUnavailableText } from '../../protocol/model-texts.js';

/** The policy's own cards name every field; only hosts' cards lean on the defaults. */
type Card = Omit<PermissionCard, 'decisions'>;

/** What the danger card says about a hit (reference §4.12). */
export function dangerNote(hit: DangerHit): string {
  return `${dangerClause(hit)}: \`${hit.match}\` (${hit.key}); it still runs inside the current mode's sandbox`;
}

/** What kind of danger a hit is: a deleting command, or one the detector cannot see through. */
function dangerClause(hit: DangerHit): string {
  switch (hit.key) {
    case 'rm_recursive_or_force':
    case 'find_delete':
    case 'git_clean_force':
      return 'this command deletes files';
    case 'nesting_too_deep':
      return 'this command nests shells too deeply to be checked';
    case 'unparsable':
      return 'this command could not be parsed, so what it runs was not checked';
    case 'dynamic_command':
      return 'this command runs code chosen only when it runs, so what it runs was not checked';
    default: {
      const never: never = hit.key;
      throw new Error(`unknown danger key ${String(never)}`);
    }
  }
}

function describeGrants(grants: readonly PathGrant[], network: boolean): string {
  const parts = grants.map((g) => `${g.access === 'write' ? 'writing' : 'reading'} ${g.path} (${g.scope === 'exact' ? 'file' : 'subtree'})`);
  if (network) parts.unshift(NETWORK_GRANT_LABEL);
  return parts.join(', ');
}

/** How a card names the network permission to the user. */
export const NETWORK_GRANT_LABEL = 'network access (the internet and the host\'s services on 127.0.0.1 and unix sockets)';

/**
 * Equal keys are covered by the same turn- or session-scoped grant: the exact paths, the network,
 * and the command when it is dangerous. A request for the network alone has its own key,
 * `network`, so "allow network for this session" covers every later network-only request in the
 * same workspace and nothing else.
 */
export function escalationGrantKey(grants: readonly PathGrant[], danger: { hit: DangerHit; command: string } | null, network = false): string {
  const paths = [...grants].map((g) => [g.path, g.access, g.scope]).sort((a, b) => (a.join('\u0000') < b.join('\u0000') ? -1 : 1));
  const base = paths.length === 0 && network ? 'network' : `escalation:${JSON.stringify(paths)}${network ? '|network' : ''}`;
  return `${base}${danger ? `|danger:${danger.hit.key}:${danger.command}` : ''}`;
}

export function dangerGrantKey(hit: DangerHit, command: string): string {
  return `danger:${hit.key}:${command}`;
}

/**
 * Whether a write grant reaches into a git directory: it names a `.git` or something below one, or
 * it is a subtree with a `.git` directly inside.
 */
function opensGit(grants: readonly PathGrant[]): boolean {
  return grants.some(
    (g) => g.access === 'write' && (g.path.split(sep).some((c) => c.toLowerCase() === '.git') || (g.scope === 'subtree' && existsSync(join(g.path, '.git')))),
  );
}

function environmentId(policy: SandboxPolicy): string {
  return `workspace:${policy.workspaceRoot}`;
}

function escalationCard(tool: SandboxedTool, args: unknown, policy: SandboxPolicy, grants: PathGrant[], network: boolean, hit: DangerHit | null, previousDenial: string | undefined): Card {
  const command = tool.sandboxed.command?.(args);
  const raw = tool.sandboxed.targets(args)[0]?.path;
  let target = raw;
  try {
    if (raw !== undefined) target = resolveToolPath(raw, policy.workspaceRoot, policy.environment.home);
  } catch {
    // Shown as written; the tool reports the bad path when it runs.
  }
  const justification = (args as { justification?: string }).justification ?? '';
  return {
    toolName: tool.name,
    kind: 'escalation',
    summary: `this once, additionally allow ${describeGrants(grants, network)}${opensGit(grants) ? `; ${GIT_GRANT_NOTE}` : ''}${hit ? `; ${dangerClause(hit)}` : ''}`,
    ...(command !== undefined ? { command } : {}),
    ...(command === undefined && target !== undefined ? { path: target } : {}),
    reason: justification,
    requestedPaths: grants.map((g) => ({ path: g.path, access: g.access, scope: g.scope, tier: policy.tier(g.path) })),
    ...(network ? { network: true } : {}),
    ...(hit ? { dangerNote: dangerNote(hit), dangerMatch: hit.key, dangerSpan: hit.span } : {}),
    ...(previousDenial !== undefined ? { previousDenial } : {}),
    environmentId: environmentId(policy),
    grantKey: escalationGrantKey(grants, hit && command !== undefined ? { hit, command } : null, network),
  };
}

function dangerCard(tool: SandboxedTool, command: string, policy: SandboxPolicy, hit: DangerHit): Card {
  return {
    toolName: tool.name,
    kind: 'danger',
    summary: `this once, still inside the sandbox: run a command that ${deletesFiles(hit.key) ? 'deletes files' : 'could not be checked'} (${hit.key})`,
    command,
    dangerNote: dangerNote(hit),
    dangerMatch: hit.key,
    dangerSpan: hit.span,
    environmentId: environmentId(policy),
    grantKey: dangerGrantKey(hit, command),
  };
}

/**
 * The permission policy of reference §4 as the core's `Authorizer`.
 *
 * @example
 * const tools = await prepareToolRuntime();
 * const core = await createCore({ storage, model, tools: builtinTools(tools), authorizer: permissionPolicy(tools), sandbox: tools.sandbox });
 */
export function permissionPolicy(runtime: ToolRuntime): Authorizer {
  return {
    authorize(tool, args, ctx: AuthorizeContext): Authorization | Promise<Authorization> {
      if (!isSandboxedTool(tool)) return tool.authorize ? tool.authorize(args, ctx) : { kind: 'execute' };
      const spec = tool.sandboxed;
      const policy = runtime.policy(ctx.permissionMode, ctx.workingDirectory);

      // 1. A file tool reaching the runtime's own files or a kernel interface (/proc, /sys, /dev), or
      //    writing a hard-protected path: refused by rule, whatever else the call asks.
      for (const target of spec.targets(args)) {
        let path: string;
        try {
          path = resolveToolPath(target.path, policy.workspaceRoot, runtime.environment.home);
        } catch (error) {
          if (error instanceof PathResolutionError) continue; // The tool reports the bad path itself.
          throw error;
        }
        const tier = policy.tier(path);
        if (tier === 'runtime_private') return { kind: 'deny', text: runtimePathText(path), source: 'builtin' };
        if (tier === 'kernel_interface' && spec.actor === 'file_tool') return { kind: 'deny', text: kernelPathText(path), source: 'builtin' };
        if (target.access === 'write' && tier === 'hard_protected') return { kind: 'deny', text: protectedPathText(path), source: 'builtin' };
      }

      const command = spec.command?.(args);
      // In slices of the main thread: 64 KiB of dense words or `;` took up to a second to parse and
      // walk, and held every other session of the host meanwhile (trust-stall).
      const detect = async (): Promise<DangerHit | null> => (command !== undefined && runtime.launcher ? (runtime.danger.detectSliced?.(command) ?? runtime.danger.detect(command)) : null);

      // 2. An explicit escalation request: validated, then one card for this one call.
      if (hasEscalation(args)) {
        const verdict = validateEscalation(args, policy, spec.actor);
        if (!verdict.ok) return { kind: 'deny', text: verdict.text, source: 'builtin' };
        const { grants, network } = verdict;
        return detect().then((hit) => ({ kind: 'card', card: escalationCard(tool, args, policy, grants, network, hit, runtime.denials.get(ctx.sessionId, ctx.turnId)) }));
      }

      if (spec.actor === 'bash') {
        // 3. No sandbox: bash never runs, nobody is asked, and danger detection is skipped.
        if (!runtime.launcher) return { kind: 'deny', text: sandboxUnavailableText(runtime.sandbox.detail ?? 'no sandbox'), source: 'sandbox_unavailable' };
        // 4. Only in auto: in accept-edits the kernel refuses workspace writes anyway.
        if (policy.mode === 'auto' && command !== undefined) {
          return detect().then((hit): Authorization => (hit ? { kind: 'card', card: dangerCard(tool, command, policy, hit) } : { kind: 'execute' }));
        }
      }
      // 5. Run under the mode; the sandbox refuses what the policy does not allow.
      return { kind: 'execute' };
    },
  };
}

