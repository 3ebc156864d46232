/**
 * @module services/sandbox/launcher
 * The platform sandbox behind bash: it turns a policy and a command into the program to start.
 */
import type { SandboxPolicy } from '../permissions/policy.js';

export interface LaunchSpec {
  file: string;
  args: string[];
  /** bubblewrap reports on fd 3 whether the command started and how it exited. */
  statusFd: boolean;
  /** Files the launcher reads from descriptors 4, 5, … (bubblewrap's `--seccomp 4`), opened read-only. */
  inputFiles?: string[];
  /** Paths hidden from the command, for classifying "Permission denied" lines. */
  hidden: string[];
  /** Removes what preparing the launch created (placeholder files). */
  cleanup(): void;
}

/** What one call may do beyond its policy's paths. */
export interface LaunchOptions {
  /**
   * Whether the command may use the host's network. Off by default: bash then runs in its own
   * network namespace with only a private loopback (no internet, no host loopback services, no
   * host abstract unix sockets). On only for a call whose network card the user approved.
   */
  network?: boolean;
}

export interface SandboxLauncher {
  readonly kind: 'bubblewrap' | 'seatbelt';
  /** The wrapped command: `/bin/bash -c <command>` with stderr joined to stdout, inside the sandbox. */
  prepare(policy: SandboxPolicy, command: string, options?: LaunchOptions): LaunchSpec;
}

/**
 * Runs `command` in a fresh bash whose stderr is joined to stdout, so the output keeps its order;
 * the launcher's own stderr stays apart and tells a sandbox failure from the command's output.
 */
export function shellArgv(command: string, prefix = ''): string[] {
  // A prefix (bash's `ulimit -u`) needs bash itself as the wrapper: dash spells the option differently.
  return prefix === '' ? ['/bin/sh', '-c', 'exec /bin/bash -c "$0" 2>&1', command] : ['/bin/bash', '-c', `${prefix}exec /bin/bash -c "$0" 2>&1`, command];
}
