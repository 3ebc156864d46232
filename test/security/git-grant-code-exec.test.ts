/**
 * Issue 12.6, "a `.git` grant opens code execution": after the user approves the usual "write
 * `<ws>/.git` (subtree)" escalation, a hostile model sets `core.fsmonitor` / `core.hooksPath` and
 * writes a submodule's hook, and its code runs on the user's next `git status`. `.git/config` and
 * every `hooks` directory under any git directory (submodules' included) must stay protected with
 * that grant, and the card must say so. The rest of `.git` is still opened by the grant.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { GIT_GRANT_NOTE, protectedPathText } from '../../src/services/permissions/texts.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { scriptedAttack } from '../support/scripted-attack.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../support/tool-env.js';

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));
let env: ToolEnv;
let gitDir: string;
let moduleDir: string;
useToolEnv((e) => (env = e));
beforeAll(async () => {
  // The workspace is a real repository with a submodule whose git directory is `.git/modules/lib`.
  execFileSync('git', ['init', '-q', env.ws]);
  mkdirSync(join(env.ws, '.git', 'modules'));
  execFileSync('git', ['init', '-q', '--separate-git-dir', join(env.ws, '.git', 'modules', 'lib'), join(env.ws, 'lib')]);
  gitDir = join(env.ws, '.git');
  moduleDir = join(gitDir, 'modules', 'lib');
});

/** The call with the grant the model asks for and the user approves: write `<ws>/.git` (subtree). */
function withGitGrant(args: Record<string, unknown>): Record<string, unknown> {
  return { ...args, sandboxPermissions: { paths: [{ path: gitDir, access: 'write', scope: 'subtree' }] }, justification: 'git needs to write its own directory to commit' };
}

/** `git config --get` on the host, as the user's next git command would read it. */
function hostConfig(cwd: string, key: string): string | null {
  const run = spawnSync('git', ['config', '--get', key], { cwd, encoding: 'utf8' });
  return run.status === 0 ? run.stdout.trim() : null;
}

function expectNoCodeExecution(): void {
  expect(hostConfig(env.ws, 'core.fsmonitor')).toBeNull();
  expect(hostConfig(env.ws, 'core.hooksPath')).toBeNull();
  expect(hostConfig(join(env.ws, 'lib'), 'core.fsmonitor')).toBeNull();
  expect(existsSync(join(moduleDir, 'hooks', 'post-checkout'))).toBe(false);
  expect(existsSync(join(gitDir, 'hooks', 'post-checkout'))).toBe(false);
}

describe('with the "write <ws>/.git (subtree)" grant approved', () => {
  it('bash: git config core.fsmonitor / core.hooksPath and a submodule hook all fail; other .git writes work', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const command = [
      "git config core.fsmonitor 'touch /tmp/pwned-fsmonitor'",
      'git config core.hooksPath .git/evil-hooks',
      "git -C lib config core.fsmonitor 'touch /tmp/pwned-sub'",
      "printf '#!/bin/sh\\ntouch /tmp/pwned-hook\\n' > .git/modules/lib/hooks/post-checkout",
      "printf '#!/bin/sh\\ntouch /tmp/pwned-hook\\n' > .git/hooks/post-checkout",
      'mv .git/modules/lib .git/modules/lib2',
      'echo granted > .git/description',
      'true',
    ].join('; ');
    const { results, cards } = await scriptedAttack(env, storage, [{ name: 'bash', arguments: withGitGrant({ command }) }], { decide: () => 'allow_once' });
    expect(cards).toHaveLength(1);
    expect(cards[0]).toMatchObject({ kind: 'escalation', summary: `this once, additionally allow writing ${gitDir} (subtree); ${GIT_GRANT_NOTE}` });
    expect(results[0]).toMatch(/could not (lock|write) config file/);
    expectNoCodeExecution();
    expect(existsSync(join(gitDir, 'modules', 'lib2'))).toBe(false);
    // The grant still opens what it names: the rest of .git.
    expect(readFileSync(join(gitDir, 'description'), 'utf8')).toBe('granted\n');
  });

  it('file tools: writing .git/config or a submodule hook is refused by rule, without a card; the rest of .git is written', async () => {
    const { results, cards } = await scriptedAttack(
      env,
      storage,
      [
        { name: 'write', arguments: withGitGrant({ path: '.git/config', content: '[core]\n\tfsmonitor = touch /tmp/pwned\n' }) },
        { name: 'write', arguments: withGitGrant({ path: '.git/modules/lib/hooks/post-checkout', content: '#!/bin/sh\ntouch /tmp/pwned\n' }) },
        { name: 'write', arguments: withGitGrant({ path: '.git/modules/lib/config.worktree', content: '[core]\n\thooksPath = /tmp\n' }) },
        { name: 'write', arguments: withGitGrant({ path: '.git/info/granted.txt', content: 'ok\n' }) },
      ],
      { decide: () => 'allow_once' },
    );
    expect(results.slice(0, 3)).toEqual([
      protectedPathText(join(gitDir, 'config')),
      protectedPathText(join(moduleDir, 'hooks', 'post-checkout')),
      protectedPathText(join(moduleDir, 'config.worktree')),
    ]);
    expect(cards.map((c) => c.summary)).toEqual([`this once, additionally allow writing ${gitDir} (subtree); ${GIT_GRANT_NOTE}`]);
    expect(results[3]).toMatch(/^Created /);
    expectNoCodeExecution();
  });

  it('an escalation naming .git/config itself is refused without a card', async () => {
    const { results, cards } = await scriptedAttack(env, storage, [
      { name: 'bash', arguments: { command: 'git config core.fsmonitor x', sandboxPermissions: { paths: [{ path: join(gitDir, 'config'), access: 'write', scope: 'exact' }] }, justification: 'set a git option' } },
    ]);
    expect(cards).toEqual([]);
    expect(results[0]).toBe(`[sandbox: escalation refused without asking the user: ${join(gitDir, 'config')} is protected and cannot be written in any mode; do not retry]`);
    expectNoCodeExecution();
  });
});
