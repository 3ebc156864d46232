/**
 * @module cli/storage
 * The CLI's session store: PGlite under `.openwork/db` by default, Postgres with `--database-url`
 * or `DATABASE_URL`.
 */
import { relative } from 'node:path';
import { pgliteStorage } from '../storage/pglite.js';
import { postgresStorage } from '../storage/postgres.js';
import type { SqlSessionStorage } from '../storage/sql-storage.js';
import type { StorageOptions } from './options.js';

export function openStorage(options: StorageOptions): SqlSessionStorage {
  return options.databaseUrl ? postgresStorage({ connectionString: options.databaseUrl }) : pgliteStorage({ dataDir: options.dataDir });
}

/** Where the sessions are, for messages (a Postgres URL without its password). */
export function storageLabel(options: StorageOptions): string {
  if (options.databaseUrl) {
    try {
      const url = new URL(options.databaseUrl);
      if (url.password) url.password = '***';
      return `postgres ${url.toString()}`;
    } catch {
      return 'postgres';
    }
  }
  const rel = relative(options.workingDirectory, options.dataDir);
  return `pglite ${rel && !rel.startsWith('..') ? rel : options.dataDir}`;
}
