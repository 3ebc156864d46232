/**
 * Issue 12.11, the attack "a fork bomb inside the sandbox": through the public API (createCore, a
 * scripted model driving the built-in bash, real bubblewrap) a bounded fork loop must hit the
 * configured process limit, and the host stays fine: it still starts processes, its timers fire,
 * and the call's cgroup is gone afterwards. Everything here runs as root, which is exempt from
 * RLIMIT_NPROC, so the limit this proves is the pids cgroup.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../src/core.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { detectProcessLimit } from '../../src/services/sandbox/process-limit.js';
import { prepareToolRuntime } from '../../src/services/tools/tool-runtime.js';
import { workspaceToolOptions } from '../../src/services/tools/workspace.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { requireSandbox, toolEnv, type ToolEnv, useToolEnv } from '../support/tool-env.js';
import { usePglite } from '../support/databases.js';

const LIMIT = 48;
/** Forks up to 300 children that sleep; reports how many forks succeeded before one failed. */
const FORK_LOOP = `perl -e 'my $n = 0; for (1..300) { my $p = fork(); if (!defined $p) { print "fork failed after $n children: $!\\n"; exit 0 } if ($p == 0) { sleep 30; exit 0 } $n++ } print "no limit: $n children\\n"'`;

let env: ToolEnv;
let storage: SqlSessionStorage;
const cores: Core[] = [];

usePglite((s) => (storage = s));
useToolEnv((e) => (env = e), { bashProcessLimit: LIMIT });

afterAll(async () => {
  for (const core of cores) await core.shutdown();
});

function ourCgroups(): string[] {
  const limit = detectProcessLimit(1);
  if (limit.kind !== 'cgroup') return [];
  return readdirSync(limit.root).filter((name) => name.startsWith(`openwork-${process.pid}-`));
}

describe('fork bomb (issue 12.11)', () => {
  it('a bounded fork loop hits the configured limit; the host still starts processes and its timers fire', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    expect(env.runtime.sandbox.detail).toContain(`process limit ${LIMIT} (pids cgroup)`);
    const model = scriptedModel([{ toolCalls: [{ name: 'bash', arguments: { command: FORK_LOOP } }] }, { text: 'done' }]);
    const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, closeStorageOnShutdown: false, ...workspaceToolOptions(env.runtime), worldState: false });
    cores.push(core);
    const session = await core.createSession({ workingDirectory: env.ws });
    let ticks = 0;
    let longestGap = 0;
    let last = Date.now();
    const timer = setInterval(() => {
      ticks += 1;
      longestGap = Math.max(longestGap, Date.now() - last);
      last = Date.now();
    }, 20);
    try {
      const { turnId } = await session.startTurn({ clientRequestId: randomUUID(), input: [{ type: 'text', text: 'fork' }] });
      expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'completed' });
    } finally {
      clearInterval(timer);
    }
    const result = model.requests[1]!.messages.filter((m) => m.role === 'tool').at(-1) as unknown as { text: string };
    const match = /fork failed after (\d+) children: Resource temporarily unavailable/.exec(result.text);
    expect(match, result.text).not.toBeNull();
    // bash, perl and the shell wrapper count too: the loop stops just short of the limit.
    expect(Number(match![1])).toBeLessThan(LIMIT);
    expect(Number(match![1])).toBeGreaterThan(LIMIT / 2);
    expect(result.text).toMatch(/\[exit 0; duration \d+ ms\]$/);
    // The host is fine: it starts a process, its event loop kept ticking.
    expect(spawnSync('/bin/true').status).toBe(0);
    expect(ticks).toBeGreaterThan(0);
    expect(longestGap).toBeLessThan(1_000);
    // The call's cgroup (and the sleeping children in it) are gone.
    await expect.poll(ourCgroups, { timeout: 5_000 }).toEqual([]);
  });

  it('the limit is configurable, defaults to 1,024, and refuses nonsense with a typed error', async () => {
    const other = await toolEnv();
    try {
      if (other.runtime.sandbox.available) expect(other.runtime.sandbox.detail).toMatch(/process limit 1024 \((pids cgroup|RLIMIT_NPROC)\)|no process limit/);
    } finally {
      other.cleanup();
    }
    for (const bad of [0, -1, 1.5]) {
      await expect(prepareToolRuntime({ home: env.home, tempDirs: [env.tmp], bashProcessLimit: bad })).rejects.toMatchObject({ code: 'invalid_request' });
    }
    expect(existsSync(env.ws)).toBe(true);
  });
});
