/**
 * Invisible characters on approval cards, played through the public API. The model asks bash for
 * dangerous commands that show the human something other than what runs: a right-to-left override
 * (`rm -rf victim/\u202Egpj.txt` displays as `…/txt.jpg`), a zero-width space, a byte order mark, Unicode tag
 * characters and a no-break space inside a word, a tail pushed out of sight by 300 spaces or 60
 * line breaks. The card on `permission_requested` (which hosts render as it is) and the CLI's card
 * must show each of them as a visible token, and the CLI's one-line tool view of a very long
 * command must keep its end. The command that runs and its grant key stay the exact text: a
 * session grant for `rm -rf build` does not cover the same command with an invisible character
 * added (bash runs that as another word, another file), so that one shows its own card.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cardLines, UpdateRenderer } from '../../src/cli/render.js';
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

/** Everything that would not show as itself: controls, format, separators, odd spaces, tags. */
const HIDDEN = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Co}\p{Cn}\u00a0\u2000-\u200a\u202f\u205f\u3000]|\p{Default_Ignorable_Code_Point}/u;

const plain = PLAIN_STYLE;

/** Each hostile command and how its card must show it. */
const ATTACKS: { command: string; shown: string }[] = [
  { command: 'rm -rf victim/\u202Egpj.txt', shown: 'rm -rf victim/<U+202E>gpj.txt' },
  { command: 'rm -rf src\u200b', shown: 'rm -rf src<U+200B>' },
  { command: 'rm -rf \ufeffsrc', shown: 'rm -rf <U+FEFF>src' },
  { command: 'rm -rf src\u{E0020}\u{E002F}', shown: 'rm -rf src<U+E0020><U+E002F>' },
  { command: 'rm -rf src\u00a0keep', shown: 'rm -rf src<U+00A0>keep' },
  { command: `ls${' '.repeat(300)}; rm -rf src`, shown: 'ls<300 spaces>; rm -rf src' },
  { command: `ls${'\n'.repeat(60)}rm -rf src`, shown: 'ls\n<60 line breaks>\nrm -rf src' },
];

describe('invisible characters on approval cards', () => {
  it('the card on permission_requested and the CLI card show every invisible character; grant keys stay exact', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    mkdirSync(join(env.ws, 'src'), { recursive: true });
    const model = scriptedModel(ATTACKS.map(({ command }) => ({ toolCalls: [{ name: 'bash', arguments: { command } }] })));
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
    for (const [i, attack] of ATTACKS.entries()) {
      const { turnId } = await session.startTurn({ clientRequestId: `invisible-${i}`, input: [{ type: 'text', text: 'clean' }] });
      expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'failed', code: 'permission_denied' });
      const card = cards.at(-1)!;
      expect(cards).toHaveLength(i + 1);
      // The runtime's card: what a host renders as it is.
      expect(card.command).toBe(attack.shown);
      for (const field of [card.summary, card.command!, card.dangerNote!]) expect(field.replace(/\n/g, '')).not.toMatch(HIDDEN);
      // The danger span points at the match inside the shown command.
      expect(card.command!.slice(card.dangerSpan!.start, card.dangerSpan!.end)).toMatch(/^rm -rf /);
      // What decides stays exact: a grant for this card covers this command and no other.
      expect(card.grantKey).toBe(`danger:rm_recursive_or_force:${attack.command}`);
      // The CLI's card.
      const lines = cardLines(card, plain).join('\n');
      expect(lines).toContain(`command: ${attack.shown.replace(/\n/g, '\n    │ ')}`);
      expect(lines.replace(/\n/g, '')).not.toMatch(HIDDEN);
    }
    expect(existsSync(join(env.ws, 'src'))).toBe(true);
  }, 120_000);

  it('the CLI\'s one-line view of a very long command keeps its end and says how much was cut', () => {
    const command = `echo ${'a'.repeat(10_000)}\u200b; rm -rf ~`;
    const written: string[] = [];
    const view = new UpdateRenderer({ write: (chunk: string) => written.push(chunk) } as unknown as NodeJS.WritableStream, plain, { workingDirectory: '/nonexistent' });
    view.render({ sequence: 1, sessionId: 'ses_x', turnId: 'turn_x', at: new Date().toISOString(), update: { type: 'tool_call_started', toolCallId: 'tc_long', providerCallId: 'p', toolName: 'bash', arguments: JSON.stringify({ command }), status: 'validating' } } as unknown as SessionUpdateEnvelope);
    view.breakLine();
    const line = written.join('').split('\n').find((l) => l.startsWith('→ bash'))!;
    expect(line).toMatch(/characters cut> …a*<U\+200B>; rm -rf ~"\}$/);
    expect(line.length).toBeLessThan(200);
    expect(line).not.toMatch(HIDDEN);
    // A card a host tool wrote itself, shown by the CLI: its own layer makes the characters visible too.
    const raw: PermissionCard = { toolName: 'deploy', kind: 'approval', summary: 'deploy\u202e', command: `rm -rf src\u200b${' '.repeat(50)}x`, environmentId: 'e', grantKey: 'k', decisions: ['allow_once', 'deny'] };
    expect(cardLines(raw, plain).join('\n')).toContain('command: rm -rf src<U+200B><50 spaces>x');
  });

  it('a session grant for a command does not cover the same command with an invisible character added', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const APPROVED = 'rm -rf build';
    const VARIANTS = [`${APPROVED}\u200b`, `${APPROVED}\u00a0`, `rm -rf bu\u200dild`, `${APPROVED}\u{E0020}`, `rm -rf \u2066build\u2069`];
    const { core, session, cards } = await grantThenDeny(env, storage, APPROVED, VARIANTS);
    open.push(core);
    // The approved command twice (one card, the grant covers the repeat), then the first variant.
    const first = await session.startTurn({ clientRequestId: 'grant-0', input: [{ type: 'text', text: 'clean' }] });
    expect(await session.waitForTurn(first.turnId)).toMatchObject({ status: 'failed', code: 'permission_denied' });
    expect(existsSync(join(env.ws, 'build'))).toBe(false);
    expect(cards.map((c) => c.command)).toEqual([APPROVED, 'rm -rf build<U+200B>']);
    for (let i = 1; i < VARIANTS.length; i += 1) {
      const { turnId } = await session.startTurn({ clientRequestId: `grant-${i}`, input: [{ type: 'text', text: 'clean' }] });
      expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'failed', code: 'permission_denied' });
    }
    expect(cards.slice(1).map((c) => c.command)).toEqual([
      'rm -rf build<U+200B>',
      'rm -rf build<U+00A0>',
      'rm -rf bu<U+200D>ild',
      'rm -rf build<U+E0020>',
      'rm -rf <U+2066>build<U+2069>',
    ]);
    expect(cards.slice(1).map((c) => c.grantKey)).toEqual(VARIANTS.map((v) => `danger:rm_recursive_or_force:${v}`));
    expect(existsSync(join(env.ws, 'src'))).toBe(true);
  }, 120_000);
});
