/**
 * Issue 12, point 7: hard links write outside. A file in the workspace that is a hard link to a
 * file outside it (a pnpm store linked into `node_modules`) is one inode under two names, so
 * writing it through the workspace name changes the outside file. write and edit refuse a file
 * with more than one link, with a typed error the model sees; the outside file stays as it was.
 * bash is what it is: the workspace bind is writable, so bash writes through an existing link
 * (documented, and pinned here), but it cannot make a new link to a file outside its writable
 * binds (a link never crosses mounts: EXDEV).
 */
import { linkSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createCore } from '../../src/core.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { hardLinkText } from '../../src/services/tools/verified-open.js';
import { workspaceToolOptions } from '../../src/services/tools/workspace.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../support/tool-env.js';

let storage: SqlSessionStorage;
const cores = usePglite((s) => (storage = s));

let env: ToolEnv;
useToolEnv((e) => (env = e));

const ORIGINAL = 'module.exports = 1;\n';

/** A store file outside the workspace and its hard link inside, as pnpm lays them out. */
function linkedPackage(name: string): { store: string; linked: string } {
  const store = join(env.outside, 'pnpm-store', name, 'index.js');
  const linked = join(env.ws, 'node_modules', name, 'index.js');
  mkdirSync(join(env.outside, 'pnpm-store', name), { recursive: true });
  mkdirSync(join(env.ws, 'node_modules', name), { recursive: true });
  writeFileSync(store, ORIGINAL);
  linkSync(store, linked);
  return { store, linked };
}

function expectHardLinkRefusal(result: { status: string; text: string; error?: { code: string } }, path: string) {
  const text = hardLinkText(path, 2);
  expect(result).toMatchObject({ status: 'failed', text, error: { code: 'permission_denied', message: text, retryable: false } });
}

describe('write and edit on a file with more than one hard link', () => {
  it('write and edit are refused with a typed error; the file outside is unchanged', async () => {
    const { store, linked } = linkedPackage('write-edit');
    expect((await env.call('read', { path: linked })).result.status).toBe('succeeded');
    expectHardLinkRefusal((await env.call('write', { path: linked, content: 'planted\n' })).result, linked);
    expectHardLinkRefusal((await env.call('edit', { path: linked, oldString: '1', newString: '2' })).result, linked);
    expect(readFileSync(store, 'utf8')).toBe(ORIGINAL);
    expect(statSync(store).nlink).toBe(2);
  });

  it('in a real turn the model sees the refusal, and the stored result carries the code', async () => {
    const { store, linked } = linkedPackage('in-turn');
    const rel = 'node_modules/in-turn/index.js';
    const model = scriptedModel([
      { toolCalls: [{ name: 'read', arguments: { path: rel } }] },
      { toolCalls: [{ name: 'edit', arguments: { path: rel, oldString: '= 1', newString: '= 2' } }, { name: 'write', arguments: { path: rel, content: 'planted\n' } }] },
      { text: 'done' },
    ]);
    const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, ...workspaceToolOptions(env.runtime), closeStorageOnShutdown: false });
    cores.push(core);
    const session = await core.createSession({ workingDirectory: env.ws });
    const { turnId } = await session.startTurn({ clientRequestId: 'hard-link', input: [{ type: 'text', text: 'patch the dependency' }] });
    expect(await session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'done' });
    const toolTexts = model.requests.at(-1)!.messages.filter((m) => m.role === 'tool').map((m) => (m as { text: string }).text);
    expect(toolTexts.slice(1)).toEqual([hardLinkText(linked, 2), hardLinkText(linked, 2)]);
    const stored = (await storage.listMessages(session.sessionId)).filter((m) => m.role === 'tool').map((m) => m.content[0] as { status: string; error?: { code: string } });
    expect(stored.slice(1).map((r) => [r.status, r.error?.code])).toEqual([
      ['failed', 'permission_denied'],
      ['failed', 'permission_denied'],
    ]);
    expect(readFileSync(store, 'utf8')).toBe(ORIGINAL);
  });

  it('once the file is a copy of its own (one link), write works and the store is untouched', async () => {
    const { store, linked } = linkedPackage('own-copy');
    writeFileSync(`${linked}.copy`, readFileSync(linked));
    // What the refusal suggests: a copy moved over the link gives the workspace name its own inode.
    renameSync(`${linked}.copy`, linked);
    await env.call('read', { path: linked });
    expect((await env.call('write', { path: linked, content: 'patched\n' })).result.status).toBe('succeeded');
    expect(readFileSync(linked, 'utf8')).toBe('patched\n');
    expect(readFileSync(store, 'utf8')).toBe(ORIGINAL);
  });
});

describe('bash and hard links (documented behaviour)', () => {
  it('bash writes through an existing hard link: the workspace bind is writable, and the inode is the same', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const { store } = linkedPackage('bash-through');
    const { result } = await env.call('bash', { command: 'echo appended >> node_modules/bash-through/index.js' });
    expect(result).toMatchObject({ status: 'succeeded', sandboxDenied: false });
    expect(readFileSync(store, 'utf8')).toBe(`${ORIGINAL}appended\n`);
  });

  it('bash cannot make a new hard link into the workspace to a file outside it', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const target = join(env.outside, 'data.txt');
    const { result } = await env.call('bash', { command: `ln ${target} new-link.txt; echo "rc=$?"` });
    expect(result.text).toMatch(/Invalid cross-device link/);
    expect(result.text).toContain('rc=1');
    expect(statSync(target).nlink).toBe(1);
  });
});
