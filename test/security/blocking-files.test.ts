/**
 * Attack round 4: files that block or never end, planted where the runtime reads them itself. The
 * walk behind grep, glob and list honoured each directory's `.gitignore` by reading it
 * synchronously by name; the model's bash makes that name a FIFO (or a link to one), and the open
 * waits for a writer on the main thread, so every session, timer and update of the host froze for
 * as long as no one wrote. Here a host process opens the FIFO for writing every 10 s, so the
 * unprotected run stalls the event loop for seconds instead of forever; the protected run never
 * opens it. The walk must keep the event loop ticking, finish, and still list the directory.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { longestStall } from '../support/event-loop.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import type { TurnOutcome } from '../../src/protocol/updates.js';
import { scriptedModel, type ScriptedToolCall } from '../../src/services/model/scripted.js';
import { builtinToolsCore } from '../support/scripted-attack.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../support/tool-env.js';

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));

let env: ToolEnv;
useToolEnv((e) => (env = e));

const releasers: ChildProcess[] = [];
afterEach(() => {
  for (const child of releasers.splice(0)) child.kill('SIGKILL');
});

/**
 * A host process that, once `fifo` exists, opens it for writing and closes it again every 10 s: a
 * reader blocked in `open` is let go (it reads end-of-file), so an unprotected walk stalls for
 * about 10 s per read instead of forever.
 */
function releaseEvery10s(fifo: string): void {
  const script = `while [ ! -p '${fifo}' ]; do sleep 0.05; done; for i in 1 2 3 4 5 6; do sleep 10; exec 3>'${fifo}'; exec 3>&-; done`;
  releasers.push(spawn('/bin/sh', ['-c', script], { stdio: 'ignore' }));
}

/**
 * One turn in which the model makes `calls`, one per step, with the longest stall of the event loop
 * measured by a 20 ms timer from the turn's start to its end (the core is started before, so its
 * own start-up on a loaded machine does not count).
 */
async function attackTurn(calls: ScriptedToolCall[]): Promise<{ outcome: TurnOutcome; results: string[]; stallMs: number }> {
  const model = scriptedModel([...calls.map((call) => ({ toolCalls: [call] })), { text: 'done' }]);
  const core = await builtinToolsCore(env, storage, model);
  try {
    const session = await core.createSession({ workingDirectory: env.ws, permissionMode: 'auto' });
    const { value: outcome, stallMs } = await longestStall(async () => {
      const { turnId } = await session.startTurn({ clientRequestId: `walk-${Math.random()}`, input: [{ type: 'text', text: 'go' }] });
      return session.waitForTurn(turnId);
    });
    const results = (model.requests.at(-1)?.messages ?? []).filter((m) => m.role === 'tool').map((m) => (m as { text: string }).text);
    return { outcome, results, stallMs };
  } finally {
    await core.shutdown();
  }
}

describe('a .gitignore that blocks cannot freeze the host (attack round 4)', () => {
  it('a FIFO named .gitignore, made by the model with bash: grep, glob and list finish and the event loop keeps ticking', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    mkdirSync(join(env.ws, 'pkg'));
    writeFileSync(join(env.ws, 'pkg', 'index.txt'), 'needle\n');
    releaseEvery10s(join(env.ws, 'pkg', '.gitignore'));
    const attack = await attackTurn([
      { name: 'bash', arguments: { command: "mkfifo pkg/.gitignore && stat -c '%F %n' pkg/.gitignore" } },
      { name: 'grep', arguments: { pattern: 'needle' } },
      { name: 'glob', arguments: { pattern: '**/*.txt' } },
      { name: 'list', arguments: { path: '.', recursive: true } },
    ]);
    expect(attack.outcome.status).toBe('completed');
    const [made, grep, glob, list] = attack.results;
    expect(made).toContain('fifo pkg/.gitignore');
    expect(grep).toContain('pkg/index.txt:1: needle');
    expect(glob).toContain('pkg/index.txt');
    expect(list).toContain('pkg/index.txt');
    // Unprotected, each walk waited about 10 s on the main thread for the releaser.
    expect(attack.stallMs).toBeLessThan(5_000);
  }, 60_000);

  it('a .gitignore that is a symbolic link to a FIFO outside the workspace is not followed', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    // A FIFO of the host's, outside anything the sandbox may write.
    const fifo = join(env.outside, 'pipe');
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    mkdirSync(join(env.ws, 'linked'));
    writeFileSync(join(env.ws, 'linked', 'kept.txt'), 'needle\n');
    releaseEvery10s(fifo);
    const attack = await attackTurn([
      { name: 'bash', arguments: { command: `ln -s '${fifo}' linked/.gitignore && echo linked` } },
      { name: 'grep', arguments: { pattern: 'needle', path: 'linked' } },
      { name: 'list', arguments: { path: 'linked', recursive: true } },
    ]);
    expect(attack.outcome.status).toBe('completed');
    expect(attack.results[1]).toContain('kept.txt:1: needle');
    expect(attack.results[2]).toContain('kept.txt');
    expect(attack.stallMs).toBeLessThan(5_000);
  }, 60_000);

  it('an ordinary .gitignore is still honoured, an oversized one is not', async () => {
    mkdirSync(join(env.ws, 'honour'));
    writeFileSync(join(env.ws, 'honour', '.gitignore'), 'hidden.txt\n');
    writeFileSync(join(env.ws, 'honour', 'hidden.txt'), 'needle\n');
    writeFileSync(join(env.ws, 'honour', 'shown.txt'), 'needle\n');
    mkdirSync(join(env.ws, 'big'));
    // One byte over the bound: the directory is walked as if it had no .gitignore.
    writeFileSync(join(env.ws, 'big', '.gitignore'), `hidden.txt\n${'#'.repeat(1024 * 1024)}\n`);
    writeFileSync(join(env.ws, 'big', 'hidden.txt'), 'needle\n');
    const honoured = await env.call('grep', { pattern: 'needle', path: 'honour' });
    expect(honoured.result.text).toContain('shown.txt:1: needle');
    expect(honoured.result.text).not.toContain('hidden.txt');
    const big = await env.call('grep', { pattern: 'needle', path: 'big' });
    expect(big.result.text).toContain('hidden.txt:1: needle');
  });
});
