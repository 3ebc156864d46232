/**
 * Every system of the peers benchmark, in the order printed. `durable` says whether a turn's messages
 * are committed to a database before the next step; `postgres` whether it uses the bench's server.
 * Each system's modules are imported only in its own child process, so that its peak RSS counts
 * only its own code.
 */
const lazy = (file, name, ...args) => async (cfg) => (await import(file))[name](...args)(cfg);

export const SYSTEMS = {
  'ai-sdk': { label: 'Vercel AI SDK 6 generateText', durable: false, postgres: false, setup: lazy('./aisdk.mjs', 'setupAiSdk') },
  'agents-sdk': { label: 'OpenAI Agents SDK 0.14 Runner', durable: false, postgres: false, setup: lazy('./agents.mjs', 'setupAgents') },
  langgraph: { label: 'LangGraph.js 1.7 createReactAgent, no checkpointer', durable: false, postgres: false, setup: lazy('./langgraph.mjs', 'setupLangGraph', null) },
  'langgraph-pg-async': { label: 'LangGraph.js + PostgresSaver, async durability', durable: true, postgres: true, setup: lazy('./langgraph.mjs', 'setupLangGraph', 'async') },
  'langgraph-pg-sync': { label: 'LangGraph.js + PostgresSaver, sync durability', durable: true, postgres: true, setup: lazy('./langgraph.mjs', 'setupLangGraph', 'sync') },
  'floor-pg': { label: 'raw pg, one commit per message (floor)', durable: true, postgres: true, setup: lazy('./floor.mjs', 'setupPg') },
  'openwork-pg': { label: 'openwork-core on Postgres', durable: true, postgres: true, setup: lazy('./openwork.mjs', 'setupOpenwork', 'postgres') },
  // A before/after in one run: another build of openwork-core, e.g. main's, built into a directory.
  ...(process.env.BENCH_PEERS_BASE_DIST
    ? { 'openwork-pg-base': { label: `openwork-core on Postgres, build ${process.env.BENCH_PEERS_BASE_DIST}`, durable: true, postgres: true, setup: lazy('./openwork.mjs', 'setupOpenwork', 'postgres', { dist: process.env.BENCH_PEERS_BASE_DIST }) } }
    : {}),
  'openwork-pg-notrace': { label: 'openwork-core on Postgres, trace off', durable: true, postgres: true, setup: lazy('./openwork.mjs', 'setupOpenwork', 'postgres', { trace: false }) },
  'floor-pglite-mem': { label: 'raw PGlite in memory (floor)', durable: true, postgres: false, setup: lazy('./floor.mjs', 'setupPglite', 'memory') },
  'openwork-pglite-mem': { label: 'openwork-core on PGlite in memory', durable: true, postgres: false, setup: lazy('./openwork.mjs', 'setupOpenwork', 'pglite-memory') },
  ...(process.env.BENCH_PEERS_BASE_DIST
    ? { 'openwork-pglite-mem-base': { label: `openwork-core on PGlite in memory, build ${process.env.BENCH_PEERS_BASE_DIST}`, durable: true, postgres: false, setup: lazy('./openwork.mjs', 'setupOpenwork', 'pglite-memory', { dist: process.env.BENCH_PEERS_BASE_DIST }) } }
    : {}),
  'floor-pglite-file': { label: 'raw PGlite on disk (floor)', durable: true, postgres: false, setup: lazy('./floor.mjs', 'setupPglite', 'file') },
  'openwork-pglite-file': { label: 'openwork-core on PGlite on disk', durable: true, postgres: false, setup: lazy('./openwork.mjs', 'setupOpenwork', 'pglite-file') },
};
