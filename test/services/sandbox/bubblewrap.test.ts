/**
 * bash under bubblewrap: the self-check, `sandbox_unavailable` where the kernel refuses, the
 * kernel's answers against the policy's (parity on a real sandbox), denial classification, the
 * mode taking effect per call, cancel and timeout killing the process tree, output bounds and
 * spill files, progress, and the environment the command sees; bubblewrap's refusals told apart by
 * cause (integ8).
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ToolProgress } from '../../../src/protocol/updates.js';
import { sandboxUnavailableText } from '../../../src/services/permissions/texts.js';
import { classify } from '../../../src/services/sandbox/classify.js';
import { BASH_HEAD_BYTES, BASH_TAIL_BYTES, MAX_RESULT_BYTES } from '../../../src/services/tools/output.js';
import { requireSandbox, toolEnv, type ToolEnv, useToolEnv } from '../../support/tool-env.js';

let env: ToolEnv;
useToolEnv((e) => (env = e));

describe('self-check', () => {
  it('the sandbox works on this machine, or the suite says why', () => {
    const status = env.runtime.sandbox;
    expect(status.kind).toBe('bubblewrap');
    if (status.available) {
      expect(status.detail).toMatch(/self-check passed/);
    } else {
      console.warn(`[sandbox] bubblewrap is unavailable here, so the sandbox tests in this suite are skipped: ${status.detail}`);
      if (process.env.OPENWORK_REQUIRE_SANDBOX === '1') throw new Error(`sandbox required but unavailable: ${status.detail}`);
      expect(status.detail).toBeTruthy();
    }
  });
});

describe('when the kernel refuses the sandbox', () => {
  let refused: ToolEnv;
  const kernelMessage = 'No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces.';
  beforeAll(async () => {
    // A bwrap that fails the way it does where user namespaces are refused.
    const fake = join(env.base, 'fake-bwrap');
    writeFileSync(fake, `#!/bin/sh\necho 'bwrap: ${kernelMessage}' >&2\nexit 1\n`);
    chmodSync(fake, 0o755);
    refused = await toolEnv({ bwrapPath: fake });
  });
  afterAll(() => refused.cleanup());

  it('bash answers sandbox_unavailable: not executed, no card, the reason in the text; file tools still work', async () => {
    expect(refused.runtime.sandbox).toEqual({ available: false, kind: 'bubblewrap', detail: `bubblewrap failed: ${kernelMessage}` });
    const marker = join(refused.ws, 'must-not-exist');
    for (const command of [`touch ${marker}`, 'rm -rf src']) {
      for (const nonInteractive of [false, true]) {
        const { authorization, card, executed, result } = await refused.call('bash', { command }, { nonInteractive });
        expect(card).toBeNull();
        expect(executed).toBe(false);
        expect(authorization).toEqual({ kind: 'deny', source: 'sandbox_unavailable', text: sandboxUnavailableText(`bubblewrap failed: ${kernelMessage}`) });
        expect(result.error?.code).toBe('sandbox_unavailable');
      }
    }
    expect(existsSync(marker)).toBe(false);
    expect(sandboxUnavailableText('x')).toBe('[sandbox: unavailable, so bash cannot run commands in this session (x). File tools still work; ask the user to run the command in their own terminal if it is needed.]');
    const write = await refused.call('write', { path: 'still-works.txt', content: 'yes' });
    expect(write.result.status).toBe('succeeded');
  });

  it('without a sandbox the schemas carry no escalation parameters [reference §4.15 acc 14]', () => {
    for (const tool of refused.tools.values()) {
      const shape = (tool.parameters as unknown as { shape: Record<string, unknown> }).shape;
      expect(Object.keys(shape), tool.name).not.toContain('sandboxPermissions');
      expect(Object.keys(shape), tool.name).not.toContain('justification');
    }
    const shape = (env.tools.get('bash')!.parameters as unknown as { shape: Record<string, unknown> }).shape;
    if (env.runtime.sandbox.available) expect(Object.keys(shape)).toContain('sandboxPermissions');
  });

  it('a bwrap binary that cannot even be started is an unavailable sandbox with the reason', async () => {
    const missing = await toolEnv({ bwrapPath: join(env.base, 'no-such-bwrap') });
    try {
      expect(missing.runtime.sandbox.available).toBe(false);
      expect(missing.runtime.sandbox.detail).toMatch(/could not be started: spawn .*no-such-bwrap ENOENT/);
    } finally {
      missing.cleanup();
    }
  });
});

describe('kernel answers', () => {
  it('parity: what bash can read and write in the real sandbox equals the policy, per tier and mode [reference §4.15 acc 10]', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const paths = [
      join(env.ws, 'src', 'main.txt'),
      join(env.ws, 'src'),
      join(env.ws, '.env'),
      join(env.ws, '.git', 'HEAD'),
      join(env.ws, '.git', 'hooks', 'pre-commit'),
      join(env.home, '.ssh', 'id_ed25519'),
      join(env.home, '.netrc'),
      join(env.home, '.config', 'gh', 'hosts.yml'),
      join(env.home, '.agents', 'skills', 'demo', 'SKILL.md'),
      join(env.home, '.openwork'),
      join(env.outside, 'data.txt'),
      env.tmp,
    ];
    const probe = paths
      .map((p) => `if [ -d '${p}' ]; then ls '${p}' >/dev/null 2>&1 && echo 'R ${p}'; f=$(mktemp '${p}/.probe.XXXXXX' 2>/dev/null) && unlink "$f" && echo 'W ${p}'; else cat '${p}' >/dev/null 2>&1 && echo 'R ${p}'; (: >> '${p}') 2>/dev/null && echo 'W ${p}'; fi`)
      .join('\n');
    for (const mode of ['auto', 'accept_edits'] as const) {
      const { result } = await env.call('bash', { command: probe }, { mode });
      const policy = env.runtime.policy(mode, env.ws);
      for (const path of paths) {
        expect(result.text.includes(`R ${path}\n`), `${mode} read ${path}`).toBe(policy.check(path, 'read', 'bash'));
        expect(result.text.includes(`W ${path}\n`), `${mode} write ${path}`).toBe(policy.check(path, 'write', 'bash'));
        expect(policy.check(path, 'read', 'file_tool'), `file tools read ${path}`).toBe(policy.check(path, 'read', 'bash'));
      }
    }
  });

  it('bash writing outside its grants is denied by the kernel and classified with the denial marker; the exit code is still reported [reference §4.15 acc 17]', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const { result } = await env.call('bash', { command: `echo x > ${join(env.outside, 'denied.txt')}; echo after` });
    // The command exits 0 (its last command succeeded): no inference without a failure.
    expect(result.sandboxDenied).toBe(false);
    const failing = await env.call('bash', { command: `echo x > ${join(env.outside, 'denied.txt')}` });
    expect(failing.result.text).toMatch(new RegExp(`^/bin/bash: line 1: ${join(env.outside, 'denied.txt')}: Read-only file system\\n\\[exit 1; duration \\d+ ms\\]\\n\\[sandbox: file access denied under auto mode\\]\\n\\[sandbox: to proceed, retry this exact command once with sandboxPermissions listing only the paths it needs, and a one-sentence justification; the user will be asked. If the paths cannot be listed, ask the user to run the command instead\\]$`));
    expect(failing.result).toMatchObject({ status: 'succeeded', sandboxDenied: true });
  });

  it('a non-zero exit without a denial is an ordinary succeeded result', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const { result } = await env.call('bash', { command: 'echo out; echo err >&2; exit 7' });
    expect(result).toMatchObject({ status: 'succeeded', sandboxDenied: false });
    expect(result.text).toMatch(/^out\nerr\n\[exit 7; duration \d+ ms\]$/);
  });

  it('a mode switch applies from the next call: auto writes the workspace, accept-edits is denied, auto again writes', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const command = 'echo $RANDOM >> mode-switch.txt';
    expect((await env.call('bash', { command }, { mode: 'auto' })).result.sandboxDenied).toBe(false);
    const denied = await env.call('bash', { command }, { mode: 'accept_edits' });
    expect(denied.result.sandboxDenied).toBe(true);
    expect(denied.result.text).toContain('[sandbox: file access denied under accept-edits mode]');
    expect((await env.call('bash', { command }, { mode: 'auto' })).result.sandboxDenied).toBe(false);
    expect(readFileSync(join(env.ws, 'mode-switch.txt'), 'utf8').trim().split('\n')).toHaveLength(2);
  });

  it('with the workspace at $HOME bash cannot write it even in auto; the file tools can [reference §4.15 acc 49]', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const bash = await env.call('bash', { command: 'echo x > home-note.txt' }, { workingDirectory: env.home });
    expect(bash.result.sandboxDenied).toBe(true);
    const write = await env.call('write', { path: 'home-note.txt', content: 'x' }, { workingDirectory: env.home });
    expect(write.result.status).toBe('succeeded');
  });

  it('the command sees only PATH, HOME, SHELL, LANG, LC_ALL, TMPDIR and GOCACHE [reference §4.15 acc 50]', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    process.env.OPENWORK_TEST_SECRET = 'leak';
    try {
      const { result } = await env.call('bash', { command: 'env | grep -v "^_=" | grep -v "^PWD=" | grep -v "^SHLVL=" | sort' });
      const names = result.text.split('\n').filter((l) => l.includes('=')).map((l) => l.split('=')[0]);
      expect(names.filter((n) => !['PATH', 'HOME', 'SHELL', 'LANG', 'LC_ALL', 'TMPDIR', 'GOCACHE', 'OLDPWD'].includes(n!))).toEqual([]);
      expect(result.text).toContain(`HOME=${env.home}\n`);
      expect(result.text).toContain(`TMPDIR=${env.tmp}\n`);
      expect(result.text).toContain(`GOCACHE=${join(env.tmp, 'openwork', 'go-build')}\n`);
      expect(result.text).not.toContain('leak');
    } finally {
      delete process.env.OPENWORK_TEST_SECRET;
    }
  });
});

describe('process control and output', () => {
  function running(marker: string): boolean {
    return execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' }).split('\n').some((l) => l.includes(marker) && !l.includes('ps -eo'));
  }

  it('cancel kills the whole process tree (background jobs and nested shells)', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const controller = new AbortController();
    const progress: ToolProgress[] = [];
    const call = env.call('bash', { command: "sleep 301.5 & bash -c 'sleep 302.5 & sleep 303.5' & echo started; wait" }, {
      signal: controller.signal,
      onProgress: (p) => {
        progress.push(p);
        if (p.kind === 'stdout' && p.chunk.includes('started')) controller.abort();
      },
    });
    const { result } = await call;
    expect(result.status).toBe('cancelled');
    expect(result.error?.code).toBe('cancelled');
    expect(result.text).toMatch(/^started\n\[cancelled; duration \d+ ms\]$/);
    for (const marker of ['sleep 301.5', 'sleep 302.5', 'sleep 303.5']) expect(running(marker), marker).toBe(false);
  });

  it('a timeout kills the command and fails with code timeout', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const { result } = await env.call('bash', { command: 'echo begin; sleep 304.5', timeoutMs: 300 });
    expect(result).toMatchObject({ status: 'failed', error: { code: 'timeout' } });
    expect(result.text).toMatch(/^begin\n\[timed out after 300 ms; duration \d+ ms\]$/);
    expect(running('sleep 304.5')).toBe(false);
  });

  it('output past 16 KiB keeps the first 2 KiB and the last 14 KiB and is spilled whole; read can open the spill file', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const { result } = await env.call('bash', { command: 'seq 1 50000' }, { sessionId: 'ses/spill', toolCallId: 'tc:big' });
    const spill = join(env.home, '.openwork', 'spill', 'ses_spill', 'tc_big.txt');
    const full = readFileSync(spill, 'utf8');
    expect(full.split('\n')).toHaveLength(50001);
    const [head, rest] = result.text.split('\n... (');
    expect(Buffer.byteLength(head!)).toBeLessThanOrEqual(BASH_HEAD_BYTES);
    expect(full.startsWith(head!)).toBe(true);
    expect(rest).toMatch(new RegExp(`^\\d+ bytes omitted\\. Full output saved at ${spill} — use read with offset/limit, or grep, to look at it\\.\\)\\n`));
    const tail = rest!.slice(rest!.indexOf('\n') + 1).replace(/\[exit 0; duration \d+ ms\]$/, '');
    expect(Buffer.byteLength(tail)).toBe(BASH_TAIL_BYTES);
    expect(full.endsWith(tail)).toBe(true);
    expect(Buffer.byteLength(result.text)).toBeLessThanOrEqual(MAX_RESULT_BYTES);
    const read = await env.call('read', { path: spill, offset: 49999, limit: 2 });
    expect(read.result.text).toBe('49999\t49999\n50000\t50000\n(lines 49999-50000 of 50000; end of file)');
    // The spill directory is hard-protected: readable, never writable.
    expect((await env.call('write', { path: spill, content: 'x' })).authorization.kind).toBe('deny');
  });

  it('progress streams the output as it comes', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const progress: ToolProgress[] = [];
    const { result } = await env.call('bash', { command: 'echo one; sleep 0.2; echo two' }, { onProgress: (p) => progress.push(p) });
    expect(progress.length).toBeGreaterThanOrEqual(2);
    expect(progress.map((p) => (p.kind === 'stdout' ? p.chunk : '')).join('')).toBe('one\ntwo\n');
    expect(result.text).toMatch(/^one\ntwo\n\[exit 0/);
  });
});

describe('classification (reference §4.7)', () => {
  const base = { launcher: 'bubblewrap' as const, launcherStderr: '', status: '{ "child-pid": 1 }\n{ "exit-code": 1 }', hidden: [], cwd: '/' };
  it('non-zero exit with a kernel denial signature is a denial; exit 0 never is', () => {
    expect(classify({ ...base, exitCode: 1, output: 'touch: cannot touch \'x\': Operation not permitted\n' })).toEqual({ kind: 'denied', line: "touch: cannot touch 'x': Operation not permitted" });
    expect(classify({ ...base, exitCode: 2, output: 'a\nbash: /etc/x: READ-ONLY FILE SYSTEM\n' })).toEqual({ kind: 'denied', line: 'bash: /etc/x: READ-ONLY FILE SYSTEM' });
    expect(classify({ ...base, exitCode: 0, output: 'Operation not permitted' })).toEqual({ kind: 'normal' });
    expect(classify({ ...base, exitCode: 126, output: 'bash: ./x.sh: Permission denied' })).toEqual({ kind: 'normal' });
  });

  it('bubblewrap failing before the command ran is sandbox_unavailable, whatever the output', () => {
    expect(classify({ ...base, exitCode: 1, output: '', status: '{ "child-pid": 5 }\n', launcherStderr: 'bwrap: Can\'t mount tmpfs: Operation not permitted\n' })).toEqual({
      kind: 'unavailable',
      reason: "bubblewrap failed: Can't mount tmpfs: Operation not permitted",
    });
  });

  it('bubblewrap refusing a pinned bind whose path changed is a changed path, not an unavailable sandbox (attack round 7)', () => {
    const failed = { ...base, exitCode: 1, output: '', status: '{ "child-pid": 5 }\n' };
    expect(classify({ ...failed, launcherStderr: 'bwrap: Race condition binding dirfd\n' })).toEqual({ kind: 'changed', reason: 'bubblewrap refused a bind: Race condition binding dirfd' });
    expect(classify({ ...failed, launcherStderr: "bwrap: Can't find source path /proc/self/fd/7: No such file or directory\n" })).toMatchObject({ kind: 'changed' });
    expect(classify({ ...failed, launcherStderr: "bwrap: Can't find source path /home/x: No such file or directory\n" })).toMatchObject({ kind: 'unavailable' });
  });

  it('sandbox-exec reporting its own failure (64, 65, 71) is unavailable, not denied', () => {
    const seatbelt = { ...base, launcher: 'seatbelt' as const, status: '' };
    expect(classify({ ...seatbelt, exitCode: 71, output: '', launcherStderr: 'sandbox-exec: sandbox_apply: Operation not permitted\n' })).toEqual({ kind: 'unavailable', reason: 'sandbox-exec: sandbox_apply: Operation not permitted' });
    expect(classify({ ...seatbelt, exitCode: 1, output: 'rm: x: Operation not permitted' })).toMatchObject({ kind: 'denied' });
  });
});

/**
 * Integrity round 8 (branch integ8): bubblewrap's refusals by cause. Reference §4.6 and §11:
 * `sandbox_unavailable` is the sandbox itself failing (no namespaces, a capability or fixed mount
 * the kernel refuses), for the session; a sandbox that works but cannot set up one call's path is
 * that call's `execution_failed` (like a launcher that cannot start). Every bubblewrap refusal was
 * `sandbox_unavailable`, whose text tells the model that bash "cannot run commands in this session".
 */
describe("bubblewrap's refusals by cause (integ8)", () => {
  const failed = { launcher: 'bubblewrap' as const, exitCode: 1, output: '', status: '{ "child-pid": 5 }\n', hidden: [], cwd: '/w/ws' };
  const callPaths = ['/', '/tmp', '/w/ws', '/w/ws/.git', '/home/u/.ssh', '/w/ws'];

  it('a refusal naming a path of the call is that call\'s; one naming none (namespaces, fixed mounts) is the sandbox\'s', () => {
    const refusal = (stderr: string) => classify({ ...failed, callPaths, launcherStderr: `bwrap: ${stderr}\n` });
    expect(refusal("Can't chdir to /w/ws: Permission denied")).toEqual({ kind: 'refused', path: '/w/ws', reason: "bubblewrap refused /w/ws: Can't chdir to /w/ws: Permission denied" });
    expect(refusal("Can't create file at /w/ws/.git: Read-only file system")).toMatchObject({ kind: 'refused', path: '/w/ws/.git' });
    expect(refusal("Can't mount tmpfs on /newroot/home/u/.ssh: No space left on device")).toMatchObject({ kind: 'refused', path: '/home/u/.ssh' });
    expect(refusal("Can't bind mount /oldroot/tmp on /newroot/tmp: Permission denied")).toMatchObject({ kind: 'refused', path: '/tmp' });
    // Not a call path: a longer name that only starts with one.
    expect(refusal("Can't mkdir /w/wsx: Permission denied")).toMatchObject({ kind: 'unavailable' });
    for (const kernel of [
      'No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces.',
      'Creating new namespace failed: Operation not permitted',
      "Can't mount proc on /newroot/proc: Operation not permitted",
      "Can't mount tmpfs on /newroot/dev/shm: Operation not permitted",
      "Can't bind mount /oldroot/ on /newroot/: Operation not permitted",
      'Failed to make / slave: Permission denied',
    ]) {
      expect(refusal(kernel), kernel).toEqual({ kind: 'unavailable', reason: `bubblewrap failed: ${kernel}` });
    }
    // Without the call's paths (seatbelt, or an older caller) nothing changes.
    expect(classify({ ...failed, launcherStderr: "bwrap: Can't chdir to /w/ws: Permission denied\n" })).toMatchObject({ kind: 'unavailable' });
  });

  it('a workspace the command may not enter once capabilities are dropped is execution_failed for that call; bash keeps working', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const own = await toolEnv();
    try {
      // The model's own call in auto takes every permission off the workspace root (it owns it).
      const locked = await own.call('bash', { command: 'chmod 000 "$PWD"' });
      expect(locked.result.status).toBe('succeeded');
      const next = await own.call('bash', { command: 'echo ran > ran.txt; echo ran' });
      expect(next.executed).toBe(true);
      expect(next.result.status).toBe('failed');
      expect(next.result.error?.code).toBe('execution_failed');
      expect(next.result.text).toContain(`bubblewrap refused ${own.ws}: Can't chdir to ${own.ws}`);
      expect(next.result.text).not.toContain('cannot run commands in this session');
      expect(own.runtime.sandbox.available).toBe(true);
      chmodSync(own.ws, 0o755);
      expect(existsSync(join(own.ws, 'ran.txt'))).toBe(false);
      const again = await own.call('bash', { command: 'echo ran' });
      expect(again.result).toMatchObject({ status: 'succeeded', text: expect.stringContaining('ran\n[exit 0;') });
    } finally {
      chmodSync(own.ws, 0o755);
      own.cleanup();
    }
  });

  it("a working directory inside another user's private directory is execution_failed, not an unavailable sandbox", async (ctx) => {
    requireSandbox(ctx, env.runtime);
    // Only root reaches into another user's 0700 directory to start the call at all.
    if (process.getuid?.() !== 0) return ctx.skip('needs root: a non-root host cannot open the workspace either');
    const locked = join(env.base, 'locked-by-nobody');
    mkdirSync(join(locked, 'ws'), { recursive: true });
    chownSync(locked, 65534, 65534);
    chmodSync(locked, 0o700);
    const { executed, result } = await env.call('bash', { command: 'echo never' }, { workingDirectory: join(locked, 'ws') });
    expect(executed).toBe(true);
    expect(result.error?.code).toBe('execution_failed');
    expect(result.text).toContain(`Can't chdir to ${join(locked, 'ws')}: Permission denied`);
    expect(result.text).not.toContain('never\n');
    const fine = await env.call('bash', { command: 'echo fine' });
    expect(fine.result.text).toContain('fine\n[exit 0;');
  });
});
