/**
 * @module services/permissions/policy
 * `SandboxPolicy` (reference §4.4): one object per tool call that answers "may this actor read or
 * write this path?" for both the file-tool fence and the bash sandbox. The bubblewrap and Seatbelt
 * mount plans are derived from `check` itself, so the two actors cannot drift apart.
 */
import type { PermissionMode } from '../../protocol/input.js';
import type { SandboxEnvironment } from './environment.js';
import { canonicalize, isAncestorOrSelf, isWithin } from './paths.js';
import { tierOf, type Tier, type TierAnswer } from './tiers.js';

export type Access = 'read' | 'write';
export type GrantScope = 'exact' | 'subtree';
/** Who performs the access: the in-process file tools, or bash inside the sandbox. */
export type Actor = 'bash' | 'file_tool';

/** One extra path this call may use; `write` implies `read`. Exists only in a per-call policy. */
export interface PathGrant {
  path: string;
  access: Access;
  scope: GrantScope;
}

/** Why an access is refused; the model-visible text is chosen from it. */
export type DenialReason = 'runtime_private' | 'kernel_interface' | 'hard_protected' | 'credential' | 'sensitive' | 'outside_workspace' | 'workspace_not_writable_by_bash';

export interface SandboxPolicyInit {
  mode: PermissionMode;
  /** The session's working directory; canonicalised here. */
  workspaceRoot: string;
  pathGrants?: readonly PathGrant[];
  environment: SandboxEnvironment;
}

export class SandboxPolicy {
  readonly mode: PermissionMode;
  readonly workspaceRoot: string;
  readonly pathGrants: readonly PathGrant[];
  readonly environment: SandboxEnvironment;

  constructor(init: SandboxPolicyInit) {
    this.mode = init.mode;
    this.workspaceRoot = canonicalize(init.workspaceRoot);
    this.pathGrants = Object.freeze((init.pathGrants ?? []).map((g) => ({ ...g, path: canonicalize(g.path) })));
    this.environment = init.environment;
  }

  /** The same policy with the grants of one approved call. */
  withGrants(pathGrants: readonly PathGrant[]): SandboxPolicy {
    return new SandboxPolicy({ mode: this.mode, workspaceRoot: this.workspaceRoot, pathGrants, environment: this.environment });
  }

  tier(path: string): Tier {
    return this.tierAnswer(path).tier;
  }

  tierAnswer(path: string): TierAnswer {
    return tierOf(path, this.workspaceRoot, this.environment);
  }

  isTemp(path: string): boolean {
    return this.environment.tempDirs.some((t) => isWithin(path, t));
  }

  /** Whether `path` is in a temp dir that lies strictly below the workspace root. */
  private inTempBelowWorkspace(path: string): boolean {
    return this.environment.tempDirs.some((t) => t !== this.workspaceRoot && isWithin(t, this.workspaceRoot) && isWithin(path, t));
  }

  isInWorkspace(path: string): boolean {
    return isWithin(path, this.workspaceRoot);
  }

  /**
   * Whether bash may write the workspace: only in `auto`, and never when the workspace is `$HOME`
   * or one of its ancestors (reference §4.2).
   */
  bashWritesWorkspace(): boolean {
    return this.mode === 'auto' && !isAncestorOrSelf(this.workspaceRoot, this.environment.home);
  }

  workspaceWritable(actor: Actor): boolean {
    return actor === 'file_tool' || this.bashWritesWorkspace();
  }

  /** Whether one of this call's grants covers `path` for `access`, given the tier root it must name. */
  grantCovers(path: string, access: Access, tierRoot: string | null): boolean {
    return this.pathGrants.some(
      (g) =>
        (g.access === 'write' || access === 'read') &&
        (g.scope === 'exact' ? g.path === path : isWithin(path, g.path)) &&
        // Grants unlock only the sensitive or credential paths they name (reference §4.5).
        (tierRoot === null || isWithin(g.path, tierRoot)),
    );
  }

  /** `null` when allowed, else why not. `path` must be canonical. */
  denial(path: string, access: Access, actor: Actor): DenialReason | null {
    const { tier, root } = this.tierAnswer(path);
    switch (tier) {
      case 'runtime_private':
        // The runtime's own store and configuration: no grant exists for them, whatever the access.
        return 'runtime_private';
      case 'kernel_interface':
        // The file tools run in the runtime's process, so these would be its own state: refused by
        // rule, in every mode, whatever the grant. bash sees the sandbox's own /proc and /dev (and
        // /sys read-only), so for it these are ordinary outside paths: readable, not writable.
        if (actor === 'file_tool') return 'kernel_interface';
        return access === 'read' ? null : 'outside_workspace';
      case 'hard_protected':
        return access === 'read' ? null : 'hard_protected';
      case 'credential':
        return this.grantCovers(path, access, root) ? null : 'credential';
      case 'sensitive':
        return access === 'read' || this.grantCovers(path, 'write', root) ? null : 'sensitive';
      case 'normal': {
        if (access === 'read' || this.grantCovers(path, 'write', null)) return null;
        // Attack round 6: a workspace inside a temp dir (a checkout under /tmp) is still the
        // workspace: its rule wins there, or accept-edits bash (and every explorer) wrote it as temp.
        // A temp dir inside the workspace stays writable, as temp dirs are in both modes.
        if (this.isInWorkspace(path) && !this.inTempBelowWorkspace(path)) return this.workspaceWritable(actor) ? null : 'workspace_not_writable_by_bash';
        if (this.isTemp(path)) return null;
        return 'outside_workspace';
      }
      default: {
        const never: never = tier;
        throw new Error(`unknown tier ${String(never)}`);
      }
    }
  }

  /** Readable / writable for this actor (reference §4.4 `check`). `path` must be canonical. */
  check(path: string, access: Access, actor: Actor): boolean {
    return this.denial(path, access, actor) === null;
  }
}
