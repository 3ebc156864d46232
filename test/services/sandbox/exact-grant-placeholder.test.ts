/**
 * Issue 20.1: an approved exact write grant on a file that does not exist yet. The mount plan makes
 * an empty placeholder so that the grant has something to bind; afterwards a file the command
 * created or touched stays, whatever its size, and only a placeholder it never touched is removed.
 * Through the public API: accept-edits (bash may not write the workspace), a scripted model asks
 * for the grant, the host approves, real bubblewrap runs the command.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../../src/core.js';
import { scriptedModel } from '../../../src/services/model/scripted.js';
import { workspaceToolOptions } from '../../../src/services/tools/workspace.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../../support/tool-env.js';
import { usePglite } from '../../support/databases.js';

let env: ToolEnv;
let storage: SqlSessionStorage;
const cores: Core[] = [];

usePglite((s) => (storage = s));
useToolEnv((e) => (env = e));

afterAll(async () => {
  for (const core of cores) await core.shutdown();
});

/** Runs one approved bash call with an exact write grant on `target`; returns the tool result text. */
async function approvedCall(command: string, target: string): Promise<string> {
  const args = { command, sandboxPermissions: { paths: [{ path: target, access: 'write', scope: 'exact' }] }, justification: 'the command creates this file' };
  const model = scriptedModel([{ toolCalls: [{ name: 'bash', arguments: args }] }, { text: 'done' }]);
  const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, closeStorageOnShutdown: false, ...workspaceToolOptions(env.runtime), worldState: false });
  cores.push(core);
  const session = await core.createSession({ workingDirectory: env.ws, permissionMode: 'accept_edits' });
  session.updates$.subscribe((e) => {
    if (e.update.type === 'permission_requested') void session.resolvePermission(e.turnId!, e.update.toolCallId, 'allow_once');
  });
  const { turnId } = await session.startTurn({ clientRequestId: randomUUID(), input: [{ type: 'text', text: 'make the file' }] });
  expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'completed' });
  const result = model.requests[1]!.messages.filter((m) => m.role === 'tool').at(-1) as unknown as { status: string; text: string };
  expect(result.status).toBe('success');
  return result.text;
}

describe('exact write grants on a missing file (issue 20.1)', () => {
  it.for([
    ['touch', (f: string) => `touch ${f} && echo touched`],
    [': >', (f: string) => `: > ${f} && echo truncated`],
    ['cp /dev/null', (f: string) => `cp /dev/null ${f} && echo copied`],
  ] as const)('an empty file the approved command makes with %s stays', async ([name, command], ctx) => {
    requireSandbox(ctx, env.runtime);
    const target = join(env.ws, `empty-${name.replace(/\W+/g, '')}.txt`);
    expect(existsSync(target)).toBe(false);
    const text = await approvedCall(command(target), target);
    expect(text).toMatch(/^(touched|truncated|copied)\n\[exit 0;/);
    expect(existsSync(target)).toBe(true);
    expect(statSync(target).size).toBe(0);
    // The command's file, with the command's time (not the placeholder's epoch mark).
    expect(statSync(target).mtimeMs).toBeGreaterThan(Date.now() - 600_000);
  });

  it('a command that never creates the file leaves no placeholder behind', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const target = join(env.ws, 'never-made.txt');
    const text = await approvedCall('echo not today', target);
    expect(text).toMatch(/^not today\n\[exit 0;/);
    expect(existsSync(target)).toBe(false);
  });

  it('non-empty content stays too', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const target = join(env.ws, 'with-content.txt');
    await approvedCall(`echo hello > ${target}`, target);
    expect(readFileSync(target, 'utf8')).toBe('hello\n');
  });
});
