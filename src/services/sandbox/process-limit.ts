/**
 * @module services/sandbox/process-limit
 * The process limit of bash (issue 12.11): a fork bomb inside the sandbox must hit a ceiling, not
 * the host's. Where the host gives us a usable pids cgroup (v1 `pids` hierarchy, or v2 with the
 * `pids` controller delegated), each bash call gets its own child cgroup with `pids.max` and the
 * launcher joins it before it starts bubblewrap, so every process and thread of the call counts.
 * Otherwise, for a user other than root, the command runs under `RLIMIT_NPROC`: bubblewrap gives
 * an unprivileged user a new user namespace, and the kernel counts that limit per user namespace,
 * so it bounds this call's processes only. Root is exempt from `RLIMIT_NPROC` (and cannot be made
 * an unprivileged uid without losing its own files' ownership), so root without a usable pids
 * cgroup has no process limit, and the sandbox status says so.
 */
import { spawn, spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Processes (and threads: the pids controller counts tasks) one bash call may have at once. */
export const DEFAULT_BASH_PROCESS_LIMIT = 1024;

export type ProcessLimit =
  | { kind: 'cgroup'; max: number; root: string }
  | { kind: 'rlimit'; max: number }
  | { kind: 'none'; max: number; reason: string };

/** One call's share of the limit: how to wrap the launcher, and what to remove afterwards. */
export interface CallLimit {
  /** The program to start instead of `file args` (it joins the call's cgroup, then execs). */
  wrap(file: string, args: string[]): { file: string; args: string[] };
  /** `ulimit` for the shell inside the sandbox, or '' when the cgroup does the work. */
  shellPrefix: string;
  cleanup(): void;
}

const PREFIX = `openwork-`;
let counter = 0;

/** Where this process sits in the pids hierarchy: the directory whose children we may create. */
function pidsCgroupRoot(): string | null {
  let cgroups: string;
  let mounts: string;
  try {
    cgroups = readFileSync('/proc/self/cgroup', 'utf8');
    mounts = readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return null;
  }
  const mountPoints = mounts.split('\n').map((line) => {
    const [left, right] = line.split(' - ');
    const fields = (left ?? '').split(' ');
    const [fsType, , superOptions] = (right ?? '').split(' ');
    return { root: fields[3] ?? '', mountPoint: fields[4] ?? '', fsType: fsType ?? '', options: (superOptions ?? '').split(',') };
  });
  for (const line of cgroups.split('\n')) {
    const [id, controllers, path] = line.split(':') as [string, string, string];
    if (path === undefined) continue;
    const v1 = controllers.split(',').includes('pids');
    const v2 = id === '0' && controllers === '';
    if (!v1 && !v2) continue;
    const mount = mountPoints.find((m) => (v1 ? m.fsType === 'cgroup' && m.options.includes('pids') : m.fsType === 'cgroup2'));
    if (!mount) continue;
    // The mount may show a subtree of the hierarchy (a container's cgroup namespace).
    const relative = mount.root !== '/' && path.startsWith(mount.root) ? path.slice(mount.root.length) : path;
    const dir = join(mount.mountPoint, relative);
    if (v2 && !readOr(join(dir, 'cgroup.controllers')).split(' ').includes('pids')) continue;
    if (existsSync(dir)) return dir;
  }
  return null;
}

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function readOr(path: string): string {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return '';
  }
}

/** Creates a child cgroup with `pids.max`; on cgroup v2 enables the controller for children once. */
function createChild(root: string, max: number): string {
  const dir = join(root, `${PREFIX}${process.pid}-${(counter += 1)}`);
  mkdirSync(dir);
  try {
    if (!existsSync(join(dir, 'pids.max'))) {
      // cgroup v2: children get pids.max only when the parent delegates the controller.
      writeFileSync(join(root, 'cgroup.subtree_control'), '+pids');
    }
    writeFileSync(join(dir, 'pids.max'), String(max));
  } catch (error) {
    removeCgroup(dir);
    throw error;
  }
  return dir;
}

/** Kills what is left in a call's cgroup and removes it; retries a little while the kernel reaps. */
function removeCgroup(dir: string, attempts = 20): void {
  try {
    rmdirSync(dir);
    return;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return;
    if (code !== 'EBUSY' || attempts <= 0) return;
  }
  for (const pid of readOr(join(dir, 'cgroup.procs')).split('\n')) {
    try {
      if (pid !== '') process.kill(Number(pid), 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
  setTimeout(() => removeCgroup(dir, attempts - 1), 50).unref();
}

/** Removes empty cgroups that earlier processes of ours left behind (a crash between calls). */
function sweepStale(root: string): void {
  let entries: string[];
  try {
    entries = readdirSync(root);
  } catch {
    return;
  }
  for (const name of entries) {
    const match = /^openwork-(\d+)-\d+$/.exec(name);
    if (!match || Number(match[1]) === process.pid) continue;
    try {
      process.kill(Number(match[1]), 0);
      continue; // Its owner still runs.
    } catch {
      // The owner is gone: an empty directory can go (rmdir refuses a cgroup with tasks).
    }
    try {
      rmdirSync(join(root, name));
    } catch {
      // Still busy or not ours to remove.
    }
  }
}

/**
 * Finds how this host can bound bash's processes. The cgroup is proven usable by creating a
 * child, setting its limit and moving a throw-away shell into it.
 */
export function detectProcessLimit(max: number): ProcessLimit {
  const root = pidsCgroupRoot();
  if (!root) return decideProcessLimit(max, null, null);
  let trial: CgroupTrial;
  try {
    sweepStale(root);
    const dir = createChild(root, max);
    const joined = spawnSync('/bin/sh', joinShellArgs(dir), { stdio: 'ignore', timeout: 5_000 }).status === 0;
    removeCgroup(dir);
    trial = { joined };
  } catch (error) {
    trial = { error };
  }
  return decideProcessLimit(max, root, trial);
}

/**
 * The same answer as `detectProcessLimit`, but the throw-away shell runs without blocking the
 * event loop: the sandbox self-check runs while the CLI's store opens (issue 14.4), and a
 * synchronous spawn would stall that store's start for as long as the shell takes.
 */
export async function detectProcessLimitAsync(max: number): Promise<ProcessLimit> {
  const root = pidsCgroupRoot();
  if (!root) return decideProcessLimit(max, null, null);
  let dir: string;
  try {
    sweepStale(root);
    dir = createChild(root, max);
  } catch (error) {
    return decideProcessLimit(max, root, { error });
  }
  const joined = await new Promise<boolean>((resolve) => {
    const child = spawn('/bin/sh', joinShellArgs(dir), { stdio: 'ignore', timeout: 5_000 });
    child.on('error', () => resolve(false));
    child.on('exit', (code) => resolve(code === 0));
  });
  try {
    removeCgroup(dir);
  } catch (error) {
    return decideProcessLimit(max, root, { error });
  }
  return decideProcessLimit(max, root, { joined });
}

/** Whether a throw-away shell could join a child cgroup, or why the child could not be made. */
type CgroupTrial = { joined: boolean } | { error: unknown };

/** The throw-away shell's arguments: it writes its own pid into the cgroup's `cgroup.procs`. */
function joinShellArgs(dir: string): string[] {
  return ['-c', 'echo $$ > "$0"', join(dir, 'cgroup.procs')];
}

/** The limit, from the pids cgroup root (null: none mounted) and the trial of a child in it. */
function decideProcessLimit(max: number, root: string | null, trial: CgroupTrial | null): ProcessLimit {
  let cgroupProblem = 'no pids cgroup is mounted for this process';
  if (root && trial) {
    if ('joined' in trial && trial.joined) return { kind: 'cgroup', max, root };
    cgroupProblem =
      'error' in trial
        ? `the pids cgroup ${root} is not writable (${(trial.error as NodeJS.ErrnoException).code ?? (trial.error as Error).message})`
        : `a process cannot join a child of the pids cgroup ${root}`;
  }
  if (process.getuid?.() !== 0) return { kind: 'rlimit', max };
  return { kind: 'none', max, reason: `${cgroupProblem}, and root is exempt from RLIMIT_NPROC` };
}

/** The limit of one call. A cgroup that cannot be created fails the call's preparation. */
export function limitCall(limit: ProcessLimit): CallLimit {
  switch (limit.kind) {
    case 'cgroup': {
      const dir = createChild(limit.root, limit.max);
      return {
        // The wrapper keeps its pid through `exec`, so the process group and bubblewrap's status fd
        // stay as they were. A launcher that cannot run is not wrapped: its spawn error stays the one reported.
        wrap: (file, args) => (executable(file) ? { file: '/bin/sh', args: ['-c', 'echo $$ > "$0" && exec "$@"', join(dir, 'cgroup.procs'), file, ...args] } : { file, args }),
        shellPrefix: '',
        cleanup: () => removeCgroup(dir),
      };
    }
    case 'rlimit':
      return { wrap: (file, args) => ({ file, args }), shellPrefix: `ulimit -u ${limit.max} && `, cleanup() {} };
    case 'none':
      return { wrap: (file, args) => ({ file, args }), shellPrefix: '', cleanup() {} };
    default: {
      const never: never = limit;
      throw new Error(`unknown process limit ${JSON.stringify(never)}`);
    }
  }
}

/** For the sandbox status line. */
export function describeProcessLimit(limit: ProcessLimit): string {
  switch (limit.kind) {
    case 'cgroup':
      return `process limit ${limit.max} (pids cgroup)`;
    case 'rlimit':
      return `process limit ${limit.max} (RLIMIT_NPROC)`;
    case 'none':
      return `no process limit (${limit.reason})`;
    default: {
      const never: never = limit;
      throw new Error(`unknown process limit ${JSON.stringify(never)}`);
    }
  }
}
