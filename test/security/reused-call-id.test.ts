/**
 * Attack round 5: a model (or a provider: some local servers number their calls `call_0` in every
 * response) reuses a tool call id that an earlier response of the same turn used. The store keeps
 * one result per call id and turn (`uq_messages_tool_result`), so before the fix the second call's
 * bash command ran in the sandbox and its result could not be stored: the turn failed
 * `persistence_error` with a side effect the conversation never recorded. Now the conversation
 * refuses the response before it is stored and before anything runs (`chat_state_error`), the next
 * turn runs, and a later turn may use the id again.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { scriptedModel, type ScriptedStep } from '../../src/services/model/scripted.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { requireSandbox, type ToolEnv } from '../support/tool-env.js';
import { useToolTurnBed } from '../support/tool-turn-bed.js';
import { builtinToolsCore } from '../support/scripted-attack.js';

let storage: SqlSessionStorage;
let env: ToolEnv;
const open = useToolTurnBed((s) => (storage = s), (e) => (env = e));

const bash = (callId: string, command: string): ScriptedStep => ({ toolCalls: [{ callId, name: 'bash', arguments: { command } }] });

describe('a tool call id reused within a turn', () => {
  it('a second response reusing call_0 is refused as chat_state_error before its command runs; the next turns use call_0 again', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const model = scriptedModel([
      bash('call_0', 'echo one >> reuse.log'),
      bash('call_0', 'echo two >> reuse.log'),
      // The next turn: call_0 is its own again.
      bash('call_0', 'echo three >> reuse.log'),
      { text: 'done' },
    ]);
    const core = await builtinToolsCore(env, storage, model);
    open.push(core);
    const session = await core.createSession({ workingDirectory: env.ws, permissionMode: 'auto' });
    const first = await session.startTurn({ clientRequestId: 'reuse-1', input: [{ type: 'text', text: 'go' }] });
    expect(await session.waitForTurn(first.turnId)).toMatchObject({ status: 'failed', code: 'chat_state_error', message: expect.stringContaining('"call_0" was already used in this turn') });
    // The first command ran in the sandbox; the second never did.
    expect(readFileSync(join(env.ws, 'reuse.log'), 'utf8')).toBe('one\n');
    // Nothing of the refused response was stored: one call, one result.
    const stored = (await storage.listMessages(session.sessionId)).filter((m) => m.turnId === first.turnId);
    expect(stored.filter((m) => m.role === 'assistant')).toHaveLength(1);
    expect(stored.filter((m) => m.role === 'tool').map((m) => m.providerCallId)).toEqual(['call_0']);

    const second = await session.startTurn({ clientRequestId: 'reuse-2', input: [{ type: 'text', text: 'again' }] });
    expect(await session.waitForTurn(second.turnId)).toMatchObject({ status: 'completed', finalText: 'done' });
    expect(readFileSync(join(env.ws, 'reuse.log'), 'utf8')).toBe('one\nthree\n');
  }, 60_000);

});
