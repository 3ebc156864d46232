/**
 * `npm test` (what `.ci/run` runs): every file under `test/`, in two groups that share one Postgres
 * server (the global set-up runs once, for the root).
 *
 * - `shared`: most files share a worker process between files (`isolate: false`), so the runtime's
 *   modules are imported once per worker instead of once per file (about 1 s of CPU per file, 100 s
 *   of the suite's 1,120 file-seconds). Every test still opens its own stores, cores and servers.
 * - `isolated`: each file in a process of its own, for the files that start the built command, a
 *   browser or the TypeScript compiler (`test/e2e/`, `test/package/`), and for the OpenTelemetry
 *   test, which installs a process-global context manager, and for the files that bound the heap
 *   a flood leaves or the time it holds the host.
 *
 * `vitest.fast.config.ts` (the edit loop) uses the same options with its own list of files.
 */
import { defineConfig } from 'vitest/config';

/** The files that bound the heap a flood leaves or the time the host is held (see below). */
const HEAP_AND_STALL_FILES = [
  'test/security/slow-update-reader.test.ts',
  'test/security/stream-floods.test.ts',
  'test/security/output-flood.test.ts',
  'test/security/response-stall.test.ts',
  'test/security/dense-command-stall.test.ts',
  'test/services/model/delta-cost.test.ts',
  'test/security/hostile-input-cost.test.ts',
];

/**
 * The files that keep a process each (see above), and the files that make a pure helper of a chart
 * throw with `vi.mock` (a bug the charts must survive), which a shared worker's module cache ignores.
 */
export const ISOLATED_FILES = [
  'test/e2e/**/*.test.ts',
  'test/package/**/*.test.ts',
  'test/services/telemetry/**/*.test.ts',
  'test/core/tool-call-crash.test.ts',
  'test/core/crashed-turn-facts.test.ts',
  // Bounds on heap after GC and on CPU stalls: measured in a process no earlier file left work in (a
  // shared worker's leftover timers, sockets or stores allocate and run during the measurement; the
  // SSE case of slow-update-reader once read 4.5 MB beyond its control there, never alone).
  ...HEAP_AND_STALL_FILES,
];

/** What every group runs with. */
export const TEST_OPTIONS = {
  setupFiles: ['test/support/setup-request-check.ts'],
  pool: 'forks',
  testTimeout: 30_000,
  hookTimeout: 120_000,
  teardownTimeout: 30_000,
} as const;

export default defineConfig({
  test: {
    globalSetup: ['test/support/global-setup.ts'],
    maxWorkers: 2,
    reporters: ['default'],
    projects: [
      { test: { ...TEST_OPTIONS, setupFiles: [...TEST_OPTIONS.setupFiles], name: 'isolated', include: ISOLATED_FILES } },
      {
        test: { ...TEST_OPTIONS, setupFiles: [...TEST_OPTIONS.setupFiles], name: 'shared', include: ['test/**/*.test.ts'], exclude: ISOLATED_FILES, isolate: false },
      },
    ],
  },
});
