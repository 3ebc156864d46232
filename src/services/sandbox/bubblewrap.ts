/**
 * @module services/sandbox/bubblewrap
 * bash under bubblewrap on Linux (DECISIONS §5). The root file system is bound read-only; the
 * mount plan then binds the writable roots, re-binds protected paths read-only inside them and
 * hides credential paths behind empty, unreadable mounts. All capabilities are dropped (so root
 * cannot read through the hiding), the command gets its own PID namespace (cancel kills
 * everything in it) and a new session. Unless the call was granted the network, it also gets its
 * own network namespace: bubblewrap brings up a private `lo` there, and nothing of the host's
 * network (the internet, services on the host's 127.0.0.1, abstract unix sockets) is reachable.
 * Each call's processes are bounded by the runtime's process limit (a pids cgroup per call, see
 * `process-limit.ts`).
 *
 * What a bind mounts is pinned (attack round 7): each bound path is opened `O_PATH | O_NOFOLLOW`
 * when the call starts, checked to be a thing of the judged type at exactly that path, and handed
 * to bubblewrap as a descriptor (`--bind-fd`, `--ro-bind-fd`). A link renamed over the path after
 * that cannot widen the mount: bubblewrap 0.8 mounts what the descriptor's `/proc/self/fd` name
 * resolves to, then checks that the mount is the descriptor's object (device and inode) and stops
 * with "Race condition binding dirfd" otherwise; `classify` makes that the call's failure.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, constants, existsSync, fstatSync, mkdirSync, openSync, readFileSync, readlinkSync, renameSync, rmSync, statSync, writeFileSync, chmodSync } from 'node:fs';
import { join } from 'node:path';
import type { SandboxPolicy } from '../permissions/policy.js';
import { isWithin } from '../permissions/paths.js';
import { fileSizePrefix, shellArgv, type LaunchOptions, type LaunchSpec, type SandboxLauncher } from './launcher.js';
import { buildMountPlan, type MountOp, type MountPlan, type Placeholder } from './mount-plan.js';
import { limitCall, type ProcessLimit } from './process-limit.js';
import { noUnixSocketsFilter, seccompSupported } from './seccomp.js';

export interface BubblewrapOptions {
  /** The `bwrap` executable. */
  bwrapPath: string;
  /** A directory only the runtime writes (under `~/.openwork`), for the unreadable placeholder file. */
  stateDir: string;
  /** How each call's processes are bounded (issue 12.11); none when absent. */
  processLimit?: ProcessLimit;
}

/** The seccomp program (no unix sockets, no io_uring), written once per state directory. */
function seccompFile(stateDir: string): string | undefined {
  if (!seccompSupported()) return undefined;
  const path = join(stateDir, `seccomp-no-unix-sockets-${process.arch}.bpf`);
  const program = noUnixSocketsFilter();
  if (!existsSync(path) || !readFileSync(path).equals(program)) {
    // Written aside and renamed, so a call starting at the same moment never reads half a program.
    mkdirSync(stateDir, { recursive: true });
    const partial = `${path}.${process.pid}.${randomBytes(4).toString('hex')}`;
    writeFileSync(partial, program);
    renameSync(partial, path);
  }
  return path;
}

/** The empty, mode-000 file bound over hidden credential files. */
function unreadableFile(stateDir: string): string {
  const path = join(stateDir, 'unreadable');
  if (!existsSync(path)) {
    mkdirSync(stateDir, { recursive: true });
    writeFileSync(path, '');
  }
  chmodSync(path, 0o000);
  return path;
}

/**
 * `O_PATH` (Linux: 010000000 on every architecture Node runs on but sparc, alpha and parisc). Node
 * has no constant for it, and passes open flags to the kernel as they are.
 */
const O_PATH = 0o10000000;

/** A bound path is not what the mount plan judged when the call starts (something changed it meanwhile). */
export class MountPathChangedError extends Error {
  readonly code = 'execution_failed';
  constructor(readonly path: string, detail: string) {
    super(`${path} changed while the sandbox was being prepared (${detail})`);
    this.name = 'MountPathChangedError';
  }
}

/**
 * Opens the source of every bind of `plan` (`rw`, `ro`; hidden paths bind nothing of theirs) with
 * `O_PATH | O_NOFOLLOW` and checks that the descriptor is the thing judged: not a link, a directory
 * exactly when the plan says so, and at exactly the plan's path (the kernel's own name for it, so a
 * link in any component shows). Throws `MountPathChangedError` (closing what it opened) otherwise.
 */
export function pinSources(plan: MountPlan): Map<MountOp, number> {
  const pinned = new Map<MountOp, number>();
  try {
    for (const op of plan.ops) {
      if (op.mode === 'hidden') continue;
      let fd: number;
      try {
        fd = openSync(op.path, O_PATH | constants.O_NOFOLLOW);
      } catch (error) {
        throw new MountPathChangedError(op.path, `cannot open it: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
      }
      pinned.set(op, fd);
      const st = fstatSync(fd);
      if (st.isSymbolicLink()) throw new MountPathChangedError(op.path, 'it is a symbolic link now');
      if (st.isDirectory() !== op.isDirectory) throw new MountPathChangedError(op.path, op.isDirectory ? 'it is no longer a directory' : 'it is a directory now');
      const at = readlinkSync(`/proc/self/fd/${fd}`);
      if (at !== op.path) throw new MountPathChangedError(op.path, `it resolves to ${at}`);
    }
  } catch (error) {
    closeAll(pinned.values());
    throw error;
  }
  return pinned;
}

/** Closes every descriptor of `fds`, going on past one that fails to close (integ8). */
function closeAll(fds: Iterable<number>): void {
  for (const fd of fds) {
    try {
      closeSync(fd);
    } catch {
      // Already closed (EBADF): nothing of ours is left open there.
    }
  }
}

/**
 * The bubblewrap arguments for a mount plan (before `--` and the command). With `sources` (from
 * `pinSources`), each bind mounts its descriptor: `sources` maps an op to the descriptor number the
 * bubblewrap process holds it at.
 */
export function bubblewrapArgs(plan: MountPlan, options: { cwd: string; unreadableFile: string; network?: boolean; seccompFd?: number; sources?: ReadonlyMap<MountOp, number> }): string[] {
  const args = ['--die-with-parent', '--new-session', '--unshare-pid', ...(options.network ? [] : ['--unshare-net']), '--cap-drop', 'ALL', '--json-status-fd', '3', '--ro-bind', '/', '/', '--dev', '/dev', '--proc', '/proc', '--tmpfs', '/dev/shm'];
  if (options.seccompFd !== undefined) args.push('--seccomp', String(options.seccompFd));
  const remount: string[] = [];
  for (const op of plan.ops) {
    switch (op.mode) {
      case 'rw':
      case 'ro': {
        const fd = options.sources?.get(op);
        const bind = op.mode === 'rw' ? '--bind' : '--ro-bind';
        if (fd === undefined) args.push(bind, op.path, op.path);
        else args.push(`${bind}-fd`, String(fd), op.path);
        break;
      }
      case 'hidden':
        if (op.isDirectory) {
          // Searchable but unlistable when a granted path below must stay reachable by name.
          const reachable = plan.ops.some((o) => o !== op && o.mode !== 'hidden' && isWithin(o.path, op.path));
          args.push('--perms', reachable ? '0111' : '0000', '--tmpfs', op.path);
          remount.push(op.path);
        } else {
          args.push('--ro-bind', options.unreadableFile, op.path);
        }
        break;
      default: {
        const never: never = op.mode;
        throw new Error(`unknown mount mode ${String(never)}`);
      }
    }
  }
  // Read-only only after the mounts inside them exist (their mount points are created first).
  for (const path of remount.reverse()) args.push('--remount-ro', path);
  args.push('--chdir', options.cwd);
  return args;
}

/**
 * Removes a placeholder the command never touched: same inode, still empty, and neither time moved.
 * A file the command created, truncated, wrote or touched stays, whatever its size (issue 20.1).
 */
function removeUntouched(placeholder: Placeholder): void {
  try {
    const st = statSync(placeholder.path, { bigint: true });
    const untouched = st.ino === placeholder.ino && st.size === 0n && st.mtimeNs === placeholder.mtimeNs && st.ctimeNs === placeholder.ctimeNs;
    if (untouched) rmSync(placeholder.path);
  } catch {
    // Already gone: nothing of ours to remove.
  }
}

/** A changed path is planned again this many times before the call is refused. */
const PLAN_ATTEMPTS = 3;

/**
 * The mount plan with its bind sources pinned. A path that changed between judging and opening
 * (another process writing the workspace) is judged again from scratch, up to `PLAN_ATTEMPTS`
 * times; then the call is refused with the last `MountPathChangedError`. The placeholders of every
 * attempt are kept for clean-up (a later attempt finds the earlier one's file and makes none).
 */
function pinnedPlan(policy: SandboxPolicy): { plan: MountPlan; pinned: Map<MountOp, number>; placeholders: Placeholder[] } {
  const placeholders: Placeholder[] = [];
  for (let attempt = 1; ; attempt += 1) {
    try {
      const plan = buildMountPlan(policy);
      placeholders.push(...plan.placeholders);
      return { plan, pinned: pinSources(plan), placeholders };
    } catch (error) {
      if (!(error instanceof MountPathChangedError) || attempt >= PLAN_ATTEMPTS) {
        for (const placeholder of placeholders) removeUntouched(placeholder);
        throw error;
      }
    }
  }
}

export function bubblewrapLauncher(options: BubblewrapOptions): SandboxLauncher {
  return {
    kind: 'bubblewrap',
    prepare(policy: SandboxPolicy, command: string, launch: LaunchOptions = {}): LaunchSpec {
      const { plan, pinned, placeholders } = pinnedPlan(policy);
      const descriptors = [...pinned.values()];
      let limit: ReturnType<typeof limitCall> | undefined;
      // From here every exit closes the pinned descriptors (integ8): the call's spec owns them once
      // returned, and an exception before that (the state directory unwritable for the seccomp
      // program, the disk full, the process limit's cgroup refused) closes them here.
      const cleanup = () => {
        try {
          limit?.cleanup();
        } finally {
          closeAll(descriptors);
          descriptors.length = 0;
          for (const placeholder of placeholders) removeUntouched(placeholder);
        }
      };
      try {
        const network = launch.network === true;
        // Unix sockets go with the network grant: the card says so, and TCP to the host is open then anyway.
        const seccomp = network ? undefined : seccompFile(options.stateDir);
        const inputFiles = seccomp ? [seccomp] : [];
        // Descriptors 0-2 are the standard streams, 3 the status, then the input files, then the binds.
        const sources = new Map([...pinned.keys()].map((op, i) => [op, 4 + inputFiles.length + i] as const));
        const args = bubblewrapArgs(plan, { cwd: policy.workspaceRoot, unreadableFile: unreadableFile(options.stateDir), network, seccompFd: seccomp ? 4 : undefined, sources });
        limit = limitCall(options.processLimit ?? { kind: 'none', max: 0, reason: 'not configured' });
        const { file, args: wrapped } = limit.wrap(options.bwrapPath, [...args, '--', ...shellArgv(command, `${limit.shellPrefix}${fileSizePrefix(launch.fileSizeLimitBytes)}`)]);
        return { file, args: wrapped, statusFd: true, inputFiles, descriptors: [...descriptors], hidden: plan.hidden, callPaths: [...plan.ops.map((op) => op.path), policy.workspaceRoot], cleanup };
      } catch (error) {
        cleanup();
        throw error;
      }
    },
  };
}
