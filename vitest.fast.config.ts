/**
 * `npm run test:fast`, the edit loop (issue 19 point 7: under a minute on 2 cores): the unit layer
 * (the three machines with stub actors, protocol, services, context, inspection) and the integration
 * files that cover the most behaviour per second on a real PGlite store and the real runtime. It is
 * a list of what is IN, so a new file is in `npm test` (which `.ci/run` runs: everything) and joins
 * the loop only when it is named here. What is left out, and why, is README.md "Tests".
 */
import { defineConfig } from 'vitest/config';
import { TEST_OPTIONS } from './vitest.config.js';

/** The edit loop: each entry with what it covers. */
export const FAST_FILES = [
  // The charts' decisions, each machine alone with stub actors (milliseconds, no storage or model).
  'test/machines/session.test.ts',
  'test/machines/turn.test.ts',
  'test/machines/tool-call.test.ts',
  'test/machines/{tool-call,turn}/outcomes.test.ts',
  // Pure modules: protocol schemas, request assembly, ids, budgets, the inspector's reducer and charts.
  'test/protocol/**/*.test.ts',
  'test/services/context/assemble.test.ts',
  'test/services/ids.test.ts',
  'test/services/progress-budget.test.ts',
  'test/services/ring-buffer.test.ts',
  'test/services/trace/recorder.test.ts',
  'test/inspector/server/charts.test.ts',
  'test/inspector/server/safe-json.test.ts',
  'test/inspector/reducer.test.ts',
  'test/cli/options.test.ts',
  'test/package/layers.test.ts',
  'test/docs/**/*.test.ts',
  // Services on their real parts: the permission policy, the tools and their outputs, the model
  // adapters against the fake OpenAI server, the MCP names.
  'test/services/permissions/**/*.test.ts',
  'test/services/tools/{bash-outcomes,file-tools,output,security,tool-runtime,tool-source,tool-texts-by-mode}.test.ts',
  'test/services/model/{openai,openai-rate-limits,wire-replay}.test.ts',
  'test/services/mcp/names-results.test.ts',
  'test/services/sandbox/seatbelt.test.ts',
  // The runtime end to end on PGlite: a call the Turn runs itself, commands and their typed
  // refusals, the model port's boundary, the control tools, cards, the working directory, the
  // prepared statements, a protection attack, and restart reconciliation.
  'test/machines/turn/direct-tool-call.test.ts',
  'test/session-handle/command-input.test.ts',
  'test/services/model/port-boundary.test.ts',
  'test/host/control-tools.test.ts',
  'test/host/card-defaults.test.ts',
  'test/host/working-directory.test.ts',
  'test/storage/pglite-prepared.test.ts',
  'test/security/hard-link-write.test.ts',
  'test/services/agents/reconciliation.test.ts',
];

// One group, no projects: the suite's options with this list, files sharing workers.
export default defineConfig({
  test: {
    ...TEST_OPTIONS,
    setupFiles: [...TEST_OPTIONS.setupFiles],
    globalSetup: ['test/support/global-setup.ts'],
    maxWorkers: 2,
    reporters: ['default'],
    include: FAST_FILES,
    isolate: false,
  },
});
