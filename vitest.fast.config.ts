/**
 * `npm run test:fast`, the edit loop: the whole suite except the files that spend most of its time
 * in child processes, real browsers, kill-and-restart loops and package builds. `npm test` (what
 * `.ci/run` runs) still runs everything; what is left out here is listed in README.md, "Tests".
 */
import { defineConfig, mergeConfig } from 'vitest/config';
import base from './vitest.config.js';

/** Left out of the edit loop, each with why: together they are most of the suite's time. */
export const SLOW_FILES = [
  // CLI child processes, the crash-restart loop and the browser suite.
  'test/e2e/**',
  // The Postgres outage soak stops and restarts a server many times.
  'test/faults/postgres-outage-soak.test.ts',
  // Build the package, install it into a host project and type-check it there.
  'test/package/consumer-types.test.ts',
  'test/package/examples.test.ts',
  'test/package/exports.test.ts',
  // Every generated path of the composed charts (about a minute); run it when a chart changes.
  'test/machines/statecharts.test.ts',
  // The sandbox attack that races thousands of link swaps against the file tools.
  'test/security/file-tool-symlink-race.test.ts',
  // Child processes: real MCP servers, and the Stately relay's child runtime.
  'test/services/mcp/mcp-tools.test.ts',
  'test/inspection/stately.test.ts',
];

export default mergeConfig(
  base,
  defineConfig({
    test: {
      exclude: ['**/node_modules/**', ...SLOW_FILES],
    },
  }),
);
