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
 * One migrated database from `create` for the enclosing `describe` (or the file), handed to `use`
 * before its tests run, and the list where tests put the cores they create: all shut down, then the
 * database closed, after the block. Hooks registered after this one run before it on the way out
 * (vitest's stack order), so a file's own `afterAll` still finds the database open.
 */
function useStorage(create: () => Promise<SqlSessionStorage> | SqlSessionStorage, use: (storage: SqlSessionStorage) => void): Core[] {
  let storage: SqlSessionStorage | undefined;
  const cores: Core[] = [];
  beforeAll(async () => {
    storage = await create();
    await storage.migrate();
    use(storage);
  });
  afterAll(async () => {
    for (const core of cores) await core.shutdown().catch(() => undefined);
    await storage?.close();
  });
  return cores;
}

/** One migrated in-memory PGlite database for the enclosing block (see `useStorage`). */
export function usePglite(use: (storage: SqlSessionStorage) => void): Core[] {
  return useStorage(() => pgliteStorage(), use);
}

/** One migrated database of `backend` (a fresh PGlite, or a new database on the suite's server). */
export function useBackend(backend: Backend, use: (storage: SqlSessionStorage) => void): Core[] {
  return useStorage(() => backend.create(), use);
}
