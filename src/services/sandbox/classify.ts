/**
 * @module services/sandbox/classify
 * Denial classification (reference §4.7): did the sandbox refuse a file access, did the sandbox
 * itself fail (the command never ran), or is this an ordinary result? It is an inference on the
 * kept output (head and tail): a signature lost in the omitted middle is missed, other EPERMs
 * are also marked, and a command that swallows the error and exits 0 is not.
 */
import { resolve } from 'node:path';
import { canonicalize, isWithin } from '../permissions/paths.js';

export type Classification =
  | { kind: 'normal' }
  | { kind: 'denied'; line: string }
  | { kind: 'unavailable'; reason: string }
  | { kind: 'changed'; reason: string }
  | { kind: 'refused'; path: string; reason: string };

/**
 * bubblewrap's own words when a pinned bind source (`--bind-fd`) was no longer where its descriptor
 * said when it mounted it: renamed away, replaced, or a link put on the way (attack round 7). The
 * sandbox works; a path changed while the call started, and the command never ran.
 */
const CHANGED_SOURCE = /race condition binding dirfd|can't find source path \/proc\/self\/fd\//i;

export interface ClassifyInput {
  launcher: 'bubblewrap' | 'seatbelt';
  exitCode: number | null;
  /** The merged output as kept in the result (head and tail). */
  output: string;
  /** The launcher's own stderr (the command's stderr is joined to `output`). */
  launcherStderr: string;
  /** bubblewrap's JSON status lines; an `exit-code` line means the command ran. */
  status: string;
  /** Paths the sandbox hid; "Permission denied" on one of them is a denial. */
  hidden: readonly string[];
  /** The command's working directory, to resolve relative paths named in error lines. */
  cwd: string;
  /**
   * The paths this call's sandbox binds or enters (the mount plan's paths and the working
   * directory; bubblewrap only). A refusal of bubblewrap naming one of them is that path's, not the
   * sandbox's (integ8).
   */
  callPaths?: readonly string[];
}

/** What bubblewrap mounts for every call before the plan (see `bubblewrapArgs`). */
const FIXED_MOUNTS = new Set(['/', '/dev', '/proc', '/dev/shm']);

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/**
 * The path of `callPaths` that bubblewrap's refusal names, or null. bubblewrap mounts `/`, `/dev`,
 * `/proc` and `/dev/shm` first (the same for every call), then the call's own paths, then enters the
 * working directory: a refusal naming a call path came after the namespaces and the fixed mounts
 * worked, so its cause is that path (a working directory the command may not enter once every
 * capability is dropped, a destination it cannot create), not a sandbox this machine lacks.
 * The longest path named wins; the fixed mounts are never a call's own.
 */
function refusedPath(reason: string, callPaths: readonly string[]): string | null {
  let found: string | null = null;
  for (const path of callPaths) {
    if (FIXED_MOUNTS.has(path) || (found !== null && found.length >= path.length)) continue;
    const named = new RegExp(`(?:^|[\\s'"]|/newroot|/oldroot)${escapeRegExp(path)}(?=$|[\\s:'",])`);
    if (named.test(reason)) found = path;
  }
  return found;
}

/** Kernel denial signatures on Linux and macOS (matched case-insensitively). */
const DENIAL_SIGNATURES = ['operation not permitted', 'read-only file system'];

function firstLine(text: string): string {
  return text.split('\n').find((l) => l.trim() !== '')?.trim() ?? '';
}

/** Whether an error line names (directly or through a symlink) a path the sandbox hid. */
function namesHiddenPath(line: string, hidden: readonly string[], cwd: string): boolean {
  if (hidden.length === 0) return false;
  for (const token of line.split(/: |['"`‘’]/)) {
    const candidate = token.trim();
    if (candidate === '' || candidate.includes('\0') || /\s{2,}/.test(candidate)) continue;
    try {
      const real = canonicalize(resolve(cwd, candidate));
      if (hidden.some((h) => isWithin(real, h))) return true;
    } catch {
      // Not a path.
    }
  }
  return false;
}

function denialLine(output: string, hidden: readonly string[], cwd: string): string | null {
  for (const line of output.split('\n')) {
    const lower = line.toLowerCase();
    if (DENIAL_SIGNATURES.some((s) => lower.includes(s))) return line.trim();
    if (lower.includes('permission denied') && namesHiddenPath(line, hidden, cwd)) return line.trim();
  }
  return null;
}

export function classify(input: ClassifyInput): Classification {
  if (input.launcher === 'bubblewrap') {
    // bubblewrap failed before the command ran: it never wrote the command's exit code.
    if (!/"exit-code"/.test(input.status)) {
      const reason = firstLine(input.launcherStderr).replace(/^bwrap: /, '') || `bubblewrap exited with code ${String(input.exitCode)} before starting the command`;
      if (CHANGED_SOURCE.test(reason)) return { kind: 'changed', reason: `bubblewrap refused a bind: ${reason}` };
      // A namespace, capability or fixed mount the kernel refuses names none of the call's paths:
      // the sandbox is unavailable (reference §4.6). One of this call's paths refused is this call's
      // failure, `execution_failed` (reference §11: the sandbox works, the command did not start).
      const path = refusedPath(reason, input.callPaths ?? []);
      if (path !== null) return { kind: 'refused', path, reason: `bubblewrap refused ${path}: ${reason}` };
      return { kind: 'unavailable', reason: `bubblewrap failed: ${reason}` };
    }
  } else if (input.exitCode !== null && [64, 65, 71].includes(input.exitCode)) {
    const own = input.launcherStderr.trimStart() || input.output.trimStart();
    if (own.startsWith('sandbox-exec:') || own.startsWith('usage: sandbox-exec')) {
      return { kind: 'unavailable', reason: firstLine(own) };
    }
  }
  if (input.exitCode === 0) return { kind: 'normal' };
  const line = denialLine(input.output, input.hidden, input.cwd);
  return line === null ? { kind: 'normal' } : { kind: 'denied', line };
}

/**
 * Failures that, in a sandbox without the network, mean the command wanted it: a name that cannot
 * be resolved (no resolver is reachable) or no route out. "Connection refused" is not among them:
 * inside the sandbox it also answers a wrong local port, so it proves nothing.
 */
const NETWORK_SIGNATURES = [
  'network is unreachable',
  'could not resolve host',
  'temporary failure in name resolution',
  'name or service not known',
  'getaddrinfo eai_again',
  'no address associated with hostname',
];

/** The first output line that shows a command failing for want of the network, or null. */
export function networkFailureLine(output: string): string | null {
  for (const line of output.split('\n')) {
    const lower = line.toLowerCase();
    if (NETWORK_SIGNATURES.some((s) => lower.includes(s))) return line.trim();
  }
  return null;
}
