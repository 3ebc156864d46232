/**
 * Vitest global setup: one real PostgreSQL server for the whole run (unless TEST_DATABASE_URL
 * names one). Test files create their own databases on it.
 *
 * It also builds the PGlite seed that `npm run build` ships beside the storage module
 * (`dist/storage/pglite-seed.tar.gz`), here beside the source module (gitignored), so that a PGlite
 * store opened by a test starts from it as one opened by a built package does: about 1 s instead of
 * 3 s of initdb per store. The storage contract and the seed tests still run initdb (`seed: null`).
 */
import { renameSync, writeFileSync } from 'node:fs';
import type { TestProject } from 'vitest/node';
import { createPgliteSeed, SHIPPED_PGLITE_SEED } from '../../src/storage/pglite.js';
import { startPostgres, type PostgresServer } from './postgres-server.js';

let server: PostgresServer | undefined;

export async function setup(project: TestProject): Promise<void> {
  // Written whole under another name, then renamed: a run beside this one never reads half a seed.
  const partial = `${SHIPPED_PGLITE_SEED}.${process.pid}.tmp`;
  writeFileSync(partial, await createPgliteSeed());
  renameSync(partial, SHIPPED_PGLITE_SEED);
  let url = process.env.TEST_DATABASE_URL;
  if (!url) {
    server = await startPostgres();
    url = server.url;
  }
  project.provide('databaseUrl', url);
}

export async function teardown(): Promise<void> {
  server?.stop();
}

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}
