/**
 * @module services/tools/tool-runtime
 * `ToolRuntime`: what the built-in tools and the permission policy of one process share — the
 * environment, the sandbox (after its self-check), the danger detector, the read-before-edit
 * observations, the last denial of each turn, and the spill directory (purged of old output at
 * start-up). Prepare it once, then hand it to `builtinTools` and `permissionPolicy`.
 */
import { DEFAULT_BASH_DISK_BYTES, DEFAULT_BASH_DISK_INODES, DEFAULT_BASH_FILE_SIZE_BYTES, type DiskBudget } from '../sandbox/disk-budget.js';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { InputError } from '../../errors.js';
import type { PermissionMode } from '../../protocol/input.js';
import type { SandboxStatus } from '../../protocol/snapshot.js';
import { loadDangerDetector, type DangerDetector } from '../permissions/danger.js';
import { detectEnvironment, withRuntimePaths, type SandboxEnvironment, type SandboxEnvironmentOptions } from '../permissions/environment.js';
import { SandboxPolicy, type PathGrant } from '../permissions/policy.js';
import type { SandboxLauncher } from '../sandbox/launcher.js';
import { sandboxSelfCheck } from '../sandbox/self-check.js';
import { FileObservations } from './observations.js';
import { purgeSpill, spillCap, SPILL_MAX_AGE_MS, type SpillOptions } from './output.js';

export interface ToolRuntimeOptions extends SandboxEnvironmentOptions {
  /** `auto` (default) runs the platform sandbox's self-check; `disabled` makes bash unavailable. */
  sandbox?: 'auto' | 'disabled';
  /** The bubblewrap executable (default: `bwrap` on PATH). */
  bwrapPath?: string;
  /** The Seatbelt executable (default `/usr/bin/sandbox-exec`). */
  sandboxExec?: string;
  /** Clock for the spill purge. */
  now?: () => number;
  spillMaxAgeMs?: number;
  /** Bytes at most in one spill file (default 64 MiB); the result's footer says when a file was cut. */
  maxSpillBytes?: number;
  /**
   * How long bash waits for a killed command's process group to go (and its pipes to close) before
   * the call ends as `outcome_unknown` (default 5,000 ms).
   */
  bashKillGraceMs?: number;
  /**
   * Processes and threads one bash call may have at once (default 1,024), enforced by a pids
   * cgroup per call where the host has a usable one, else by `RLIMIT_NPROC` for a non-root user;
   * `snapshot().sandbox.detail` says which, or that there is none (root without a pids cgroup).
   */
  bashProcessLimit?: number;
  /**
   * The largest file one bash process may write, in bytes (default 1 GiB): RLIMIT_FSIZE, set in the
   * sandbox before the command runs (trust-lease). A write past it stops the writer; the call ends
   * `disk_limit_exceeded`.
   */
  bashFileSizeLimit?: number;
  /**
   * What one bash call may take on the file systems it can write (default 4 GiB and 100,000
   * inodes), watched with `statfs` every 100 ms: past it the command is stopped and the call ends
   * `disk_limit_exceeded` (trust-lease; docs/security.md "Attack round 5").
   */
  bashDiskLimit?: { bytes?: number; inodes?: number };
  /**
   * How long one grep call may search (default 30,000 ms, `SEARCH_TIMEOUT_MS`). Matching that runs
   * past it is stopped by terminating its worker thread, and the model gets a `timeout` result.
   */
  grepTimeoutMs?: number;
}

/** bash's default wait after SIGKILL before it calls the outcome unknown. */
export const BASH_KILL_GRACE_MS = 5_000;

/**
 * grep and glob stop after this long and return what they found (grep's is `grepTimeoutMs`). It
 * lives here, beside the runtime's other defaults, so that the runtime imports nothing from the
 * tools that take it as their own type.
 */
export const SEARCH_TIMEOUT_MS = 30_000;

/** The last sandbox denial of each turn, shown on the next escalation card of that turn. */
export class DenialMemory {
  private readonly lines = new Map<string, string>();

  record(sessionId: string, turnId: string, line: string): void {
    const key = `${sessionId}\u0000${turnId}`;
    this.lines.delete(key);
    this.lines.set(key, line);
    if (this.lines.size > 1024) this.lines.delete(this.lines.keys().next().value!);
  }

  get(sessionId: string, turnId: string): string | undefined {
    return this.lines.get(`${sessionId}\u0000${turnId}`);
  }
}

export interface ToolRuntime {
  /** The current environment; `protectRuntimePaths` replaces it with one that protects more. */
  readonly environment: SandboxEnvironment;
  /** Shown in `snapshot().sandbox` (pass it to `createCore({ sandbox })`). */
  readonly sandbox: SandboxStatus;
  /** null when the sandbox is unavailable: bash then never runs. */
  readonly launcher: SandboxLauncher | null;
  readonly danger: DangerDetector;
  readonly observations: FileObservations;
  readonly denials: DenialMemory;
  readonly spillRoot: string;
  /** The cap of each spill file, for the tools that write them. */
  readonly spill: Required<SpillOptions>;
  /** See `ToolRuntimeOptions.bashKillGraceMs`. */
  readonly bashKillGraceMs: number;
  /** See `ToolRuntimeOptions.grepTimeoutMs`. */
  readonly grepTimeoutMs: number;
  /** See `ToolRuntimeOptions.bashFileSizeLimit`. */
  readonly bashFileSizeLimit: number;
  /** See `ToolRuntimeOptions.bashDiskLimit`. */
  readonly bashDiskLimit: DiskBudget;
  readonly startup: { purgedSpillDirectories: number };
  /** The policy of one call: the mode it runs under, its workspace, and its approved grants. */
  policy(mode: PermissionMode, workingDirectory: string, grants?: readonly PathGrant[]): SandboxPolicy;
  /**
   * Adds private runtime paths (a store's data directory, a configuration file) that no tool may
   * read or write from the next call on. `createCore` calls it with its storage's paths.
   */
  protectRuntimePaths(paths: readonly string[]): void;
}

/**
 * Detects the environment, runs the sandbox self-check (cached per process), loads the bash
 * grammar and purges spill directories older than 7 days.
 *
 * @example
 * const tools = await prepareToolRuntime();
 * const core = await createCore({ storage, model, tools: builtinTools(tools), authorizer: permissionPolicy(tools), sandbox: tools.sandbox });
 */
export async function prepareToolRuntime(options: ToolRuntimeOptions = {}): Promise<ToolRuntime> {
  const spill = { maxSpillBytes: spillCap(options) };
  const bashKillGraceMs = options.bashKillGraceMs ?? BASH_KILL_GRACE_MS;
  if (!Number.isSafeInteger(bashKillGraceMs) || bashKillGraceMs <= 0) {
    throw new InputError('invalid_request', `bashKillGraceMs must be a positive integer, got ${JSON.stringify(options.bashKillGraceMs)}`);
  }
  if (options.bashProcessLimit !== undefined && (!Number.isSafeInteger(options.bashProcessLimit) || options.bashProcessLimit < 1)) {
    throw new InputError('invalid_request', `bashProcessLimit must be a positive integer, got ${JSON.stringify(options.bashProcessLimit)}`);
  }
  const positive = (name: string, value: unknown): number => {
    if (!Number.isSafeInteger(value) || (value as number) < 1) throw new InputError('invalid_request', `${name} must be a positive integer, got ${JSON.stringify(value)}`);
    return value as number;
  };
  const bashFileSizeLimit = positive('bashFileSizeLimit', options.bashFileSizeLimit ?? DEFAULT_BASH_FILE_SIZE_BYTES);
  const bashDiskLimit: DiskBudget = {
    bytes: positive('bashDiskLimit.bytes', options.bashDiskLimit?.bytes ?? DEFAULT_BASH_DISK_BYTES),
    inodes: positive('bashDiskLimit.inodes', options.bashDiskLimit?.inodes ?? DEFAULT_BASH_DISK_INODES),
  };
  const grepTimeoutMs = options.grepTimeoutMs ?? SEARCH_TIMEOUT_MS;
  if (!Number.isSafeInteger(grepTimeoutMs) || grepTimeoutMs <= 0) {
    throw new InputError('invalid_request', `grepTimeoutMs must be a positive integer, got ${JSON.stringify(options.grepTimeoutMs)}`);
  }
  let environment = detectEnvironment(options);
  mkdirSync(environment.openworkHome, { recursive: true });
  const spillRoot = join(environment.openworkHome, 'spill');
  const purged = purgeSpill(spillRoot, (options.now ?? Date.now)(), options.spillMaxAgeMs ?? SPILL_MAX_AGE_MS);
  const stateDir = join(environment.openworkHome, 'sandbox');
  const [check, danger] = await Promise.all([
    options.sandbox === 'disabled'
      ? Promise.resolve({ status: { available: false, kind: 'none', detail: 'the sandbox was disabled by configuration' }, launcher: null })
      : sandboxSelfCheck({
          platform: environment.platform,
          stateDir,
          ...(options.bwrapPath !== undefined ? { bwrapPath: options.bwrapPath } : {}),
          ...(options.sandboxExec !== undefined ? { sandboxExec: options.sandboxExec } : {}),
          ...(options.bashProcessLimit !== undefined ? { processLimit: options.bashProcessLimit } : {}),
        }),
    loadDangerDetector(),
  ]);
  return {
    get environment() {
      return environment;
    },
    sandbox: check.status,
    launcher: check.launcher,
    danger,
    observations: new FileObservations(),
    denials: new DenialMemory(),
    spillRoot,
    spill,
    bashKillGraceMs,
    grepTimeoutMs,
    bashFileSizeLimit,
    bashDiskLimit,
    startup: { purgedSpillDirectories: purged },
    policy: (mode, workingDirectory, grants = []) => new SandboxPolicy({ mode, workspaceRoot: workingDirectory, pathGrants: grants, environment }),
    protectRuntimePaths(paths) {
      environment = withRuntimePaths(environment, paths);
    },
  };
}
