/**
 * A model's glob pattern (glob's `pattern`, grep's `include`) must not freeze the host. picomatch
 * compiles a glob to a backtracking regular expression: the extglob `+(+(a|aa))b` takes about 40 s
 * on a 20-character name, and plain stars (`*a*a*a*a*a*a*a*a*b`) grow polynomially to hours on a
 * long one, a name the model can create itself with write. Matched on the main thread, that blocked
 * every session, the inspector and cancel. Played through a real turn: a main-thread timer keeps
 * firing while the pattern runs, the model gets a typed `timeout` result at the deadline, and
 * ordinary patterns still match.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../src/core.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { permissionPolicy } from '../../src/services/permissions/authorizer.js';
import { builtinTools } from '../../src/services/tools/builtin.js';
import { globTimeoutText } from '../../src/services/tools/glob.js';
import { prepareToolRuntime } from '../../src/services/tools/tool-runtime.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { type ToolEnv, useToolEnv } from '../support/tool-env.js';

const TIMEOUT_MS = 3_000;
/**
 * Matching `*a*a*a*a*a*b` against this name takes many seconds (over 10 s), so the deadline always
 * stops it in the worker, and with the matching back on the main thread the test still ends (and
 * fails on the event loop's gap) instead of hanging; nested extglobs (`+(+(a|aa))b`) take hours.
 */
const SLOW = '*a*a*a*a*a*b';
const LONG_NAME = 'a'.repeat(160);

let storage: SqlSessionStorage;
let env: ToolEnv;
usePglite((s) => (storage = s));
useToolEnv((e) => (env = e), { sandbox: 'disabled' });
beforeAll(() => {
  writeFileSync(join(env.ws, LONG_NAME), 'needle\n');
  writeFileSync(join(env.ws, 'src', 'code.ts'), 'needle\n');
});

const open: Core[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.shutdown();
});

describe('backtracking glob patterns run off the main thread', () => {
  it('glob and grep include time out with a typed result while the event loop keeps ticking', async () => {
    const runtime = await prepareToolRuntime({ home: env.home, tempDirs: [env.tmp], sandbox: 'disabled', grepTimeoutMs: TIMEOUT_MS });
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'glob', arguments: { pattern: SLOW } },
          { name: 'glob', arguments: { pattern: `**/${SLOW}` } },
          { name: 'grep', arguments: { pattern: 'needle', include: SLOW } },
          { name: 'glob', arguments: { pattern: '**/*.ts' } },
          { name: 'grep', arguments: { pattern: 'needle', include: '*.ts' } },
        ],
      },
      { text: 'done' },
    ]);
    const core = await createCore({ storage, model, tools: builtinTools(runtime), authorizer: permissionPolicy(runtime), sandbox: runtime.sandbox, closeStorageOnShutdown: false });
    open.push(core);
    const session = await core.createSession({ workingDirectory: env.ws });
    let last = performance.now();
    let longestGap = 0;
    const timer = setInterval(() => {
      const now = performance.now();
      longestGap = Math.max(longestGap, now - last);
      last = now;
    }, 20);
    try {
      const { turnId } = await session.startTurn({ clientRequestId: 'glob-redos', input: [{ type: 'text', text: 'find the files' }] });
      expect(await session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'done' });
    } finally {
      clearInterval(timer);
    }
    // Generous for a loaded machine; the main-thread match alone blocks for many seconds.
    expect(longestGap).toBeLessThan(2_500);
    const results = (await session.messages()).filter((m) => m.role === 'tool').map((m) => m.content[0] as { status: string; text: string; error?: { code: string } });
    expect(results.slice(0, 3).map((r) => [r.status, r.error?.code])).toEqual([
      ['failed', 'timeout'],
      ['failed', 'timeout'],
      ['failed', 'timeout'],
    ]);
    expect(results[0]!.text).toBe(globTimeoutText(TIMEOUT_MS, SLOW));
    expect(results[2]!.text).toBe(globTimeoutText(TIMEOUT_MS, SLOW));
    expect(results[3]!.text).toBe('src/code.ts');
    expect(results[4]!.text).toBe('src/code.ts:1: needle');
  });

  it('an invalid pattern is refused as invalid_arguments', async () => {
    const outcome = await env.call('glob', { pattern: 'x'.repeat(70_000) });
    expect(outcome.result.status).toBe('failed');
    expect(outcome.result.error?.code).toBe('invalid_arguments');
  });
});
