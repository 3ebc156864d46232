/**
 * @module services/sandbox/self-check
 * The start-up self-check (reference §4.6): run a probe inside the sandbox that tries a write the
 * policy denies. Only a write that fails with a kernel denial — and a host file left unchanged —
 * proves the sandbox works; anything else makes it unavailable, with the reason. The answer is
 * cached for the life of the process.
 */
import { execFile } from 'node:child_process';
import { accessSync, constants, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import type { SandboxStatus } from '../../protocol/snapshot.js';
import { detectEnvironment, type SandboxPlatform } from '../permissions/environment.js';
import { canonicalize } from '../permissions/paths.js';
import { SandboxPolicy } from '../permissions/policy.js';
import { bubblewrapLauncher } from './bubblewrap.js';
import { classify } from './classify.js';
import type { SandboxLauncher } from './launcher.js';
import { runProcess } from './process.js';
import { DEFAULT_BASH_PROCESS_LIMIT, describeProcessLimit, detectProcessLimitAsync } from './process-limit.js';
import { SANDBOX_EXEC, seatbeltLauncher } from './seatbelt.js';

export interface SelfCheckOptions {
  platform: SandboxPlatform;
  /** The bubblewrap executable; found on PATH when absent. */
  bwrapPath?: string;
  sandboxExec?: string;
  /** A runtime-owned directory (under `~/.openwork`) for the launcher's own files. */
  stateDir: string;
  /** Processes one bash call may have at once (Linux; default `DEFAULT_BASH_PROCESS_LIMIT`). */
  processLimit?: number;
}

export interface SelfCheckResult {
  status: SandboxStatus;
  launcher: SandboxLauncher | null;
}

const cache = new Map<string, Promise<SelfCheckResult>>();

function findOnPath(name: string): string | null {
  for (const dir of (process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin').split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // Not here.
    }
  }
  return null;
}

function unavailable(kind: string, detail: string): SelfCheckResult {
  return { status: { available: false, kind, detail }, launcher: null };
}

/** Runs (once per process and configuration) the self-check of this platform's sandbox. */
export function sandboxSelfCheck(options: SelfCheckOptions): Promise<SelfCheckResult> {
  const key = JSON.stringify([options.platform, options.bwrapPath ?? null, options.sandboxExec ?? null, options.stateDir, options.processLimit ?? null]);
  let result = cache.get(key);
  if (!result) {
    result = runSelfCheck(options);
    cache.set(key, result);
  }
  return result;
}

async function runSelfCheck(options: SelfCheckOptions): Promise<SelfCheckResult> {
  switch (options.platform) {
    case 'linux': {
      const bwrap = options.bwrapPath ?? findOnPath('bwrap');
      if (!bwrap) return unavailable('bubblewrap', 'bubblewrap (bwrap) is not installed; install it (Debian/Ubuntu: apt-get install bubblewrap)');
      const processLimit = await detectProcessLimitAsync(options.processLimit ?? DEFAULT_BASH_PROCESS_LIMIT);
      return probe(bubblewrapLauncher({ bwrapPath: bwrap, stateDir: options.stateDir, processLimit }), bwrap, `; ${describeProcessLimit(processLimit)}`);
    }
    case 'darwin': {
      const exec = options.sandboxExec ?? SANDBOX_EXEC;
      return probe(seatbeltLauncher({ sandboxExec: exec }), exec);
    }
    case 'unsupported':
      return unavailable('none', `no sandbox is supported on ${process.platform}`);
    default: {
      const never: never = options.platform;
      throw new Error(`unknown platform ${String(never)}`);
    }
  }
}

/** The launcher's `--version` line (or its path). Asynchronous: the CLI opens its store meanwhile. */
function versionOf(file: string): Promise<string> {
  return new Promise((resolve) => {
    execFile(file, ['--version'], { encoding: 'utf8', timeout: 5_000 }, (error, stdout) => resolve(error ? file : stdout.trim()));
  });
}

/**
 * Inside a throw-away workspace: a permitted write must land, a write to `.git` (read-only in
 * every mode) must fail with a kernel denial and leave the host file as it was, and a credential
 * file must not be readable.
 */
async function probe(launcher: SandboxLauncher, file: string, note = ''): Promise<SelfCheckResult> {
  const kind = launcher.kind;
  const base = canonicalize(mkdtempSync(join(tmpdir(), 'openwork-selfcheck-')));
  try {
    const ws = join(base, 'ws');
    const home = join(base, 'home');
    mkdirSync(join(ws, '.git'), { recursive: true });
    mkdirSync(join(home, '.ssh'), { recursive: true });
    mkdirSync(join(base, 'tmp'));
    writeFileSync(join(ws, '.git', 'probe'), 'original');
    writeFileSync(join(home, '.ssh', 'probe'), 'secret');
    const environment = detectEnvironment({ home, tempDirs: [join(base, 'tmp')], platform: kind === 'bubblewrap' ? 'linux' : 'darwin' });
    const policy = new SandboxPolicy({ mode: 'auto', workspaceRoot: ws, environment });
    const command = 'echo allowed > allowed; echo changed > .git/probe; cat "$HOME/.ssh/probe"; exit 0';
    let spec;
    try {
      spec = launcher.prepare(policy, command);
    } catch (error) {
      return unavailable(kind, `self-check could not prepare the sandbox: ${(error as Error).message}`);
    }
    let output = '';
    let outcome;
    try {
      outcome = await runProcess({
        file: spec.file,
        args: spec.args,
        env: { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: home, LANG: 'C' },
        cwd: ws,
        timeoutMs: 15_000,
        signal: new AbortController().signal,
        statusFd: spec.statusFd,
        inputFiles: spec.inputFiles,
        descriptors: spec.descriptors,
        onOutput: (chunk) => {
          output += chunk.toString('utf8');
        },
      });
    } finally {
      spec.cleanup();
    }
    if (outcome.kind !== 'exited') {
      return unavailable(kind, outcome.kind === 'spawn_failed' ? `${file} could not be started: ${outcome.message}` : `the self-check did not finish (${outcome.kind})`);
    }
    const verdict = classify({ launcher: kind, exitCode: outcome.exitCode, output, launcherStderr: outcome.launcherStderr, status: outcome.status, hidden: spec.hidden, cwd: ws });
    if (verdict.kind === 'unavailable' || verdict.kind === 'changed' || verdict.kind === 'refused') return unavailable(kind, verdict.reason);
    const allowed = readOrNull(join(ws, 'allowed'));
    const protectedFile = readOrNull(join(ws, '.git', 'probe'));
    const denied = /read-only file system|operation not permitted/i.test(output);
    if (protectedFile !== 'original') return unavailable(kind, 'self-check failed: a write the policy denies reached the file system');
    if (!denied) return unavailable(kind, `self-check failed: the denied write did not fail with a kernel denial (output: ${output.trim().slice(0, 200)})`);
    if (allowed?.trim() !== 'allowed') return unavailable(kind, 'self-check failed: a write the policy allows did not happen');
    if (output.includes('secret')) return unavailable(kind, 'self-check failed: a credential file was readable inside the sandbox');
    return { status: { available: true, kind, detail: `${await versionOf(file)}: self-check passed (a denied write failed with a kernel denial)${note}` }, launcher };
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
}

function readOrNull(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}
