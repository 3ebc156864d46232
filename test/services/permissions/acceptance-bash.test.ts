/**
 * Permissions acceptance items shown with real commands in the real sandbox (acceptance audit,
 * branch audit-a; reference §4.15 acc 2, 3, 4, 6, 9, 20, 33 and 47): the workspace is a real git repository, and
 * git itself runs under bubblewrap.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { PermissionMode } from '../../../src/protocol/input.js';
import { bashDenialText, NON_INTERACTIVE_REFUSAL_TEXT } from '../../../src/services/permissions/texts.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../../support/tool-env.js';

let env: ToolEnv;
useToolEnv((e) => (env = e));

const GIT = 'git -c user.name=audit -c user.email=audit@example.invalid -c commit.gpgsign=false';
const modes: PermissionMode[] = ['auto', 'accept_edits'];

/** A host-side git command in the workspace (outside the sandbox, as the user would run it). */
function hostGit(...args: string[]): string {
  return execFileSync('git', ['-c', 'user.name=host', '-c', 'user.email=host@example.invalid', '-c', 'advice.ignoredHook=false', ...args], { cwd: env.ws, encoding: 'utf8' });
}

function expectKernelDenial(result: { status: string; text: string; sandboxDenied?: boolean }, mode: PermissionMode): void {
  expect(result.status).toBe('succeeded');
  expect(result.sandboxDenied).toBe(true);
  expect(result.text.endsWith(bashDenialText(mode))).toBe(true);
}

function expectRan(result: { status: string; text: string; sandboxDenied?: boolean }): void {
  expect(result).toMatchObject({ status: 'succeeded', sandboxDenied: false });
  expect(result.text).toMatch(/\[exit 0; duration \d+ ms\]$/);
}

beforeAll(() => {
  // The tool environment's workspace has a stub .git; make it a real repository with one commit.
  hostGit('init', '-q');
  writeFileSync(join(env.ws, 'tracked.txt'), 'one\n');
  hostGit('add', 'tracked.txt');
  hostGit('commit', '-q', '-m', 'first');
});

describe('git and reads in the real sandbox [reference §4.15]', () => {
  it('in auto, git status / log / diff and ls run without a card and without a denial, because the sandbox holds them, not their text [reference §4.15 acc 2, 47]', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    writeFileSync(join(env.ws, 'tracked.txt'), 'one\ntwo\n');
    // No `decide`: a card would fail the call.
    for (const command of ['git status --short', 'git log --oneline', 'git diff --stat', 'ls']) {
      const { card, result } = await env.call('bash', { command }, { mode: 'auto' });
      expect(card, command).toBeNull();
      expectRan(result);
    }
    const log = await env.call('bash', { command: 'git log --oneline' });
    expect(log.result.text).toMatch(/first/);
    // Nothing is allowed by its command text (acc 47): the same familiar command, followed by a write
    // outside the workspace, runs in the same sandbox and the write is denied.
    const target = join(env.outside, 'after-status.txt');
    const chained = await env.call('bash', { command: `git status --short && echo x > ${target}` }, { mode: 'auto' });
    expect(chained.card).toBeNull();
    expectKernelDenial(chained.result, 'auto');
    expect(existsSync(target)).toBe(false);
    hostGit('checkout', '-q', '--', 'tracked.txt');
  });

  it('git add and git commit are denied by the kernel in both modes; with <ws>/.git granted they succeed, and the hooks stay unwritable [reference §4.15 acc 3]', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const head = hostGit('rev-parse', 'HEAD').trim();
    for (const mode of modes) {
      writeFileSync(join(env.ws, `${mode}.txt`), `${mode}\n`);
      const add = await env.call('bash', { command: `git add ${mode}.txt` }, { mode });
      expectKernelDenial(add.result, mode);
      const commit = await env.call('bash', { command: `${GIT} commit -q --allow-empty -m denied` }, { mode });
      expectKernelDenial(commit.result, mode);
      expect(hostGit('rev-parse', 'HEAD').trim()).toBe(head);
      expect(hostGit('status', '--porcelain', `${mode}.txt`)).toBe(`?? ${mode}.txt\n`);
    }
    for (const mode of modes) {
      const granted = await env.call(
        'bash',
        {
          command: `git add ${mode}.txt && ${GIT} commit -q -m "add ${mode}"`,
          sandboxPermissions: { paths: [{ path: join(env.ws, '.git'), access: 'write', scope: 'subtree' }] },
          justification: 'git add and commit write the repository',
        },
        { mode, decide: () => 'allow_once' },
      );
      expectRan(granted.result);
      expect(hostGit('log', '-1', '--format=%s')).toBe(`add ${mode}\n`);
      // The same grant never opens the hooks.
      const hook = await env.call(
        'bash',
        { command: 'echo evil > .git/hooks/pre-commit', sandboxPermissions: { paths: [{ path: join(env.ws, '.git'), access: 'write', scope: 'subtree' }] }, justification: 'git writes its directory' },
        { mode, decide: () => 'allow_once' },
      );
      expectKernelDenial(hook.result, mode);
    }
    expect(readFileSync(join(env.ws, '.git', 'hooks', 'pre-commit'), 'utf8')).toBe('#!/bin/sh\nexit 0\n');
  });

  it('accept-edits: write and edit need no card; a bash workspace write is denied with the hint and succeeds after an escalation; reads and temp writes are unaffected [reference §4.15 acc 4]', async (ctx) => {
    const mode = 'accept_edits';
    const write = await env.call('write', { path: 'edits.txt', content: 'alpha\n' }, { mode });
    expect(write.card).toBeNull();
    expect(write.result.status).toBe('succeeded');
    const edit = await env.call('edit', { path: 'edits.txt', oldString: 'alpha', newString: 'beta' }, { mode });
    expect(edit.card).toBeNull();
    expect(edit.result.status).toBe('succeeded');
    expect(readFileSync(join(env.ws, 'edits.txt'), 'utf8')).toBe('beta\n');

    requireSandbox(ctx, env.runtime);
    const target = join(env.ws, 'edits.txt');
    const denied = await env.call('bash', { command: 'echo gamma >> edits.txt' }, { mode });
    expectKernelDenial(denied.result, mode);
    expect(readFileSync(target, 'utf8')).toBe('beta\n');
    const escalated = await env.call(
      'bash',
      { command: 'echo gamma >> edits.txt', sandboxPermissions: { paths: [{ path: target, access: 'write', scope: 'exact' }] }, justification: 'append the line' },
      { mode, decide: () => 'allow_once' },
    );
    expect(escalated.card).toMatchObject({ kind: 'escalation' });
    expectRan(escalated.result);
    expect(readFileSync(target, 'utf8')).toBe('beta\ngamma\n');

    const read = await env.call('bash', { command: 'cat edits.txt' }, { mode });
    expectRan(read.result);
    expect(read.result.text).toMatch(/^beta\ngamma\n/);
    const temp = await env.call('bash', { command: `echo t > ${join(env.tmp, 'accept-edits.txt')}` }, { mode });
    expectRan(temp.result);
  });

  it('an ordinary file outside the workspace is read without a card, and bash and read see the same bytes [reference §4.15 acc 6]', async (ctx) => {
    const path = join(env.outside, 'data.txt');
    for (const mode of modes) {
      const read = await env.call('read', { path }, { mode });
      expect(read.card).toBeNull();
      expect(read.result.status).toBe('succeeded');
      expect(read.result.text).toContain('outside data');
    }
    requireSandbox(ctx, env.runtime);
    for (const mode of modes) {
      const bash = await env.call('bash', { command: `cat ${path}` }, { mode });
      expect(bash.card).toBeNull();
      expectRan(bash.result);
      expect(bash.result.text).toMatch(/^outside data\n/);
    }
  });

  it('a write grant on ~/.cargo/registry (subtree) lets a fetch write there; every other $HOME write in the same call stays denied [reference §4.15 acc 20]', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const registry = join(env.home, '.cargo', 'registry');
    mkdirSync(registry, { recursive: true });
    const grant = { sandboxPermissions: { paths: [{ path: registry, access: 'write', scope: 'subtree' }] }, justification: 'cargo fetches crates into its registry' };
    const fetched = await env.call('bash', { command: `mkdir -p ${join(registry, 'cache')} && echo crate > ${join(registry, 'cache', 'serde.crate')}`, ...grant }, { decide: () => 'allow_once' });
    expectRan(fetched.result);
    expect(readFileSync(join(registry, 'cache', 'serde.crate'), 'utf8')).toBe('crate\n');
    const other = await env.call('bash', { command: `echo x > ${join(env.home, '.cargo', 'config.toml')}`, ...grant }, { decide: () => 'allow_once' });
    expectKernelDenial(other.result, 'auto');
    expect(existsSync(join(env.home, '.cargo', 'config.toml'))).toBe(false);
    const home = await env.call('bash', { command: `echo x > ${join(env.home, 'note.txt')}` });
    expectKernelDenial(home.result, 'auto');
  });

  it('non-interactive: a dangerous command in auto is refused without a card; in accept-edits it runs and the kernel denies the workspace write [reference §4.15 acc 33]', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const auto = await env.call('bash', { command: 'rm -rf src' }, { mode: 'auto', nonInteractive: true });
    expect(auto.executed).toBe(false);
    expect(auto.result).toMatchObject({ status: 'denied', text: NON_INTERACTIVE_REFUSAL_TEXT, error: { code: 'permission_denied' } });
    const edits = await env.call('bash', { command: 'rm -rf src' }, { mode: 'accept_edits', nonInteractive: true });
    expect(edits.card).toBeNull();
    expect(edits.executed).toBe(true);
    expectKernelDenial(edits.result, 'accept_edits');
    expect(readFileSync(join(env.ws, 'src', 'main.txt'), 'utf8')).toBe('hello\nworld\n');
  });

  it('a grant on a parent of a hard-protected path never opens it: ~/.agents and .git granted, the skill root and the hooks stay unwritable for bash and the file tools [reference §4.15 acc 9]', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const skill = join(env.home, '.agents', 'skills', 'demo', 'SKILL.md');
    const hook = join(env.ws, '.git', 'hooks', 'pre-commit');
    const parents = { sandboxPermissions: { paths: [{ path: join(env.home, '.agents'), access: 'write', scope: 'subtree' }, { path: join(env.ws, '.git'), access: 'write', scope: 'subtree' }] }, justification: 'tidy the agent and git directories' };
    for (const mode of modes) {
      const bash = await env.call('bash', { command: `echo ok > ${join(env.home, '.agents', 'note.txt')}; echo evil > ${skill}; echo evil > ${hook}` }, { mode });
      expectKernelDenial(bash.result, mode);
      const granted = await env.call('bash', { command: `echo ok > ${join(env.home, '.agents', 'note.txt')} && (echo evil > ${skill}; echo evil > ${hook})`, ...parents }, { mode, decide: () => 'allow_once' });
      expectKernelDenial(granted.result, mode);
      expect(readFileSync(join(env.home, '.agents', 'note.txt'), 'utf8')).toBe('ok\n');
      for (const path of [skill, hook]) {
        const write = await env.call('write', { path, content: 'evil', ...parents }, { mode, decide: () => 'allow_once' });
        expect(write.executed).toBe(false);
        expect(write.result.status).toBe('denied');
      }
    }
    expect(readFileSync(skill, 'utf8')).toBe('# demo skill\n');
    expect(readFileSync(hook, 'utf8')).toBe('#!/bin/sh\nexit 0\n');
  });
});
