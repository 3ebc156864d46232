/**
 * Attack round 4: AGENTS.md swapped for a FIFO between World State's check and its read. World
 * State looked the name up (`lstat`: a regular file, small enough) and then read it by name; a
 * process in the workspace that swaps a FIFO in between (the parent agent's bash, allowed to write
 * the workspace in `auto`, while an explorer starts its model call) made the read wait for a writer
 * forever in a thread of the host's I/O pool: that turn never ended, and four such reads leave the
 * whole host without file I/O. Now the file is opened without blocking and judged by the descriptor
 * it is read through. Here a host process swaps the name as fast as it can while four sessions on
 * the workspace take turn after turn; every turn must end (completed, or failed with `project_instruction_error` when
 * the FIFO was what it opened) within seconds, and the I/O pool must still answer afterwards.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { openSync, closeSync, constants, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { scriptedModel } from '../../src/services/model/scripted.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { builtinToolsCore } from '../support/scripted-attack.js';
import { type ToolEnv } from '../support/tool-env.js';
import { useToolTurnBed } from '../support/tool-turn-bed.js';

let storage: SqlSessionStorage;
let env: ToolEnv;
const open = useToolTurnBed((s) => (storage = s), (e) => (env = e));

const SESSIONS = 4;
/** Turns per session (`SWAP_TURNS` for a longer run). */
const TURNS = Number(process.env.SWAP_TURNS ?? 25);
let swapper: ChildProcess | undefined;
let fifo = '';

afterEach(() => {
  swapper?.kill('SIGKILL');
  swapper = undefined;
  // Lets go of any read that was left waiting on the FIFO (only an unprotected run has one).
  for (let i = 0; i < 20 && fifo !== ''; i += 1) {
    try {
      closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
    } catch {
      break;
    }
  }
});

/** Renames a regular AGENTS.md and a FIFO in and out of the name, in a tight loop. */
function startSwapper(ws: string): ChildProcess {
  const script = [
    'import os, sys',
    'os.chdir(sys.argv[1])',
    'while True:',
    "    os.rename('agents.reg', 'AGENTS.md'); os.rename('AGENTS.md', 'agents.reg')",
    "    os.rename('agents.fifo', 'AGENTS.md'); os.rename('AGENTS.md', 'agents.fifo')",
  ].join('\n');
  return spawn('python3', ['-c', script, ws], { stdio: 'ignore' });
}

/** The turn's outcome, or `'hung'` when it has not ended after `ms`. */
async function within<T>(promise: Promise<T>, ms: number): Promise<T | 'hung'> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<'hung'>((resolve) => (timer = setTimeout(() => resolve('hung'), ms)));
  try {
    return await Promise.race([promise, hung]);
  } finally {
    clearTimeout(timer);
  }
}

describe('AGENTS.md swapped for a FIFO while World State reads it (attack round 4)', () => {
  it('every turn ends, and the host still reads files afterwards', async () => {
    writeFileSync(join(env.ws, 'agents.reg'), 'Be brief.\n');
    fifo = join(env.ws, 'agents.fifo');
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    const model = scriptedModel(Array.from({ length: SESSIONS * TURNS }, () => ({ text: 'ok' })));
    const core = await builtinToolsCore(env, storage, model, { worldState: {} });
    open.push(core);
    const sessions = await Promise.all(Array.from({ length: SESSIONS }, () => core.createSession({ workingDirectory: env.ws, permissionMode: 'auto' })));
    swapper = startSwapper(env.ws);
    const seen = new Map<string, number>();
    // Several sessions on the one workspace read AGENTS.md at the same time: more tries per second.
    await Promise.all(
      sessions.map(async (session, s) => {
        for (let i = 0; i < TURNS; i += 1) {
          const { turnId } = await session.startTurn({ clientRequestId: `swap-${s}-${i}`, input: [{ type: 'text', text: `turn ${i}` }] });
          const outcome = await within(session.waitForTurn(turnId), 10_000);
          const key = outcome === 'hung' ? 'hung' : outcome.status === 'failed' ? `failed:${outcome.code}` : outcome.status;
          seen.set(key, (seen.get(key) ?? 0) + 1);
          if (outcome === 'hung') break;
        }
      }),
    );
    swapper.kill('SIGKILL');
    // Unprotected, some turns waited on the FIFO for good (three of the hundred in one run).
    expect(seen.get('hung'), JSON.stringify([...seen])).toBeUndefined();
    for (const key of seen.keys()) expect(['completed', 'failed:project_instruction_error']).toContain(key);
    expect(seen.get('completed')).toBeGreaterThan(0);
    await expect(within(readFile(join(env.ws, 'src', 'main.txt'), 'utf8'), 5_000)).resolves.toBe('hello\nworld\n');
  }, 120_000);
});
