/**
 * Issue 12.4, "the store is writable by the agent": the CLI keeps its PGlite directory at
 * `<workdir>/.openwork/db`, inside the workspace the agent works in. A hostile model tries to read,
 * rewrite, delete and rename it with every tool (and to escalate into it); the store must come out
 * unchanged and still work. The same holds for a store outside the workspace and for a
 * configuration file the host declares. The CLI keeps `.openwork/` out of the user's repository.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStorage } from '../../src/cli/storage.js';
import { runtimePathText } from '../../src/services/permissions/texts.js';
import { pgliteStorage } from '../../src/storage/pglite.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { scriptedAttack } from '../support/scripted-attack.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../support/tool-env.js';

let env: ToolEnv;
let storage: SqlSessionStorage;
let store: string;
let version: string;
let storeListing: string[];

useToolEnv((e) => (env = e));
beforeAll(async () => {
  store = join(env.ws, '.openwork', 'db');
  storage = pgliteStorage({ dataDir: store });
  await storage.migrate();
  version = readFileSync(join(store, 'PG_VERSION'), 'utf8');
  storeListing = readdirSync(store).sort();
  // A PGlite initdb in a directory takes seconds, and minutes on a loaded machine.
}, 300_000);
afterAll(async () => {
  await storage.close();
});

const call = (name: string, args: Record<string, unknown>) => ({ name, arguments: args });

function expectStoreIntact(): void {
  expect(readFileSync(join(store, 'PG_VERSION'), 'utf8')).toBe(version);
  expect(readdirSync(store).sort()).toEqual(storeListing);
}

describe('the PGlite store inside the workspace', () => {
  it('write and edit into the store are refused by rule, without a card', async () => {
    const { results, cards } = await scriptedAttack(env, storage, [
      call('write', { path: '.openwork/db/PG_VERSION', content: '1\n' }),
      call('write', { path: '.openwork/db/evil.sql', content: 'DELETE FROM messages;' }),
      call('edit', { path: join(store, 'PG_VERSION'), oldString: version.trim(), newString: '1' }),
    ]);
    expect(results).toEqual([runtimePathText(join(store, 'PG_VERSION')), runtimePathText(join(store, 'evil.sql')), runtimePathText(join(store, 'PG_VERSION'))]);
    expect(cards).toEqual([]);
    expect(existsSync(join(store, 'evil.sql'))).toBe(false);
    expectStoreIntact();
  });

  it('read, grep, glob and list do not show what is in it', async () => {
    const { results } = await scriptedAttack(env, storage, [
      call('read', { path: '.openwork/db/PG_VERSION' }),
      call('grep', { pattern: 'max_connections', path: '.' }),
      call('glob', { pattern: '.openwork/**' }),
      call('list', { path: '.openwork', recursive: true }),
      call('list', { path: '.openwork/db' }),
    ]);
    expect(results[0]).toBe(runtimePathText(join(store, 'PG_VERSION')));
    expect(results[4]).toBe(runtimePathText(store));
    expect(results[1]).toMatch(/^No matches for "max_connections"/);
    expect(results[2]).toMatch(/^No files match ".openwork\/\*\*"/);
    expect(results[3]).not.toMatch(/PG_VERSION|postgresql\.conf|base/);
  });

  it('an escalation into the store is refused without asking the user', async () => {
    const { results, cards } = await scriptedAttack(
      env,
      storage,
      [
        call('write', { path: '.openwork/db/PG_VERSION', content: '1\n', sandboxPermissions: { paths: [{ path: store, access: 'write', scope: 'subtree' }] }, justification: 'repair the database' }),
        call('bash', { command: 'cat .openwork/db/PG_VERSION', sandboxPermissions: { paths: [{ path: store, access: 'read', scope: 'subtree' }] }, justification: 'inspect the database' }),
      ],
      { decide: () => 'allow_once' },
    );
    expect(cards).toEqual([]);
    expect(results[0]).toBe(runtimePathText(join(store, 'PG_VERSION')));
    expect(results[1]).toBe(`[sandbox: escalation refused without asking the user: ${store} belongs to the runtime (its session store or configuration) and cannot be read or written in any mode; do not retry]`);
    expectStoreIntact();
  });

  it('bash cannot read, overwrite, delete or rename it; the store still works afterwards', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const command = [
      'cat .openwork/db/PG_VERSION',
      'echo 1 > .openwork/db/PG_VERSION',
      'rm -rf .openwork/db/base',
      'mv .openwork/db .openwork/db-old',
      'mv .openwork .openwork-old',
      'mkdir -p .openwork/db',
      'ls .openwork/db',
      'true',
    ].join('; ');
    // The user even approves the danger card of `rm -rf`: the command still runs in the sandbox.
    const { results, cards } = await scriptedAttack(env, storage, [call('bash', { command })], { decide: () => 'allow_once' });
    expect(cards.map((c) => c.kind)).toEqual(['danger']);
    expect(results[0]).toMatch(/\[exit 0; duration \d+ ms\]/);
    // PG_VERSION's content on a line of its own (a bare 'not.toContain' also matches the result's duration).
    expect(results[0]).not.toMatch(new RegExp(`^${version.trim()}$`, 'm'));
    expect(existsSync(join(env.ws, '.openwork-old'))).toBe(false);
    expect(existsSync(join(env.ws, '.openwork', 'db-old'))).toBe(false);
    expectStoreIntact();
    // The turn's own rows were written after the attack: the database is whole.
    expect((await storage.listSessions()).length).toBeGreaterThan(0);
  });
});

describe('a store and a configuration file outside the workspace, declared by the host', () => {
  it('are as private as the store inside it, for the file tools and for bash', async (ctx) => {
    const outsideStore = join(env.outside, 'store');
    const config = join(env.outside, 'openwork.json');
    mkdirSync(outsideStore, { recursive: true });
    writeFileSync(join(outsideStore, 'PG_VERSION'), '17\n');
    writeFileSync(config, '{"apiKey":"sk-secret"}\n');
    env.runtime.protectRuntimePaths([outsideStore, config]);
    const { results, cards } = await scriptedAttack(env, storage, [
      call('read', { path: join(outsideStore, 'PG_VERSION') }),
      call('read', { path: config }),
      call('write', { path: config, content: '{}', sandboxPermissions: { paths: [{ path: config, access: 'write', scope: 'exact' }] }, justification: 'reset the config' }),
    ]);
    expect(cards).toEqual([]);
    expect(results).toEqual([runtimePathText(join(outsideStore, 'PG_VERSION')), runtimePathText(config), runtimePathText(config)]);
    requireSandbox(ctx, env.runtime);
    const bash = await scriptedAttack(env, storage, [call('bash', { command: `cat ${join(outsideStore, 'PG_VERSION')} ${config}; echo x > ${config}; echo x > ${outsideStore}/evil; true` })]);
    // The store's PG_VERSION holds a line `17`; the result's own `[exit 0; duration 176 ms]` must not count.
    expect(bash.results[0]).not.toMatch(/^17$|sk-secret/m);
    expect(readFileSync(config, 'utf8')).toBe('{"apiKey":"sk-secret"}\n');
    expect(readdirSync(outsideStore)).toEqual(['PG_VERSION']);
  });
});

describe('the CLI', () => {
  it('writes .openwork/.gitignore (`*`), so the store never shows up in the user repository', async () => {
    const repo = join(env.base, 'cli-repo');
    mkdirSync(repo, { recursive: true });
    execFileSync('git', ['init', '-q', repo]);
    const dataDir = join(repo, '.openwork', 'db');
    const cliStorage = openStorage({ workingDirectory: repo, dataDir });
    expect(readFileSync(join(repo, '.openwork', '.gitignore'), 'utf8')).toBe('*\n');
    expect(cliStorage.protectedPaths).toEqual([dataDir]);
    // Stand-in store files (opening PGlite here would only cost time): git does not see them.
    mkdirSync(join(dataDir, 'base'), { recursive: true });
    writeFileSync(join(dataDir, 'PG_VERSION'), '17\n');
    expect(execFileSync('git', ['status', '--porcelain', '--untracked-files=all'], { cwd: repo, encoding: 'utf8' })).toBe('');
    await cliStorage.close();
  });
});
