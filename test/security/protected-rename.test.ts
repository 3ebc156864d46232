/**
 * Issue 12.5, "protected names can be renamed away": bubblewrap protects `sub/.git` and `sub/.env`
 * by mounting them read-only, but a mount follows the directory it sits in. The attack renames the
 * nested repository away, puts a copy of its `.git` at the old path, and then plants a hook and
 * appends to `.env` there. The protection must follow the path: the rename fails (every writable
 * ancestor of a protected path is a mount point), and the file tools refuse the planted paths.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fileDenialText, protectedPathText } from '../../src/services/permissions/texts.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { scriptedAttack } from '../support/scripted-attack.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../support/tool-env.js';

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));
let env: ToolEnv;
useToolEnv((e) => (env = e));

const HOOK = "#!/bin/sh\necho pwned > /tmp/pwned\n";

/** A nested repository `<ws>/<rel>` with a `.env`, as a user would have it. */
function nestedRepo(rel: string): string {
  const repo = join(env.ws, rel);
  mkdirSync(repo, { recursive: true });
  execFileSync('git', ['init', '-q', repo]);
  writeFileSync(join(repo, '.env'), 'TOKEN=abc\n');
  return repo;
}

/** The attack of the issue, each step attempted even when the one before failed. */
function renameAttack(rel: string): string {
  return [
    `mv ${rel} ${rel}2`,
    `mkdir ${rel}`,
    `cp -a ${rel}2/.git ${rel}/.git`,
    `cp -a ${rel}2/.env ${rel}/.env`,
    `printf '${HOOK.replace(/\n/g, '\\n')}' > ${rel}/.git/hooks/pre-commit`,
    `chmod +x ${rel}/.git/hooks/pre-commit`,
    `echo 'EXTRA=1' >> ${rel}/.env`,
    'true',
  ].join('; ');
}

function expectUntouched(repo: string, rel: string): void {
  expect(existsSync(join(env.ws, `${rel}2`))).toBe(false);
  expect(existsSync(join(repo, '.git', 'hooks', 'pre-commit'))).toBe(false);
  expect(readFileSync(join(repo, '.env'), 'utf8')).toBe('TOKEN=abc\n');
  expect(execFileSync('git', ['rev-parse', '--git-dir'], { cwd: repo, encoding: 'utf8' }).trim()).toBe('.git');
}

describe('mv sub sub2; mkdir sub; cp -a sub2/.git sub/.git; then plant a hook and append to sub/.env', () => {
  it('bash in the real sandbox: the rename fails, nothing is planted', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const repo = nestedRepo('sub');
    const { results } = await scriptedAttack(env, storage, [{ name: 'bash', arguments: { command: renameAttack('sub') } }]);
    expect(results[0]).toMatch(/mv: cannot move 'sub' to 'sub2': Device or resource busy/);
    expectUntouched(repo, 'sub');
  });

  it('the same two levels down, and renaming the level above instead', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const repo = nestedRepo('pkgs/lib/sub');
    await scriptedAttack(env, storage, [{ name: 'bash', arguments: { command: renameAttack('pkgs/lib/sub') } }]);
    expectUntouched(repo, 'pkgs/lib/sub');
    const { results } = await scriptedAttack(env, storage, [{ name: 'bash', arguments: { command: `mv pkgs pkgs2; mkdir -p pkgs/lib/sub; cp -a pkgs2/lib/sub/.git pkgs/lib/sub/.git; echo x > pkgs/lib/sub/.git/hooks/pre-commit; true` } }]);
    expect(results[0]).toMatch(/Device or resource busy/);
    expect(existsSync(join(env.ws, 'pkgs2'))).toBe(false);
    expectUntouched(repo, 'pkgs/lib/sub');
  });

  it('the file tools, after the rename: the planted hook is refused by rule and .env asks first', async () => {
    const repo = nestedRepo('moved');
    // The rename as the user might do it themselves, outside any sandbox.
    execFileSync('sh', ['-c', 'mv moved moved2 && mkdir moved && cp -a moved2/.git moved/.git && cp -a moved2/.env moved/.env'], { cwd: env.ws });
    const { results, cards } = await scriptedAttack(env, storage, [
      { name: 'write', arguments: { path: 'moved/.git/hooks/pre-commit', content: HOOK } },
      { name: 'read', arguments: { path: 'moved/.env' } },
      { name: 'edit', arguments: { path: 'moved/.env', oldString: 'TOKEN=abc\n', newString: 'TOKEN=abc\nEXTRA=1\n' } },
    ]);
    expect(cards).toEqual([]);
    expect(results[0]).toBe(protectedPathText(join(repo, '.git', 'hooks', 'pre-commit')));
    expect(results[2]).toBe(fileDenialText('write', join(repo, '.env'), 'auto'));
    expect(existsSync(join(repo, '.git', 'hooks', 'pre-commit'))).toBe(false);
    expect(readFileSync(join(repo, '.env'), 'utf8')).toBe('TOKEN=abc\n');
  });

  it('ordinary work next to a protected path still works: files beside .git are written and renamed', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const repo = nestedRepo('work');
    const { results } = await scriptedAttack(env, storage, [{ name: 'bash', arguments: { command: 'echo a > work/a.txt && mv work/a.txt work/b.txt && mkdir work/d && mv work/d work/e && cat work/b.txt' } }]);
    expect(results[0]).toMatch(/^a\n\[exit 0; duration \d+ ms\]$/);
    expect(readFileSync(join(repo, 'b.txt'), 'utf8')).toBe('a\n');
  });
});
