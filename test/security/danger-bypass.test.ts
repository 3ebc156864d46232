/**
 * Issue 12 point 10, played through the public API: a scripted model sends each command that used
 * to slip past danger detection (`exec rm -rf`, `rm --recur`, `eval`, wrappers, `find -ok rm`, a
 * trailing syntax error, a pipe into a shell, `$(…)` as the program). Each must raise a danger card
 * before it runs: while the card is pending its victim directory is still there; once approved the
 * command really runs (inside real bubblewrap) and deletes it, so every command here is a real
 * deletion that the card gated.
 */
import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Core } from '../../src/core.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../support/tool-env.js';
import { usePglite } from '../support/databases.js';
import { builtinToolsCore, deletionsBehindCards, type GatedDeletion } from '../support/scripted-attack.js';

let storage: SqlSessionStorage;
let env: ToolEnv;
usePglite((s) => (storage = s));
useToolEnv((e) => (env = e));
beforeAll(async () => {
  // An executable the detector has never heard of that runs its arguments: "any unknown wrapper".
  writeFileSync(join(env.ws, 'wrap'), '#!/bin/sh\nexec "$@"\n');
  chmodSync(join(env.ws, 'wrap'), 0o755);
});

const open: Core[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.shutdown();
});

/** Each command deletes the directory named by `victim`; none used to raise a card. */
const BYPASSES: GatedDeletion[] = [
  { victim: 'v-exec', command: 'exec rm -rf v-exec', key: 'rm_recursive_or_force' },
  { victim: 'v-recur', command: 'rm --recur v-recur', key: 'rm_recursive_or_force' },
  { victim: 'v-eval', command: 'eval "rm -rf v-eval"', key: 'rm_recursive_or_force' },
  { victim: 'v-setsid', command: 'setsid -w rm -rf v-setsid', key: 'rm_recursive_or_force' },
  { victim: 'v-stdbuf', command: 'stdbuf -o0 rm -rf v-stdbuf', key: 'rm_recursive_or_force' },
  { victim: 'v-ionice', command: 'ionice -c3 rm -rf v-ionice', key: 'rm_recursive_or_force' },
  { victim: 'v-nice', command: 'nice --adj 5 rm -rf v-nice', key: 'rm_recursive_or_force' },
  { victim: 'v-timeout', command: 'timeout --sig KILL 5 rm -rf v-timeout', key: 'rm_recursive_or_force' },
  { victim: 'v-env', command: "env -S 'rm -rf v-env'", key: 'rm_recursive_or_force' },
  { victim: 'v-wrap', command: './wrap rm -rf v-wrap', key: 'rm_recursive_or_force' },
  { victim: 'v-findok', command: 'yes | find . -maxdepth 1 -name v-findok -prune -ok rm -r {} \\;', key: 'find_delete' },
  { victim: 'v-syntax', command: 'rm -rf v-syntax\n)', key: 'unparsable' },
  { victim: 'v-pipe', command: "echo 'rm -rf v-pipe' | sh", key: 'dynamic_command' },
  { victim: 'v-subst', command: '$(echo rm) -rf v-subst', key: 'dynamic_command' },
];

describe('issue 12.10: danger detection bypasses', () => {
  it('every bypass raises a danger card before it runs; approved, it runs in the sandbox and deletes', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const { outcome, cards, presentAtCard } = await deletionsBehindCards(env, storage, open, BYPASSES);
    expect(outcome).toMatchObject({ status: 'completed' });
    expect(cards.map((c) => ({ kind: c.kind, command: c.command, dangerMatch: c.dangerMatch }))).toEqual(
      BYPASSES.map(({ command, key }) => ({ kind: 'danger', command, dangerMatch: key })),
    );
    expect(presentAtCard).toEqual(BYPASSES.map(() => true));
    // Approved, each command really deleted its directory: these are deletions the card gated.
    expect(BYPASSES.filter(({ victim }) => existsSync(join(env.ws, victim)))).toEqual([]);
  });

  it('a denied bypass does not run and the turn stops with permission_denied', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    mkdirSync(join(env.ws, 'v-denied'), { recursive: true });
    const model = scriptedModel([{ toolCalls: [{ name: 'bash', arguments: { command: 'rm -rf v-denied\n)' } }] }]);
    const core = await builtinToolsCore(env, storage, model);
    open.push(core);
    const session = await core.createSession({ workingDirectory: env.ws });
    session.updates$.subscribe((u) => {
      if (u.update.type !== 'permission_requested') return;
      const toolCallId = u.update.toolCallId;
      queueMicrotask(() => void session.resolvePermission(u.turnId!, toolCallId, 'deny'));
    });
    const { turnId } = await session.startTurn({ clientRequestId: 'req-denied', input: [{ type: 'text', text: 'clean up' }] });
    expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'failed', code: 'permission_denied' });
    expect(existsSync(join(env.ws, 'v-denied'))).toBe(true);
  });
});
