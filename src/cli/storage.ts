/**
 * @module cli/storage
 * The CLI's session store: PGlite under `.openwork/db` by default, Postgres with `--database-url`
 * or `DATABASE_URL`. The `.openwork/` directory the CLI creates in the working directory carries a
 * `.gitignore` of `*`, so the store never shows up in the user's repository; `createCore` keeps
 * every tool out of the store itself (`storage.protectedPaths`).
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { isAbsolute, join, relative } from 'node:path';
import { pgliteStorage } from '../storage/pglite.js';
import { postgresStorage } from '../storage/postgres.js';
import type { SqlSessionStorage } from '../storage/sql-storage.js';
import { isOpenworkError } from '../errors.js';
import type { StorageOptions } from './options.js';

export function openStorage(options: StorageOptions): SqlSessionStorage {
  if (options.databaseUrl) return postgresStorage({ connectionString: options.databaseUrl });
  ignoreOpenworkDirectory(options.workingDirectory, options.dataDir);
  return pgliteStorage({ dataDir: options.dataDir });
}

/**
 * Creates `<workingDirectory>/.openwork/.gitignore` (`*`) when `path` lies in that directory and
 * the file is missing (a user's own file is kept).
 */
export function ignoreOpenworkDirectory(workingDirectory: string, path: string): void {
  const dir = join(workingDirectory, '.openwork');
  const rel = relative(dir, path);
  // Not below it (or the store is `.openwork` itself, where a stray file would not belong).
  if (rel === '' || rel.startsWith('..') || isAbsolute(rel)) return;
  mkdirSync(dir, { recursive: true });
  const ignore = join(dir, '.gitignore');
  if (!existsSync(ignore)) writeFileSync(ignore, '*\n');
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
