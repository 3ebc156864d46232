/**
 * Vitest global setup: one real PostgreSQL server for the whole run (unless TEST_DATABASE_URL
 * names one). Test files create their own databases on it.
 *
 * It also builds the PGlite seed that `npm run build` ships beside the storage module
 * (`dist/storage/pglite-seed.tar.gz`), here beside the source module (gitignored), so that a PGlite
 * store opened by a test starts from it as one opened by a built package does: about 1 s instead of
 * 3 s of initdb per store. The storage contract and the seed tests still run initdb (`seed: null`).
 * The seed is built again only when what makes it changed (the migrations, the module that builds
 * it, PGlite's version): a run that finds a seed of the same key keeps it, which saves the initdb
 * (2-3 s of CPU) on every run of the edit loop.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';
import { createPgliteSeed, SHIPPED_PGLITE_SEED } from '../../src/storage/pglite.js';
import { startPostgres, type PostgresServer } from './postgres-server.js';

let server: PostgresServer | undefined;

/** Where the key of the seed on disk is kept (gitignored beside it). */
const SEED_KEY = `${SHIPPED_PGLITE_SEED}.key`;

/** A hash of everything the seed is made from: the migrations, the module that builds it, PGlite's version. */
function seedKey(): string {
  const hash = createHash('sha256');
  const migrations = fileURLToPath(new URL('../../src/storage/migrations/', import.meta.url));
  for (const name of readdirSync(migrations).sort()) hash.update(name).update(readFileSync(join(migrations, name)));
  hash.update(readFileSync(fileURLToPath(new URL('../../src/storage/pglite.ts', import.meta.url))));
  hash.update(readFileSync(fileURLToPath(new URL('../../src/storage/migrate.ts', import.meta.url))));
  // The package does not export its package.json: find it above its entry point.
  const entry = createRequire(import.meta.url).resolve('@electric-sql/pglite');
  const manifest = join(entry.slice(0, entry.lastIndexOf('/dist/')), 'package.json');
  hash.update(JSON.parse(readFileSync(manifest, 'utf8')).version);
  return hash.digest('hex');
}

export async function setup(project: TestProject): Promise<void> {
  const key = seedKey();
  if (!existsSync(SHIPPED_PGLITE_SEED) || !existsSync(SEED_KEY) || readFileSync(SEED_KEY, 'utf8') !== key) {
    // Written whole under another name, then renamed: a run beside this one never reads half a seed.
    const partial = `${SHIPPED_PGLITE_SEED}.${process.pid}.tmp`;
    writeFileSync(partial, await createPgliteSeed());
    renameSync(partial, SHIPPED_PGLITE_SEED);
    writeFileSync(SEED_KEY, key);
  }
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
