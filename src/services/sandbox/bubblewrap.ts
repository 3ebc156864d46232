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
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync, chmodSync } from 'node:fs';
import { join } from 'node:path';
import type { SandboxPolicy } from '../permissions/policy.js';
import { isWithin } from '../permissions/paths.js';
import { fileSizePrefix, shellArgv, type LaunchOptions, type LaunchSpec, type SandboxLauncher } from './launcher.js';
import { buildMountPlan, type MountPlan, type Placeholder } from './mount-plan.js';
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

/** The bubblewrap arguments for a mount plan (before `--` and the command). */
export function bubblewrapArgs(plan: MountPlan, options: { cwd: string; unreadableFile: string; network?: boolean; seccompFd?: number }): string[] {
  const args = ['--die-with-parent', '--new-session', '--unshare-pid', ...(options.network ? [] : ['--unshare-net']), '--cap-drop', 'ALL', '--json-status-fd', '3', '--ro-bind', '/', '/', '--dev', '/dev', '--proc', '/proc', '--tmpfs', '/dev/shm'];
  if (options.seccompFd !== undefined) args.push('--seccomp', String(options.seccompFd));
  const remount: string[] = [];
  for (const op of plan.ops) {
    switch (op.mode) {
      case 'rw':
        args.push('--bind', op.path, op.path);
        break;
      case 'ro':
        args.push('--ro-bind', op.path, op.path);
        break;
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

export function bubblewrapLauncher(options: BubblewrapOptions): SandboxLauncher {
  return {
    kind: 'bubblewrap',
    prepare(policy: SandboxPolicy, command: string, launch: LaunchOptions = {}): LaunchSpec {
      const plan = buildMountPlan(policy);
      const network = launch.network === true;
      // Unix sockets go with the network grant: the card says so, and TCP to the host is open then anyway.
      const seccomp = network ? undefined : seccompFile(options.stateDir);
      const args = bubblewrapArgs(plan, { cwd: policy.workspaceRoot, unreadableFile: unreadableFile(options.stateDir), network, seccompFd: seccomp ? 4 : undefined });
      const limit = limitCall(options.processLimit ?? { kind: 'none', max: 0, reason: 'not configured' });
      const { file, args: wrapped } = limit.wrap(options.bwrapPath, [...args, '--', ...shellArgv(command, `${limit.shellPrefix}${fileSizePrefix(launch.fileSizeLimitBytes)}`)]);
      return {
        file,
        args: wrapped,
        statusFd: true,
        inputFiles: seccomp ? [seccomp] : [],
        hidden: plan.hidden,
        cleanup() {
          limit.cleanup();
          for (const placeholder of plan.placeholders) removeUntouched(placeholder);
        },
      };
    },
  };
}
