/**
 * The security suite (reference §4.15): every case against the file tools and, where it applies,
 * real bash inside the sandbox. Workspace, HOME and temp directory are private temp directories.
 */
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { bashDenialText, fileDenialText, protectedPathText } from '../../../src/services/permissions/texts.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../../support/tool-env.js';

let env: ToolEnv;
useToolEnv((e) => (env = e));
beforeAll(async () => {
  symlinkSync(env.outside, join(env.ws, 'out-link'));
  symlinkSync(join(env.home, '.ssh'), join(env.ws, 'ssh-link'));
  mkdirSync(join(env.ws, 'sub', '.GIT', 'HOOKS'), { recursive: true });
});

function expectFenceDenial(result: { status: string; text: string; sandboxDenied?: boolean }, access: 'read' | 'write', path: string, mode: 'auto' | 'accept_edits' = 'auto') {
  expect(result).toMatchObject({ status: 'failed', text: fileDenialText(access, path, mode), sandboxDenied: true, error: { code: 'permission_denied' } });
}

function expectKernelDenial(result: { status: string; text: string; sandboxDenied?: boolean }, mode: 'auto' | 'accept_edits' = 'auto') {
  expect(result.status).toBe('succeeded');
  expect(result.sandboxDenied).toBe(true);
  expect(result.text.endsWith(bashDenialText(mode))).toBe(true);
  expect(result.text).toMatch(/\[exit [1-9]\d*; duration \d+ ms\]/);
}

describe('../ traversal', () => {
  it('write ../outside is refused by the fence; read of an ordinary outside file is allowed', async () => {
    const { result } = await env.call('write', { path: '../outside/traversal.txt', content: 'x' });
    expectFenceDenial(result, 'write', join(env.outside, 'traversal.txt'));
    expect(existsSync(join(env.outside, 'traversal.txt'))).toBe(false);
    const read = await env.call('read', { path: '../outside/data.txt' });
    expect(read.result.text).toContain('outside data');
  });

  it('bash: echo > ../outside is denied by the kernel and classified', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const { result } = await env.call('bash', { command: 'echo x > ../outside/traversal-bash.txt' });
    expectKernelDenial(result);
    expect(result.text).toMatch(/Read-only file system/);
    expect(existsSync(join(env.outside, 'traversal-bash.txt'))).toBe(false);
  });
});

describe('absolute paths outside the workspace', () => {
  it('write and edit to an absolute outside path are refused; the file is untouched', async () => {
    const target = join(env.outside, 'data.txt');
    expectFenceDenial((await env.call('write', { path: target, content: 'changed' })).result, 'write', target);
    expectFenceDenial((await env.call('edit', { path: target, oldString: 'outside', newString: 'inside' })).result, 'write', target);
    expect(readFileSync(target, 'utf8')).toBe('outside data\n');
  });

  it('bash: writing an absolute outside path is denied by the kernel', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const target = join(env.outside, 'abs-bash.txt');
    const { result } = await env.call('bash', { command: `echo x > ${target}` });
    expectKernelDenial(result);
    expect(existsSync(target)).toBe(false);
  });

  it('temp directories are writable by both in both modes [reference §4.15 acc 5]', async (ctx) => {
    for (const mode of ['auto', 'accept_edits'] as const) {
      const { result } = await env.call('write', { path: join(env.tmp, `file-${mode}.txt`), content: 'ok' }, { mode });
      expect(result.status).toBe('succeeded');
    }
    requireSandbox(ctx, env.runtime);
    const { result } = await env.call('bash', { command: `echo ok > ${join(env.tmp, 'bash.txt')} && cat ${join(env.tmp, 'bash.txt')}` }, { mode: 'accept_edits' });
    expect(result).toMatchObject({ status: 'succeeded', sandboxDenied: false });
    expect(result.text).toMatch(/^ok\n\[exit 0; duration \d+ ms\]$/);
  });
});

describe('a symlink inside the workspace pointing out', () => {
  it('file tools judge the target: writing through the link is outside the workspace, reading credentials through it is refused', async () => {
    const { result } = await env.call('write', { path: 'out-link/via-link.txt', content: 'x' });
    expectFenceDenial(result, 'write', join(env.outside, 'via-link.txt'));
    const read = await env.call('read', { path: 'ssh-link/id_ed25519' });
    expectFenceDenial(read.result, 'read', join(env.home, '.ssh', 'id_ed25519'));
    const grep = await env.call('grep', { pattern: 'PRIVATE' });
    expect(grep.result.text).not.toContain('PRIVATE KEY');
  });

  it('a dangling symlink is judged at its target: creating a file through it outside the workspace is refused', async () => {
    symlinkSync(join(env.outside, 'not-yet.txt'), join(env.ws, 'dangling'));
    const { result } = await env.call('write', { path: 'dangling', content: 'x' });
    expectFenceDenial(result, 'write', join(env.outside, 'not-yet.txt'));
    expect(existsSync(join(env.outside, 'not-yet.txt'))).toBe(false);
  });

  it('bash: writing through the link is denied by the kernel; reading a credential through it fails', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const write = await env.call('bash', { command: 'echo x > out-link/via-link-bash.txt' });
    expectKernelDenial(write.result);
    expect(existsSync(join(env.outside, 'via-link-bash.txt'))).toBe(false);
    const read = await env.call('bash', { command: 'cat ssh-link/id_ed25519' });
    expectKernelDenial(read.result);
    expect(read.result.text).not.toContain('PRIVATE KEY');
    expect(read.result.text).toMatch(/Permission denied/);
  });
});

describe('.git/hooks in any letter case', () => {
  for (const rel of ['.git/hooks/pre-commit', '.git/HOOKS/post-merge', 'sub/.GIT/HOOKS/pre-push', 'sub/.Git/hooks/x']) {
    it(`write ${rel}: rule denial without a card, whatever the mode`, async () => {
      for (const mode of ['auto', 'accept_edits'] as const) {
        const { authorization, card, result } = await env.call('write', { path: rel, content: 'evil' }, { mode });
        expect(authorization).toEqual({ kind: 'deny', source: 'builtin', text: protectedPathText(join(env.ws, rel)) });
        expect(card).toBeNull();
        expect(result.status).toBe('denied');
      }
    });
  }

  it('bash: the hooks stay unwritable, even with the whole .git granted', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const plain = await env.call('bash', { command: 'echo evil > .git/hooks/pre-commit' });
    expectKernelDenial(plain.result);
    const upper = await env.call('bash', { command: 'echo evil > sub/.GIT/HOOKS/pre-push' });
    expectKernelDenial(upper.result);
    const granted = await env.call(
      'bash',
      { command: 'echo ok > .git/granted && echo evil > .git/hooks/pre-commit', sandboxPermissions: { paths: [{ path: join(env.ws, '.git'), access: 'write', scope: 'subtree' }] }, justification: 'git commit needs to write .git' },
      { decide: () => 'allow_once' },
    );
    expectKernelDenial(granted.result);
    expect(readFileSync(join(env.ws, '.git', 'granted'), 'utf8')).toBe('ok\n');
    expect(readFileSync(join(env.ws, '.git', 'hooks', 'pre-commit'), 'utf8')).toBe('#!/bin/sh\nexit 0\n');
  });
});

describe('hard-protected writes [reference §4.15 acc 9, 39]', () => {
  it('~/.openwork, the skill root and hooks: refused without a card with the exact text, even when escalated', async () => {
    const targets = [join(env.home, '.openwork', 'state.json'), join(env.home, '.agents', 'skills', 'demo', 'SKILL.md'), join(env.ws, '.git', 'hooks', 'pre-commit')];
    for (const path of targets) {
      for (const tool of ['write', 'edit'] as const) {
        const args = tool === 'write' ? { path, content: 'x' } : { path, oldString: 'a', newString: 'b' };
        const plain = await env.call(tool, args);
        expect(plain.authorization).toEqual({ kind: 'deny', source: 'builtin', text: `[sandbox: ${path} is protected and cannot be written in any mode; do not retry]` });
        const escalated = await env.call(tool, { ...args, sandboxPermissions: { paths: [{ path, access: 'write', scope: 'exact' }] }, justification: 'please' });
        expect(escalated.authorization.kind).toBe('deny');
        expect(escalated.card).toBeNull();
      }
    }
    expect(readFileSync(join(env.home, '.agents', 'skills', 'demo', 'SKILL.md'), 'utf8')).toBe('# demo skill\n');
  });

  it('bash cannot write ~/.openwork or the skill root either', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const { result } = await env.call('bash', { command: `echo x > ${join(env.home, '.agents', 'skills', 'demo', 'SKILL.md')}` });
    expectKernelDenial(result);
    const own = await env.call('bash', { command: `touch ${join(env.home, '.openwork', 'x')}` });
    expectKernelDenial(own.result);
  });
});

describe('credential directories [reference §4.15 acc 7]', () => {
  it('read, list and grep refuse credential paths in both modes', async () => {
    for (const mode of ['auto', 'accept_edits'] as const) {
      for (const rel of ['.ssh/id_ed25519', '.netrc', '.config/gh/hosts.yml']) {
        const path = join(env.home, rel);
        expectFenceDenial((await env.call('read', { path }, { mode })).result, 'read', path, mode);
      }
      expectFenceDenial((await env.call('list', { path: join(env.home, '.ssh') }, { mode })).result, 'read', join(env.home, '.ssh'), mode);
    }
    const grep = await env.call('grep', { pattern: 'secret|hunter2|PRIVATE', path: env.home });
    expect(grep.result.text).toMatch(/^No matches/);
    expect(grep.result.text).toMatch(/paths were skipped: not readable under the current mode/);
  });

  it('bash cannot read them either', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    for (const rel of ['.ssh/id_ed25519', '.netrc', '.config/gh/hosts.yml']) {
      const { result } = await env.call('bash', { command: `cat ${join(env.home, rel)}` });
      expectKernelDenial(result);
      expect(result.text).not.toMatch(/PRIVATE|hunter2|secret/);
    }
  });

  it('a read grant opens exactly what it names, for that call [reference §4.15 acc 21]', async (ctx) => {
    // The escalation parameters exist only while the sandbox works (reference §4.9).
    requireSandbox(ctx, env.runtime);
    const path = join(env.home, '.ssh', 'id_ed25519');
    const granted = await env.call('read', { path, sandboxPermissions: { paths: [{ path, access: 'read', scope: 'exact' }] }, justification: 'show the key' }, { decide: () => 'allow_once' });
    expect(granted.result.text).toContain('PRIVATE KEY');
    expectFenceDenial((await env.call('read', { path })).result, 'read', path);
    const bash = await env.call(
      'bash',
      { command: `cat ${path}`, sandboxPermissions: { paths: [{ path: join(env.home, '.ssh'), access: 'read', scope: 'subtree' }] }, justification: 'git push over ssh' },
      { decide: () => 'allow_once' },
    );
    expect(bash.result.text).toContain('PRIVATE KEY');
    // An exact grant inside a hidden directory opens that file by name and nothing beside it.
    const exact = await env.call(
      'bash',
      { command: `cat ${path}; ls ${join(env.home, '.ssh')}`, sandboxPermissions: { paths: [{ path, access: 'read', scope: 'exact' }] }, justification: 'show the key' },
      { decide: () => 'allow_once' },
    );
    expect(exact.result.text).toContain('PRIVATE KEY');
    expect(exact.result.text).toMatch(/ls: cannot open directory .*: Permission denied/);
    expect(exact.result.sandboxDenied).toBe(true);
  });
});

describe('sensitive paths [reference §4.15 acc 8]', () => {
  it('.env and .vscode/settings.json: denied with the hint; the escalated retry asks and then writes', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const path = join(env.ws, '.env');
    await env.call('read', { path: '.env' });
    const denied = await env.call('edit', { path: '.env', oldString: 'abc', newString: 'def' });
    expectFenceDenial(denied.result, 'write', path);
    const retried = await env.call(
      'edit',
      { path: '.env', oldString: 'abc', newString: 'def', sandboxPermissions: { paths: [{ path, access: 'write', scope: 'exact' }] }, justification: 'rotate the token' },
      { decide: () => 'allow_once' },
    );
    expect(retried.card).toMatchObject({ kind: 'escalation', toolName: 'edit', path, reason: 'rotate the token', requestedPaths: [{ path, access: 'write', scope: 'exact', tier: 'sensitive' }] });
    expect(retried.result.status).toBe('succeeded');
    expect(readFileSync(path, 'utf8')).toBe('TOKEN=def\n');
    expectFenceDenial((await env.call('write', { path: '.vscode/settings.json', content: '{}' })).result, 'write', join(env.ws, '.vscode', 'settings.json'));
  });
});
