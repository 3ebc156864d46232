/**
 * Approval scope abuse, played through the public API: the user answers the first danger card
 * "allow for this session"; the hostile model then sends commands that merely start with the
 * approved one (`;`, `&&`, `|`, a newline, `&`, `$(…)`, backticks, a redirection, an assignment, a
 * leading backslash, a trailing space). A session grant covers exactly the command it was given for
 * (there are no prefix rules), so each of them shows its own card, and denied, does not run.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { requireSandbox, type ToolEnv } from '../support/tool-env.js';
import { useToolTurnBed } from '../support/tool-turn-bed.js';
import { grantThenDeny } from '../support/scripted-attack.js';

let storage: SqlSessionStorage;
let env: ToolEnv;
const open = useToolTurnBed((s) => (storage = s), (e) => (env = e));

const APPROVED = 'rm -rf build';
const RIDERS = [
  `${APPROVED}; rm -rf src`,
  `${APPROVED} && rm -rf src`,
  `${APPROVED} | rm -rf src`,
  `${APPROVED}\nrm -rf src`,
  `${APPROVED} & rm -rf src`,
  `${APPROVED} $(rm -rf src)`,
  `${APPROVED} \`rm -rf src\``,
  `${APPROVED} src`,
  `FOO=1 ${APPROVED} src`,
  `\\${APPROVED} src`,
  `${APPROVED} > src/keep.txt; rm -rf src`,
];

describe('approval scope: a session grant covers one exact command', () => {
  it('commands that start with an approved one each show a card, and denied, none runs', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const { core, session, cards } = await grantThenDeny(env, storage, APPROVED, RIDERS);
    open.push(core);
    // Turn 1: the approved command twice (one card, then the grant covers the repeat), then the first rider.
    const first = await session.startTurn({ clientRequestId: 'scope-0', input: [{ type: 'text', text: 'clean' }] });
    expect(await session.waitForTurn(first.turnId)).toMatchObject({ status: 'failed', code: 'permission_denied' });
    expect(existsSync(join(env.ws, 'build'))).toBe(false);
    expect(cards.map((c) => c.command)).toEqual([APPROVED, ...RIDERS.slice(0, 1)]);
    expect(existsSync(join(env.ws, 'src'))).toBe(true);
    // Every further rider in a turn of its own: each shows a card (denied), src survives.
    for (let i = 1; i < RIDERS.length; i += 1) {
      const { turnId } = await session.startTurn({ clientRequestId: `scope-${i}`, input: [{ type: 'text', text: 'clean' }] });
      expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'failed', code: 'permission_denied' });
      expect(cards.at(-1)!.command).toBe(RIDERS[i]);
      expect(existsSync(join(env.ws, 'src'))).toBe(true);
    }
    expect(cards).toHaveLength(1 + RIDERS.length);
  }, 120_000);
});
