/**
 * Attack round 7 (branch race): a symbolic link in a mount path. The mount plan of a bash call is
 * judged from the file system, and bubblewrap mounted paths a few milliseconds later, following
 * links in the source and the destination. So a sensitive entry of the workspace that is a link
 * (`<ws>/.env` -> `../home/.ssh`), judged as the workspace path it names and bound read-only (or
 * writable, under an exact write grant), opened the link's target: `~/.ssh`, hidden from bash,
 * mounted readable (or writable) over its own hiding. Placed by the model's earlier call in `auto`
 * (no race at all), or swapped in between the plan and bubblewrap by another process writing the
 * workspace (another session's bash in `auto` on the same directory; a background process of an
 * earlier call does not outlive it, see `lingering-processes.test.ts`).
 *
 * Now the plan judges the canonical path (a link is judged at its target too, the stricter mode
 * wins), and bubblewrap binds a descriptor opened `O_PATH | O_NOFOLLOW` on that path and checked to
 * be a thing of the judged type at exactly that path (`--bind-fd`, `--ro-bind-fd`): a path swapped
 * after that is not looked up again, and bubblewrap itself checks that what it mounted is the
 * descriptor's object. Through the built-in bash tool (authorise, card approved, execute) under the
 * real bubblewrap.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, readdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { bubblewrapArgs, MountPathChangedError, pinSources } from '../../src/services/sandbox/bubblewrap.js';
import { buildMountPlan } from '../../src/services/sandbox/mount-plan.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../support/tool-env.js';

const SECRET = 'SECRET-SSH-KEY-77d1';
/** How long the race runs: the unfixed sandbox lost it within the first second on a loaded 2-core machine. */
const RACE_MS = Number(process.env.MOUNT_RACE_MS ?? 4_000);

let env: ToolEnv;
useToolEnv((e) => (env = e));
beforeAll(() => {
  writeFileSync(join(env.home, '.ssh', 'id_rsa'), `${SECRET}\n`);
});

/**
 * The swapper: a separate node process that puts, by rename, a link to `link` at `target`, then a
 * fresh empty file, and again, as fast as it can. Both renames are atomic, so `target` is always
 * one of the two.
 */
const SWAPPER = `
const fs = require('node:fs');
const { target, link } = JSON.parse(process.argv[1]);
const parent = process.ppid;
console.log('ready');
for (let i = 0; ; i += 1) {
  if (i % 1024 === 0 && process.ppid !== parent) process.exit(0);
  try { fs.symlinkSync(link, target + '.l'); fs.renameSync(target + '.l', target); } catch { try { fs.unlinkSync(target + '.l'); } catch {} }
  try { fs.writeFileSync(target + '.f', ''); fs.renameSync(target + '.f', target); } catch {}
}
`;

let swapper: ChildProcess | undefined;
afterEach(() => {
  swapper?.kill('SIGKILL');
  swapper = undefined;
});

async function startSwapper(target: string, link: string): Promise<void> {
  const child = spawn(process.execPath, ['-e', SWAPPER, JSON.stringify({ target, link })], { stdio: ['ignore', 'pipe', 'inherit'] });
  swapper = child;
  await new Promise<void>((resolve, reject) => {
    child.stdout!.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`swapper exited ${code}`)));
  });
}

const PROBE = (home: string) => `cat '${join(home, '.ssh', 'id_rsa')}' 2>/dev/null; echo planted > '${join(home, '.ssh', 'planted')}' 2>/dev/null && echo PLANTED; echo END`;

describe('a symbolic link in a mount path (attack round 7)', () => {
  it('a workspace entry with a sensitive name that links to ~/.ssh does not open ~/.ssh to the next call', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    // The model's own earlier call in auto: the workspace is writable, so it can place the link.
    symlinkSync('../home/.ssh', join(env.ws, '.env-keys'));
    try {
      const probe = await env.call('bash', { command: PROBE(env.home) });
      expect(probe.executed).toBe(true);
      expect(probe.result.text).toContain('END');
      expect(probe.result.text).not.toContain(SECRET);
      expect(probe.result.text).not.toContain('PLANTED');
      expect(existsSync(join(env.home, '.ssh', 'planted'))).toBe(false);
      // The link still reads as what it is inside the sandbox: ~/.ssh hidden.
      const through = await env.call('bash', { command: `cat '${join(env.ws, '.env-keys', 'id_rsa')}' 2>&1; echo END` });
      expect(through.result.text).not.toContain(SECRET);
    } finally {
      rmSync(join(env.ws, '.env-keys'));
    }
  }, 60_000);

  it('a link renamed over an exactly granted file while calls start never opens its target', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const granted = join(env.ws, '.env');
    writeFileSync(granted, 'TOKEN=abc\n');
    await startSwapper(granted, '../home/.ssh');
    const grant = { sandboxPermissions: { paths: [{ path: granted, access: 'write', scope: 'exact' }] }, justification: 'I need to update the token.' };
    const leaks: string[] = [];
    const refusals: string[] = [];
    let executed = 0;
    let ran = 0;
    const deadline = Date.now() + RACE_MS;
    while (Date.now() < deadline && leaks.length === 0) {
      const outcome = await env.call('bash', { command: PROBE(env.home), ...grant }, { decide: () => 'allow_once' });
      if (!outcome.executed) continue;
      executed += 1;
      if (outcome.result.text.includes('END')) ran += 1;
      else refusals.push(`${outcome.result.error?.code}: ${outcome.result.text}`);
      if (outcome.result.text.includes(SECRET) || outcome.result.text.includes('PLANTED')) leaks.push(outcome.result.text);
    }
    swapper?.kill('SIGKILL');
    console.log(`[mount race] ${executed} calls executed (${ran} ran the command, ${refusals.length} refused) in ${RACE_MS} ms; ${leaks.length} leaked`);
    expect(leaks).toEqual([]);
    // A call that lost the race did not run, and says so as an execution failure: the sandbox works.
    for (const refusal of refusals) expect(refusal).toMatch(/^execution_failed: the sandbox could not be prepared: .*(changed|Race condition binding dirfd|\/proc\/self\/fd)/);
    expect(readdirSync(join(env.home, '.ssh')).sort()).toEqual(['id_ed25519', 'id_rsa']);
    // The race was run, not skipped: calls with the grant reached bubblewrap and ran the command.
    expect(ran).toBeGreaterThan(0);
  }, 60_000);
});

describe('the pieces: canonical ops, pinned sources', () => {
  it('a link among the scanned entries is judged at its target too: no op at the link, the target stays hidden', () => {
    const link = join(env.ws, '.env-ssh');
    symlinkSync('../home/.ssh', link);
    try {
      const plan = buildMountPlan(env.runtime.policy('auto', env.ws));
      expect(plan.ops.find((o) => o.path === link)).toBeUndefined();
      expect(plan.ops.filter((o) => o.path === join(env.home, '.ssh')).map((o) => o.mode)).toEqual(['hidden']);
    } finally {
      rmSync(link);
    }
  });

  it('pinning refuses a bound path that became a link, changed type, or has a link on its way; binds go by descriptor', () => {
    const dir = join(env.ws, 'pin');
    mkdirSync(join(dir, 'sub'), { recursive: true });
    writeFileSync(join(dir, 'sub', '.env'), '');
    const policy = env.runtime.policy('auto', env.ws);
    const plan = buildMountPlan(policy);
    const op = plan.ops.find((o) => o.path === join(dir, 'sub', '.env'))!;
    expect(op.mode).toBe('ro');
    const pinned = pinSources(plan);
    const args = bubblewrapArgs(plan, { cwd: env.ws, unreadableFile: '/dev/null', sources: new Map([...pinned.keys()].map((o, i) => [o, 10 + i])) });
    expect(args).not.toContain('--bind');
    // By path only the root file system and the unreadable file over hidden files.
    expect(args.flatMap((a, i) => (a === '--ro-bind' ? [args[i + 1]] : [])).every((source) => source === '/' || source === '/dev/null')).toBe(true);
    expect(args).toContain('--ro-bind-fd');
    for (const fd of pinned.values()) closeSync(fd);
    // The file becomes a link to ~/.ssh.
    rmSync(op.path);
    symlinkSync('../../../home/.ssh', op.path);
    expect(() => pinSources(plan)).toThrow(MountPathChangedError);
    // A directory where the plan saw a file.
    rmSync(op.path);
    mkdirSync(op.path);
    expect(() => pinSources(plan)).toThrow(/is a directory now/);
    // A link on the way: the file is where it was judged, reached through another directory.
    rmSync(op.path, { recursive: true });
    mkdirSync(join(env.ws, 'elsewhere'), { recursive: true });
    writeFileSync(join(env.ws, 'elsewhere', '.env'), '');
    renameSync(join(dir, 'sub'), join(dir, 'sub-moved'));
    symlinkSync('../elsewhere', join(dir, 'sub'));
    // The anchor of `sub` (it holds a protected mount) is the link now.
    expect(() => pinSources(plan)).toThrow(/sub changed .*symbolic link/);
    // A bound file with no op on its way (an exact write grant): the kernel's name for it shows the link.
    const granted = { path: join(dir, 'sub', 'granted.txt'), mode: 'rw' as const, isDirectory: false };
    writeFileSync(join(env.ws, 'elsewhere', 'granted.txt'), '');
    expect(() => pinSources({ ops: [granted], hidden: [], placeholders: [] })).toThrow(/resolves to .*elsewhere/);
    rmSync(dir, { recursive: true });
    rmSync(join(env.ws, 'elsewhere'), { recursive: true });
  });
});
