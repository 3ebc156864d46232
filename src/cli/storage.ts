/**
 * @module cli/storage
 * The CLI's session store: PGlite under `.openwork/db` by default, Postgres with `--database-url`
 * or `DATABASE_URL`.
 */
import { relative } from 'node:path';
import { pgliteStorage } from '../storage/pglite.js';
import { postgresStorage } from '../storage/postgres.js';
import type { SqlSessionStorage } from '../storage/sql-storage.js';
import { isOpenworkError } from '../errors.js';
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

/**
 * The one line the CLI prints when another process holds the embedded store (issue 13.5), or null
 * for any other error.
 */
export function storeLockedLine(options: StorageOptions, error: unknown): string | null {
  if (!isOpenworkError(error) || error.code !== 'store_locked') return null;
  const pid = error.details.holderPid;
  const holder = typeof pid === 'number' ? `process ${pid}` : 'another process';
  return `${storageLabel(options)} is in use by ${holder}; PGlite allows one openwork process per directory (use --database-url <postgres-url> to run several)`;
}
