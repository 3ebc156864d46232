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
  /**
   * Open descriptors the launcher gets after the input files (bubblewrap's pinned bind sources).
   * The spec owns them: `cleanup` closes them.
   */
  descriptors?: number[];
  /** Paths hidden from the command, for classifying "Permission denied" lines. */
  hidden: string[];
  /** The paths the launcher binds or enters for this call, for classifying its refusals (bubblewrap). */
  callPaths?: string[];
  /** Removes what preparing the launch created (placeholder files) and closes its descriptors. */
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
  /**
   * RLIMIT_FSIZE of every process of the call, in bytes (trust-lease): a write past it stops the
   * writer with SIGXFSZ (or fails with EFBIG when the signal is ignored). With every capability
   * dropped the command cannot raise it. Unset: no limit.
   */
  fileSizeLimitBytes?: number;
}

export interface SandboxLauncher {
  readonly kind: 'bubblewrap' | 'seatbelt';
  /** The wrapped command: `/bin/bash -c <command>` with stderr joined to stdout, inside the sandbox. */
  prepare(policy: SandboxPolicy, command: string, options?: LaunchOptions): LaunchSpec;
}

/**
 * Closes every descriptor above 2 of the sandbox's shell before the command starts. Node opens its
 * own descriptors close-on-exec, but a host process may hold inherited ones without that flag (a
 * socket from systemd socket activation, a supervisor's pipe, a native module's connection), and
 * bubblewrap and sandbox-exec pass them on: an inherited unix socket would cross the network
 * namespace and the seccomp filter alike. `exec {n}>&-` closes the descriptor numbered `$n` (bash
 * 4.1+); the glob's own directory descriptor is closed already when the loop runs.
 */
export const CLOSE_INHERITED_DESCRIPTORS = 'for f in /dev/fd/*; do n=${f##*/}; case $n in 0|1|2) ;; *) exec {n}>&- ;; esac; done; unset f n; ';

/**
 * The `ulimit -f` that sets a call's RLIMIT_FSIZE (soft and hard) in the wrapper shell, before the
 * command runs; bash counts in blocks of 1,024 bytes. '' when there is no limit.
 */
export function fileSizePrefix(bytes: number | undefined): string {
  return bytes === undefined ? '' : `ulimit -f ${Math.max(1, Math.floor(bytes / 1024))} && `;
}

/**
 * Runs `command` in a fresh bash whose stderr is joined to stdout, so the output keeps its order;
 * the launcher's own stderr stays apart and tells a sandbox failure from the command's output.
 * The wrapper is bash (not sh): dash handles neither descriptors above 9 nor `ulimit -u`.
 */
export function shellArgv(command: string, prefix = ''): string[] {
  return ['/bin/bash', '-c', `${CLOSE_INHERITED_DESCRIPTORS}${prefix}exec /bin/bash -c "$0" 2>&1`, command];
}
