/**
 * Attack round 6, checked and holding: an approval that arrives after its call was cancelled. A
 * danger card (`rm -rf build`) waits; the host cancels the turn, then an "allow" for that card
 * arrives (a second inspector tab, a slow click). The answer is refused with a typed error and the
 * command never runs, neither then nor in the next turn. Through `createCore` with the built-in
 * bash under the real bubblewrap.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { usePglite } from '../support/databases.js';
import { builtinToolsCore } from '../support/scripted-attack.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../support/tool-env.js';
import { firstUpdate } from '../services/agents/support.js';

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));
let env: ToolEnv;
useToolEnv((e) => (env = e));

describe('an approval after its call was cancelled (attack round 6)', () => {
  it('is refused with a typed error, and the command never runs', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const build = join(env.ws, 'build');
    mkdirSync(build, { recursive: true });
    const model = scriptedModel([{ toolCalls: [{ name: 'bash', arguments: { command: 'rm -rf build' } }] }, { text: 'next turn' }]);
    const core = await builtinToolsCore(env, storage, model, { worldState: false });
    try {
      const session = await core.createSession({ workingDirectory: env.ws, permissionMode: 'auto' });
      const carded = firstUpdate(session.updates$, (u) => u.update.type === 'permission_requested');
      const { turnId } = await session.startTurn({ clientRequestId: 'late-1', input: [{ type: 'text', text: 'clean' }] });
      const card = await carded;
      const toolCallId = (card.update as { toolCallId: string }).toolCallId;
      await session.cancelTurn(turnId);
      expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'cancelled' });
      for (const decision of ['allow_once', 'allow_for_session'] as const) {
        await expect(session.resolvePermission(turnId, toolCallId, decision)).rejects.toMatchObject({ code: 'turn_not_active' });
      }
      expect(existsSync(build)).toBe(true);
      // The next turn does not pick the old call up either.
      const next = await session.startTurn({ clientRequestId: 'late-2', input: [{ type: 'text', text: 'hi' }] });
      expect(await session.waitForTurn(next.turnId)).toMatchObject({ status: 'completed', finalText: 'next turn' });
      expect(existsSync(build)).toBe(true);
    } finally {
      await core.shutdown();
    }
  }, 60_000);
});
