/**
 * Look-alike letters on approval cards, played through the public API. The model asks bash to
 * delete `~/prоjects` with a Cyrillic `о`, a directory named `рор` in Cyrillic letters only, `ｓｒｃ`
 * in fullwidth letters, and asks the write tool for a path outside the workspace that reads like
 * a trusted one. The card on `permission_requested` (which hosts render as it is, the inspector
 * included) and the CLI's card must show each disguised character as `<U+XXXX>`, and must leave a
 * real path in another language (`~/Документы/отчёт`, `~/Téléchargements`, `~/文档`) as it is. The
 * grant key stays the exact command: a session grant for `rm -rf build` does not cover
 * `rm -rf buіld` with a Cyrillic `і`, nor `rm -rf ｂuild`.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cardLines } from '../../src/cli/render.js';
import { PLAIN_STYLE } from '../support/cli-in-process.js';
import type { PermissionCard, SessionUpdateEnvelope } from '../../src/protocol/updates.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { builtinToolsCore, grantThenDeny } from '../support/scripted-attack.js';
import { requireSandbox, type ToolEnv } from '../support/tool-env.js';
import { useToolTurnBed } from '../support/tool-turn-bed.js';

let storage: SqlSessionStorage;
let env: ToolEnv;
const open = useToolTurnBed((s) => (storage = s), (e) => (env = e));

const plain = PLAIN_STYLE;

/** Each command and how its card must show it. */
const COMMANDS: { command: string; shown: string }[] = [
  // A Cyrillic о inside a Latin word.
  { command: 'rm -rf ~/pr\u043ejects', shown: 'rm -rf ~/pr<U+043E>jects' },
  // A word written only with Cyrillic letters that look Latin ("pop").
  { command: 'rm -rf /tmp/\u0440\u043e\u0440', shown: 'rm -rf /tmp/<U+0440><U+043E><U+0440>' },
  // Fullwidth Latin letters.
  { command: 'rm -rf ./\uff53\uff52\uff43', shown: 'rm -rf ./<U+FF53><U+FF52><U+FF43>' },
  // A Greek question mark is a semicolon to the eye, not to bash.
  { command: 'rm -rf build\u037e echo done', shown: 'rm -rf build<U+037E> echo done' },
  // Real paths in other languages are shown as they are.
  { command: 'rm -rf ~/\u0414\u043e\u043a\u0443\u043c\u0435\u043d\u0442\u044b/\u043e\u0442\u0447\u0451\u0442', shown: 'rm -rf ~/Документы/отчёт' },
  { command: 'rm -rf ~/T\u00e9l\u00e9chargements ~/\u6587\u6863 ~/\u30c7\u30fc\u30bffile', shown: 'rm -rf ~/Téléchargements ~/文档 ~/データfile' },
];

/** Any character that passes for ASCII in the cards' attacks above. */
const DISGUISED = /[\u043e\u0440\uff53\uff52\uff43\u037e\u0435]/u;

describe('look-alike letters on approval cards', () => {
  it('the card on permission_requested and the CLI card show disguised letters as tokens, real words as they are; grant keys stay exact', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    mkdirSync(join(env.ws, 'build'), { recursive: true });
    const trusted = join(env.outside, 'pr\u043ejects', 'n\u0435ws.txt');
    const model = scriptedModel([
      ...COMMANDS.map(({ command }) => ({ toolCalls: [{ name: 'bash', arguments: { command } }] })),
      {
        toolCalls: [
          { name: 'write', arguments: { path: trusted, content: 'x', sandboxPermissions: { paths: [{ path: trusted, access: 'write', scope: 'exact' }] }, justification: 'update the n\u0435ws' } },
        ],
      },
    ]);
    const core = await builtinToolsCore(env, storage, model);
    open.push(core);
    const session = await core.createSession({ workingDirectory: env.ws });
    const cards: PermissionCard[] = [];
    session.updates$.subscribe((u: SessionUpdateEnvelope) => {
      if (u.update.type !== 'permission_requested') return;
      cards.push(u.update.card);
      const toolCallId = u.update.toolCallId;
      queueMicrotask(() => void session.resolvePermission(u.turnId!, toolCallId, 'deny'));
    });
    for (let i = 0; i <= COMMANDS.length; i += 1) {
      const { turnId } = await session.startTurn({ clientRequestId: `look-alike-${i}`, input: [{ type: 'text', text: 'clean' }] });
      expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'failed', code: 'permission_denied' });
    }
    expect(cards).toHaveLength(COMMANDS.length + 1);
    for (const [i, { command, shown }] of COMMANDS.entries()) {
      const card = cards[i]!;
      // The runtime's card: what a host renders as it is.
      expect(card.command).toBe(shown);
      expect(card.command!.slice(card.dangerSpan!.start, card.dangerSpan!.end)).toMatch(/^rm -rf /);
      // What decides stays exact.
      expect(card.grantKey).toBe(`danger:rm_recursive_or_force:${command}`);
      // The CLI's card.
      expect(cardLines(card, plain).join('\n')).toContain(`command: ${shown}`);
    }
    const write = cards.at(-1)!;
    expect(write.path).toBe(`${env.outside}/pr<U+043E>jects/n<U+0435>ws.txt`);
    expect(write.reason).toBe('update the n<U+0435>ws');
    expect(write.requestedPaths).toEqual([expect.objectContaining({ path: trusted })]);
    const lines = cardLines(write, plain).join('\n');
    expect(lines).toContain(`path: ${env.outside}/pr<U+043E>jects/n<U+0435>ws.txt`);
    // No disguised character is left in any field of the attack cards (the real words keep theirs).
    for (const card of [...cards.slice(0, 4), write]) for (const field of [card.summary, card.command ?? '', card.path ?? '', card.reason ?? '']) expect(field).not.toMatch(DISGUISED);
  }, 120_000);

  it('a session grant for a command does not cover the same command with a look-alike letter', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const APPROVED = 'rm -rf build';
    const VARIANTS = ['rm -rf bu\u0456ld', 'rm -rf \uff42uild'];
    const { core, session, cards } = await grantThenDeny(env, storage, APPROVED, VARIANTS);
    open.push(core);
    for (let i = 0; i < VARIANTS.length; i += 1) {
      const { turnId } = await session.startTurn({ clientRequestId: `grant-${i}`, input: [{ type: 'text', text: 'clean' }] });
      expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'failed', code: 'permission_denied' });
    }
    expect(cards.map((c) => c.command)).toEqual([APPROVED, 'rm -rf bu<U+0456>ld', 'rm -rf <U+FF42>uild']);
    expect(cards.slice(1).map((c) => c.grantKey)).toEqual(VARIANTS.map((v) => `danger:rm_recursive_or_force:${v}`));
  }, 120_000);
});
