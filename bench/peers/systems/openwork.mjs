/**
 * openwork-core, from the root package's built `dist/` (run `npm run build` first; `npm run
 * bench:peers` does): a fresh session per turn, the same fake model decision as a `ModelPort`, one
 * instant tool, World State sampling off (no peer samples the workspace). Storage: Postgres (a pool
 * of 10), PGlite in memory, or PGlite in a data directory. The `trace off` variant plugs in a
 * recorder that drops every signal, to show the trace's share.
 */
import { randomUUID } from 'node:crypto';
// The root's zod, the same instance as dist/ uses, so that defineTool sees its own schema class.
import { z } from '../../../node_modules/zod/index.js';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { decide, FINAL_TEXT, instantTool, USER_TEXT } from '../scenario.mjs';

/** The build under test: the root's `dist/`, or another build (`BENCH_PEERS_BASE_DIST`) for a before/after in one run. */
const load = (dist) => import(dist ? pathToFileURL(resolve(dist, 'index.js')).href : '../../../dist/index.js');

let calls = 0;
/** The fake model as a ModelPort: no latency, no recording, O(request) only to count tool results. */
const model = {
  id: 'fake/zero',
  providerId: 'fake',
  model: 'zero',
  contextWindow: 200_000,
  maxOutputTokens: 8_000,
  async *stream(request) {
    let results = 0;
    for (const m of request.messages) if (m.role === 'tool') results += 1;
    const next = decide(results);
    const usage = { inputTokens: 100, outputTokens: 10, cachedInputTokens: 0, reasoningTokens: 0 };
    if (next === null) {
      yield { type: 'text_delta', delta: FINAL_TEXT };
      yield { type: 'completed', usage, finishReason: 'stop' };
      return;
    }
    calls += 1;
    yield { type: 'tool_call', callId: `call_${calls}`, name: 'instant', arguments: JSON.stringify({ i: next }) };
    yield { type: 'completed', usage, finishReason: 'tool_use' };
  },
};

const noTrace = {
  record() {},
  async flush() {
    return { flushed: true, droppedSignals: 0, writeFailures: 0, written: 0, queued: 0 };
  },
  stats: () => ({ droppedSignals: 0, writeFailures: 0, written: 0, queued: 0 }),
  async close() {},
};

export function setupOpenwork(storageKind, { trace = true, dist } = {}) {
  return async ({ url, dir }) => {
    const { createCore, defineTool, pgliteStorage, postgresStorage } = await load(dist);
    const instant = defineTool({ name: 'instant', description: 'Returns at once.', parameters: z.object({ i: z.number() }), execute: ({ i }) => instantTool(i) });
    const storage =
      storageKind === 'postgres'
        ? postgresStorage({ connectionString: url, max: 10 })
        : pgliteStorage(storageKind === 'pglite-file' ? { dataDir: `${dir}/pgdata` } : {});
    const core = await createCore({ storage, model, tools: [instant], worldState: false, ...(trace ? {} : { trace: noTrace }) });
    return {
      async turn() {
        const session = await core.createSession({ workingDirectory: dir });
        const { turnId } = await session.startTurn({ clientRequestId: randomUUID(), input: [{ type: 'text', text: USER_TEXT }] });
        const outcome = await session.waitForTurn(turnId);
        if (outcome.status !== 'completed') throw new Error(`turn ended ${JSON.stringify(outcome)}`);
      },
      // The trace is written behind the turn; a phase ends only once it is stored.
      drain: async () => void (await core.flushTrace(60_000)),
      close: () => core.shutdown(),
    };
  };
}
