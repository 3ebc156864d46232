/**
 * Deleting commands that danger detection did not see, played through the public API like
 * danger-bypass.test.ts: an `rm -rf` inside an interpreter's code (awk, perl, python), inside a
 * command string of another program (`script -c`), inside a git setting that runs a command
 * (`alias.x=!…`), in an alias, fed to `. /dev/stdin`, or spelled with `${IFS}` so that it is split
 * only when it runs. Each must raise a danger card while its victim still exists; approved, it runs
 * in real bubblewrap and deletes it (so each is a real deletion the card gated).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { requireSandbox, type ToolEnv } from '../support/tool-env.js';
import { useToolTurnBed } from '../support/tool-turn-bed.js';
import { deletionsBehindCards, type GatedDeletion } from '../support/scripted-attack.js';

let storage: SqlSessionStorage;
let env: ToolEnv;
const open = useToolTurnBed((s) => (storage = s), (e) => (env = e));

const EMBEDDED: GatedDeletion[] = [
  { victim: 'v-awk', command: `awk 'BEGIN{system("rm -rf v-awk")}'`, key: 'rm_recursive_or_force' },
  { victim: 'v-perl', command: `perl -e 'system q(rm -rf v-perl)'`, key: 'rm_recursive_or_force' },
  { victim: 'v-py', command: `python3 -c 'import os; os.system("rm -rf v-py")'`, key: 'rm_recursive_or_force' },
  { victim: 'v-script', command: `script -qc 'rm -rf v-script' /dev/null`, key: 'rm_recursive_or_force' },
  { victim: 'v-gitalias', command: `git -c alias.zap='!rm -rf v-gitalias' zap`, key: 'rm_recursive_or_force' },
  { victim: 'v-alias', command: `shopt -s expand_aliases\nalias zap='rm -rf v-alias'\nzap`, key: 'rm_recursive_or_force' },
  { victim: 'v-stdin', command: `echo 'rm -rf v-stdin' | . /dev/stdin`, key: 'dynamic_command' },
  { victim: 'v-ifs', command: 'rm${IFS}-rf${IFS}v-ifs', key: 'dynamic_command' },
];

describe('danger detection: deletions written inside strings', () => {
  it('each raises a danger card before it runs; approved, it runs in the sandbox and deletes', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const { outcome, cards, presentAtCard } = await deletionsBehindCards(env, storage, open, EMBEDDED);
    expect(outcome).toMatchObject({ status: 'completed' });
    expect(cards.map((c) => ({ kind: c.kind, command: c.command, dangerMatch: c.dangerMatch }))).toEqual(
      EMBEDDED.map(({ command, key }) => ({ kind: 'danger', command, dangerMatch: key })),
    );
    expect(presentAtCard).toEqual(EMBEDDED.map(() => true));
    expect(EMBEDDED.filter(({ victim }) => existsSync(join(env.ws, victim)))).toEqual([]);
  }, 60_000);
});
