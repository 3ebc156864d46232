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
import { USER_TEXT } from '../scenario.mjs';
import { fakeModelPort, instantToolOf, NO_TRACE } from '../openwork-setup.mjs';

/** The build under test: the root's `dist/`, or another build (`BENCH_PEERS_BASE_DIST`) for a before/after in one run. */
const load = (dist) => import(dist ? pathToFileURL(resolve(dist, 'index.js')).href : '../../../dist/index.js');

const model = fakeModelPort();


export function setupOpenwork(storageKind, { trace = true, dist } = {}) {
  return async ({ url, dir }) => {
    const { createCore, defineTool, pgliteStorage, postgresStorage } = await load(dist);
    const instant = instantToolOf(defineTool, z);
    const storage =
      storageKind === 'postgres'
        ? postgresStorage({ connectionString: url, max: 10 })
        : pgliteStorage(storageKind === 'pglite-file' ? { dataDir: `${dir}/pgdata` } : {});
    const core = await createCore({ storage, model, tools: [instant], worldState: false, ...(trace ? {} : { trace: NO_TRACE }) });
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
