/**
 * Attack round 6: a workspace inside a temp directory (a checkout under /tmp, a `mktemp -d`
 * project). Temp dirs are writable by bash in both modes (reference §4.2), and the policy asked
 * "is it temp?" before "is it the workspace?", so under `accept-edits` bash wrote the workspace
 * without a card, and an explorer (always `accept-edits`; reference §5.4: its bash cannot write
 * the workspace) deleted its parent's files. The workspace rule now wins for paths
 * in a workspace that lies inside a temp dir; a temp dir inside the workspace stays writable.
 * Through `createCore` with the built-in bash under the real bubblewrap.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { builtinToolsCore } from '../support/scripted-attack.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../support/tool-env.js';
import { router, toolResults } from '../services/agents/support.js';
import { scriptedModel } from '../../src/services/model/scripted.js';

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));
let env: ToolEnv;
useToolEnv((e) => (env = e));

/** A project inside the sandbox's temp directory, with a file the attack goes for. */
function projectInTemp(name: string): string {
  const project = join(env.tmp, name);
  mkdirSync(join(project, 'src'), { recursive: true });
  writeFileSync(join(project, 'src', 'main.txt'), 'keep me\n');
  return project;
}

describe('a workspace inside a temp directory (attack round 6)', () => {
  it("an explorer's bash cannot delete or change its parent's workspace", async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const project = projectInTemp('explored');
    const model = router(
      (_r, i) =>
        i === 0
          ? { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'scout', message: 'Look around.' } }] }
          : i === 1
            ? { toolCalls: [{ name: 'wait_agent', arguments: { timeout_ms: 600_000 } }] }
            : { text: 'root done' },
      (request) => {
        const ran = toolResults(request).find((r) => r.toolName === 'bash');
        if (ran) return { text: `explorer saw: ${ran.text}` };
        // A temp file of its own is fine; the project's files are not the explorer's to change.
        const command = `echo scratch > '${join(env.tmp, 'scratch.txt')}' && echo SCRATCH; echo evil > '${join(project, 'src', 'main.txt')}'; rm -rf '${join(project, 'src')}'; touch '${join(project, 'planted')}'; ls '${project}'`;
        return { toolCalls: [{ name: 'bash', arguments: { command } }] };
      },
    );
    const core = await builtinToolsCore(env, storage, model, { worldState: false });
    try {
      const session = await core.createSession({ workingDirectory: project, permissionMode: 'auto' });
      const { turnId } = await session.startTurn({ clientRequestId: 'tmp-explorer', input: [{ type: 'text', text: 'go' }] });
      expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'completed' });
      const ran = model.requests.flatMap((r) => toolResults(r)).find((r) => r.toolName === 'bash');
      expect(ran?.text).toContain('SCRATCH');
      expect(readFileSync(join(project, 'src', 'main.txt'), 'utf8')).toBe('keep me\n');
      expect(existsSync(join(project, 'planted'))).toBe(false);
    } finally {
      await core.shutdown();
    }
  }, 120_000);

  it('under accept-edits a root bash write to the workspace is denied (no card), and the file tools still write', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const project = projectInTemp('edited');
    const model = scriptedModel([
      { toolCalls: [{ name: 'bash', arguments: { command: `echo evil > '${join(project, 'src', 'main.txt')}'; echo scratch > '${join(env.tmp, 'scratch2.txt')}' && echo SCRATCH` } }] },
      { toolCalls: [{ name: 'write', arguments: { path: join(project, 'src', 'new.txt'), content: 'by the file tool\n' } }] },
      { text: 'done' },
    ]);
    const core = await builtinToolsCore(env, storage, model, { worldState: false });
    try {
      const session = await core.createSession({ workingDirectory: project, permissionMode: 'accept_edits' });
      const cards: unknown[] = [];
      session.updates$.subscribe((u) => {
        if (u.update.type === 'permission_requested') cards.push(u.update.card);
      });
      const { turnId } = await session.startTurn({ clientRequestId: 'tmp-accept', input: [{ type: 'text', text: 'go' }] });
      expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'completed' });
      expect(readFileSync(join(project, 'src', 'main.txt'), 'utf8')).toBe('keep me\n');
      const results = toolResults(model.requests.at(-1)!);
      expect(results[0]!.text).toContain('SCRATCH');
      expect(results[0]!.text).toMatch(/Read-only file system/);
      expect(cards).toHaveLength(0);
      expect(readFileSync(join(project, 'src', 'new.txt'), 'utf8')).toBe('by the file tool\n');
    } finally {
      await core.shutdown();
    }
  }, 120_000);
});
