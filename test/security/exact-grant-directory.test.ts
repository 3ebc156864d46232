/**
 * Attack round 6: an `exact` grant that names a directory. Reference §4.9 says `exact` is one file
 * (the card shows "(file)"), and the subtree rules refuse `/`, the home directory and its ancestors
 * as too broad. bubblewrap binds a path as it is, so an exact write grant on the home directory
 * (approved as "writing <home> (file)") made the whole home writable to the command: a script in
 * `~/.local/bin` runs the next time the user types its name. An exact read grant on `~/.ssh` read
 * every key in it. And a grant approved for a file must not cover what that path is later (a
 * directory). Through `createCore` with the built-in bash under the real bubblewrap.
 */
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { scriptedAttack } from '../support/scripted-attack.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../support/tool-env.js';
import { validateEscalation } from '../../src/services/permissions/escalation.js';
import { buildMountPlan } from '../../src/services/sandbox/mount-plan.js';

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));
let env: ToolEnv;
useToolEnv((e) => (env = e));

const exact = (path: string, access: 'read' | 'write') => ({ sandboxPermissions: { paths: [{ path, access, scope: 'exact' as const }] }, justification: 'I need this one file.' });

describe('an exact grant names a directory (attack round 6)', () => {
  it('an exact write grant on the home directory, approved, does not make the home writable', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const planted = join(env.home, '.local', 'bin', 'git');
    const { results, cards } = await scriptedAttack(
      env,
      storage,
      [{ name: 'bash', arguments: { command: `mkdir -p '${join(env.home, '.local', 'bin')}' && printf '#!/bin/sh\\necho pwned\\n' > '${planted}' && echo WROTE`, ...exact(env.home, 'write') } }],
      { decide: () => 'allow_once' },
    );
    expect(results[0]).not.toContain('WROTE');
    expect(existsSync(planted)).toBe(false);
    // Refused before any card: a directory is not one file, and a subtree there is too broad.
    expect(cards).toHaveLength(0);
    expect(results[0]).toMatch(/is a directory/);
  }, 60_000);

  it('an exact read grant on ~/.ssh, approved, does not read the keys in it', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const { results, cards } = await scriptedAttack(
      env,
      storage,
      [{ name: 'bash', arguments: { command: `cat '${join(env.home, '.ssh', 'id_ed25519')}'; echo END`, ...exact(join(env.home, '.ssh'), 'read') } }],
      { decide: () => 'allow_once' },
    );
    expect(results.join('\n')).not.toContain('PRIVATE KEY');
    expect(cards).toHaveLength(0);
  }, 60_000);

  it('a grant validated for a file that is a directory when the sandbox is built covers nothing below it', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    // The time-of-use half: validation saw a file, the mount plan finds a directory.
    const target = join(env.outside, 'notes');
    rmSync(target, { recursive: true, force: true });
    writeFileSync(target, 'a file at grant time\n');
    const policy = env.runtime.policy('auto', env.ws);
    const verdict = validateEscalation(exact(target, 'write'), policy, 'bash');
    expect(verdict.ok).toBe(true);
    if (!verdict.ok) return;
    rmSync(target);
    mkdirSync(target);
    writeFileSync(join(target, 'inside.txt'), 'original\n');
    const plan = buildMountPlan(policy.withGrants(verdict.grants));
    expect(plan.ops.find((o) => o.path === target && o.mode === 'rw')).toBeUndefined();
    // And through a real bash call: refused before a card, nothing below the directory changes.
    const { results } = await scriptedAttack(
      env,
      storage,
      [{ name: 'bash', arguments: { command: `echo changed > '${join(target, 'inside.txt')}'; echo DONE`, ...exact(target, 'write') } }],
      { decide: () => 'allow_once' },
    );
    expect(readFileSync(join(target, 'inside.txt'), 'utf8')).toBe('original\n');
    expect(results[0]).toMatch(/is a directory/);
  }, 60_000);

  it('an exact write grant on a file still writes that file and nothing beside it', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const dir = join(env.outside, 'single');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'one.txt'), 'one\n');
    const { results, cards } = await scriptedAttack(
      env,
      storage,
      [{ name: 'bash', arguments: { command: `echo new > '${join(dir, 'one.txt')}' && echo OK1; echo new > '${join(dir, 'two.txt')}' && echo OK2`, ...exact(join(dir, 'one.txt'), 'write') } }],
      { decide: () => 'allow_once' },
    );
    expect(cards).toHaveLength(1);
    expect(cards[0]!.summary).toContain('(file)');
    expect(results[0]).toContain('OK1');
    expect(results[0]).not.toContain('OK2');
    expect(readFileSync(join(dir, 'one.txt'), 'utf8')).toBe('new\n');
    expect(existsSync(join(dir, 'two.txt'))).toBe(false);
  }, 60_000);
});
