/**
 * The model writes an AGENTS.md with a NUL character (attack round 3, point 5), through the public
 * API with the built-in tools and World State on. U+0000 is valid UTF-8, so the file passed the
 * reader; World State stores its text before every model call and Postgres refuses U+0000, so the
 * turn failed with `persistence_error`, and so did every later turn of the session, until someone
 * found and fixed the file. Now the section carries U+FFFD in its place and the session goes on.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { scriptedModel } from '../../src/services/model/scripted.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { builtinToolsCore } from '../support/scripted-attack.js';
import { type ToolEnv } from '../support/tool-env.js';
import { useToolTurnBed } from '../support/tool-turn-bed.js';

let storage: SqlSessionStorage;
let env: ToolEnv;
const open = useToolTurnBed((s) => (storage = s), (e) => (env = e));

describe('an AGENTS.md with a NUL character', () => {
  it('written by the model: the turn and the next one complete, the instructions carry U+FFFD', async () => {
    const model = scriptedModel([{ toolCalls: [{ name: 'write', arguments: { path: 'AGENTS.md', content: 'Be nice.\u0000 Really.\n' } }] }, { text: 'done' }, { text: 'next' }]);
    const core = await builtinToolsCore(env, storage, model, { worldState: {} });
    open.push(core);
    const session = await core.createSession({ workingDirectory: env.ws, permissionMode: 'auto' });
    for (const [text, answer] of [['go', 'done'], ['again', 'next']] as const) {
      const { turnId } = await session.startTurn({ clientRequestId: text, input: [{ type: 'text', text }] });
      expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'completed', finalText: answer });
    }
    expect(readFileSync(join(env.ws, 'AGENTS.md'), 'utf8')).toContain('\u0000');
    expect(JSON.stringify(model.requests[2]!.messages)).toContain('Be nice.\ufffd Really.');
  }, 60_000);
});
