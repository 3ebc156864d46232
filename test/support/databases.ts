/**
 * Per-file databases on the suite's Postgres server, and the two storage backends every
 * contract and runtime suite runs against.
 */
import pg from 'pg';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, inject } from 'vitest';
import type { Core } from '../../src/core.js';
import { pgliteStorage } from '../../src/storage/pglite.js';
import { postgresStorage } from '../../src/storage/postgres.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';

/** Creates an empty database on the test server and returns its URL. */
export async function createTestDatabase(): Promise<string> {
  const admin = inject('databaseUrl');
  const name = `t_${randomUUID().replace(/-/g, '').slice(0, 20)}`;
  const client = new pg.Client({ connectionString: admin });
  await client.connect();
  try {
    await client.query(`CREATE DATABASE ${name}`);
  } finally {
    await client.end();
  }
  const url = new URL(admin);
  url.pathname = `/${name}`;
  return url.toString();
}

export interface Backend {
  name: 'pglite' | 'postgres';
  create(): Promise<SqlSessionStorage>;
}

export const backends: Backend[] = [
  { name: 'pglite', create: async () => pgliteStorage() },
  { name: 'postgres', create: async () => postgresStorage({ connectionString: await createTestDatabase() }) },
];

/**
 * One migrated PGlite database for the test file, handed to `use` before its tests run, and the
 * list where tests put the cores they create: all shut down, then the database closed, after the file.
 */
export function usePglite(use: (storage: SqlSessionStorage) => void): Core[] {
  let storage: SqlSessionStorage | undefined;
  const cores: Core[] = [];
  beforeAll(async () => {
    storage = pgliteStorage();
    await storage.migrate();
    use(storage);
  });
  afterAll(async () => {
    for (const core of cores) await core.shutdown().catch(() => undefined);
    await storage?.close();
  });
  return cores;
}
