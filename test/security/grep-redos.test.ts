/**
 * Issue 12 point 8: a model's grep pattern must not freeze the host. `(a+)+$` on a line of 40 `a`s
 * and a `!` backtracks about 2^40 steps; on the main thread that blocked every session, the
 * inspector and cancel. Played through the public API (createCore, scripted model, built-in grep):
 * a main-thread timer keeps firing while the match runs, cancelTurn ends the turn at once, the
 * deadline gives the model a typed `timeout` result, and the worker thread that ran the match is
 * really gone afterwards.
 */
import { readdirSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../src/core.js';
import { scriptedModel, type ScriptedStep } from '../../src/services/model/scripted.js';
import { permissionPolicy } from '../../src/services/permissions/authorizer.js';
import { builtinTools } from '../../src/services/tools/builtin.js';
import { grepTimeoutText } from '../../src/services/tools/grep.js';
import { LineMatcher } from '../../src/services/tools/grep-matcher.js';
import { prepareToolRuntime } from '../../src/services/tools/tool-runtime.js';
import type { SessionHandle } from '../../src/session-handle.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { assertAllRequests } from '../support/invariants.js';
import { type ToolEnv, useToolEnv } from '../support/tool-env.js';
import { usePglite } from '../support/databases.js';

const CATASTROPHIC = '(a+)+$';
const TIMEOUT_MS = 2_500;

let storage: SqlSessionStorage;
let env: ToolEnv;
usePglite((s) => (storage = s));
useToolEnv((e) => (env = e), { sandbox: 'disabled' });
beforeAll(async () => {
  writeFileSync(join(env.ws, 'evil.txt'), `first line\n${'a'.repeat(40)}!\nlast line\n`);
  writeFileSync(join(env.ws, 'fine.txt'), 'aaa\n');
  // Warm-up: libuv's thread pool and a first worker exist before any thread baseline is taken.
  await readFile(join(env.ws, 'fine.txt'));
  const warm = new LineMatcher('a', 'u');
  await warm.match(Buffer.from('a'), 1, { signal: new AbortController().signal, deadline: Date.now() + 10_000 });
  warm.close();
});

const open: Core[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.shutdown();
});

async function start(steps: ScriptedStep[]) {
  const runtime = await prepareToolRuntime({ home: env.home, tempDirs: [env.tmp], sandbox: 'disabled', grepTimeoutMs: TIMEOUT_MS });
  const model = scriptedModel(steps);
  const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, tools: builtinTools(runtime), authorizer: permissionPolicy(runtime), sandbox: runtime.sandbox, closeStorageOnShutdown: false });
  open.push(core);
  const session = await core.createSession({ workingDirectory: env.ws });
  return { model, session };
}

/** Records the main thread's timer gaps from now until `stop()`. */
function watchEventLoop() {
  const gaps: Array<{ at: number; gap: number }> = [];
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    gaps.push({ at: now, gap: now - last });
    last = now;
  }, 10);
  const elu = performance.eventLoopUtilization();
  return {
    gaps,
    stop() {
      clearInterval(timer);
      return performance.eventLoopUtilization(elu).utilization;
    },
  };
}

/**
 * The longest stretch (ms) between `from` and `to` in which the main thread's timer fired within
 * 100 ms every time. This machine is shared and sometimes descheduled for longer, so the window is taken
 * as the best of the consecutive windows: a main thread blocked by the regex has no such window at
 * all (its timer does not fire until the match ends), so this cannot pass unless matching is off it.
 */
function responsiveWindow(gaps: Array<{ at: number; gap: number }>, from: number, to: number): number {
  let best = 0;
  let windowStart = from;
  for (const { at, gap } of gaps) {
    if (at < from || at > to) continue;
    if (gap >= 100) windowStart = at;
    best = Math.max(best, at - windowStart);
  }
  return best;
}

function threadCount(): number {
  return readdirSync('/proc/self/task').length;
}

async function waitForThreads(atMost: number, withinMs: number): Promise<number> {
  const until = Date.now() + withinMs;
  let count = threadCount();
  while (count > atMost && Date.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    count = threadCount();
  }
  return count;
}

async function toolStarted(session: SessionHandle): Promise<void> {
  await new Promise<void>((resolve) => {
    const sub = session.updates$.subscribe((u) => {
      if (u.update.type === 'tool_call_started') {
        sub.unsubscribe();
        resolve();
      }
    });
  });
}

describe('issue 12.8: a catastrophic grep pattern', () => {
  it('runs off the main thread until the deadline, which terminates it and gives the model a typed timeout', async () => {
    const { session, model } = await start([
      { toolCalls: [{ name: 'grep', arguments: { pattern: 'aaa', path: 'fine.txt' } }] },
      { toolCalls: [{ name: 'grep', arguments: { pattern: CATASTROPHIC, path: 'evil.txt' } }] },
      { text: 'done' },
    ]);
    const baseline = threadCount();
    const watch = watchEventLoop();
    const began = performance.now();
    const { turnId } = await session.startTurn({ clientRequestId: 'req-timeout', input: [{ type: 'text', text: 'search' }] });
    const outcome = await session.waitForTurn(turnId);
    const ended = performance.now();
    const utilization = watch.stop();
    assertAllRequests(model.requests);
    expect(outcome).toMatchObject({ status: 'completed' });
    const tool = model.requests[2]!.messages.filter((m) => m.role === 'tool').at(-1) as { text: string; status?: string };
    expect(tool.text).toBe(grepTimeoutText(TIMEOUT_MS, 'evil.txt', false));
    const stored = (await storage.listMessages(session.sessionId)).filter((m) => m.role === 'tool').at(-1)!.content[0];
    expect(stored).toMatchObject({ status: 'failed', error: { code: 'timeout', retryable: false } });
    // The deadline held: the match was stopped, not waited out (2^40 steps take hours).
    expect(ended - began).toBeLessThan(TIMEOUT_MS + 5_000);
    // The main thread stayed free: a 1 s window of timer ticks under 100 ms apart, and a mostly idle loop.
    expect(responsiveWindow(watch.gaps, began, ended)).toBeGreaterThanOrEqual(1_000);
    expect(utilization).toBeLessThan(0.5);
    // The worker that ran the match is gone: no thread keeps burning a core after the result.
    expect(await waitForThreads(baseline, 5_000)).toBeLessThanOrEqual(baseline);
  });

  it('cancelTurn during the match ends the turn promptly and stops the worker', async () => {
    const { session } = await start([{ toolCalls: [{ name: 'grep', arguments: { pattern: CATASTROPHIC, path: 'evil.txt' } }] }]);
    const baseline = threadCount();
    const watch = watchEventLoop();
    const { turnId } = await session.startTurn({ clientRequestId: 'req-cancel', input: [{ type: 'text', text: 'search' }] });
    await toolStarted(session);
    // Let the match get going in its worker before cancelling.
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    const cancelledAt = performance.now();
    await session.cancelTurn(turnId);
    const outcome = await session.waitForTurn(turnId);
    const endedAt = performance.now();
    watch.stop();
    expect(outcome).toMatchObject({ status: 'cancelled' });
    // Promptly: well before the 2.5 s deadline would have ended the call.
    expect(endedAt - cancelledAt).toBeLessThan(1_000);
    expect(responsiveWindow(watch.gaps, 0, cancelledAt)).toBeGreaterThanOrEqual(500);
    expect(await waitForThreads(baseline, 5_000)).toBeLessThanOrEqual(baseline);
  });
});
