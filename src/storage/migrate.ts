/**
 * @module storage/migrate
 * Applies the plain-SQL files in `migrations/` in name order, each in its own transaction, under a
 * session-level advisory lock so that several processes starting at once apply each file exactly once.
 *
 * A store whose schema is current (every open but the first of each version) costs one read: the
 * applied ids and checksums, without the lock. Reading committed rows needs no lock, and a store
 * that lacks anything, or has no migration table yet, goes the locked way, which reads them again
 * under the lock before it applies a file. An embedded store opens on every CLI start, and each
 * statement there is a first one, on cold caches (docs/benchmarks.md, "The store ready sooner").
 */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { OpenworkError, StorageError, errorMessage } from '../errors.js';
import type { SqlDatabase } from './sql.js';
import { sqlStateOf } from './sql/sql-state.js';

/**
 * True when the database could not be reached at all (refused, not found, timed out, or the
 * connection ended under a statement, with no answer of the server about the statement itself).
 * `createCore` then answers `persistence_error`, the code of every other command during an outage,
 * which a host may retry once the database is back; `migration_error` stays for a migration the
 * server refused or one changed after it was applied, which retrying does not mend.
 */
function unreachable(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const severity = (error as { severity?: unknown }).severity;
  // A FATAL answer ends the connection (admin shutdown, starting up, too many connections).
  if (severity === 'FATAL' || severity === 'PANIC') return true;
  if (severity !== undefined || sqlStateOf(error) !== undefined) return false;
  const code = (error as { code?: unknown }).code;
  return (
    (typeof code === 'string' && /^E[A-Z]+$/.test(code)) ||
    /Connection terminated|connection timeout|Query read timeout|is not queryable/i.test(error.message)
  );
}

/** Arbitrary but fixed: the advisory lock key every openwork process uses for migrations. */
export const MIGRATION_LOCK_KEY = 7_340_213_118;

export interface Migration {
  id: string;
  sql: string;
  checksum: string;
}

export interface MigrationReport {
  applied: string[];
  alreadyApplied: string[];
}

const migrationsDir = new URL('./migrations/', import.meta.url);

export async function loadMigrations(): Promise<Migration[]> {
  const files = (await readdir(migrationsDir)).filter((f) => f.endsWith('.sql')).sort();
  return Promise.all(
    files.map(async (file) => {
      const sql = await readFile(new URL(file, migrationsDir), 'utf8');
      return { id: file.replace(/\.sql$/, ''), sql, checksum: createHash('sha256').update(sql).digest('hex') };
    }),
  );
}

/** Postgres's SQLSTATE for a relation that does not exist (the migration table, before the first). */
const UNDEFINED_TABLE = '42P01';

/** The report when every migration is applied with its checksum; null when something is missing. */
async function currentSchema(db: SqlDatabase, migrations: readonly Migration[]): Promise<MigrationReport | null> {
  let rows: Array<{ id: string; checksum: string }>;
  try {
    ({ rows } = await db.query<{ id: string; checksum: string }>('SELECT id, checksum FROM openwork_migrations'));
  } catch (error) {
    if ((error as { code?: unknown }).code === UNDEFINED_TABLE) return null;
    throw error;
  }
  const done = new Map(rows.map((r) => [r.id, r.checksum]));
  refuseUnknown(done, migrations);
  for (const m of migrations) {
    const seen = done.get(m.id);
    if (seen === undefined) return null;
    if (seen !== m.checksum) throw changedAfterApplied(m.id);
  }
  return { applied: [], alreadyApplied: migrations.map((m) => m.id) };
}

function changedAfterApplied(id: string): OpenworkError {
  return new OpenworkError('migration_error', `migration ${id} was changed after it was applied`);
}

/**
 * A store that records migrations this code does not have was written by a newer openwork-core (or
 * another program using the same table): its schema may have columns, constraints or meanings this
 * code would break, so it is refused with `migration_error` naming them, before anything is written.
 */
function refuseUnknown(done: ReadonlyMap<string, string>, migrations: readonly Migration[]): void {
  const known = new Set(migrations.map((m) => m.id));
  const unknown = [...done.keys()].filter((id) => !known.has(id)).sort();
  if (unknown.length === 0) return;
  throw new OpenworkError(
    'migration_error',
    `the store was migrated by a newer openwork-core or another program: it records migration(s) this version does not have (${unknown.slice(0, 5).join(', ')}${unknown.length > 5 ? ', ...' : ''}); open it with that version`,
    { details: { unknownMigrations: unknown } },
  );
}

export async function migrate(db: SqlDatabase): Promise<MigrationReport> {
  const migrations = await loadMigrations();
  try {
    const current = await currentSchema(db, migrations);
    if (current) return current;
    return await db.withConnection(async (conn) => {
      await conn.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
      try {
        await conn.query(`CREATE TABLE IF NOT EXISTS openwork_migrations (
          id TEXT PRIMARY KEY,
          checksum TEXT NOT NULL,
          applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )`);
        const { rows } = await conn.query<{ id: string; checksum: string }>('SELECT id, checksum FROM openwork_migrations');
        const done = new Map(rows.map((r) => [r.id, r.checksum]));
        refuseUnknown(done, migrations);
        const report: MigrationReport = { applied: [], alreadyApplied: [] };
        for (const m of migrations) {
          const seen = done.get(m.id);
          if (seen !== undefined) {
            if (seen !== m.checksum) {
              throw changedAfterApplied(m.id);
            }
            report.alreadyApplied.push(m.id);
            continue;
          }
          await conn.transaction(async (tx) => {
            // PGlite and pg both accept several statements in one simple query without parameters.
            await tx.query(m.sql);
            await tx.query('INSERT INTO openwork_migrations (id, checksum) VALUES ($1, $2)', [m.id, m.checksum]);
          });
          report.applied.push(m.id);
        }
        return report;
      } finally {
        await conn.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]);
      }
    });
  } catch (error) {
    if (error instanceof OpenworkError) throw error;
    if (unreachable(error)) throw new StorageError(`migration failed: the database is unreachable: ${errorMessage(error)}`, { cause: error });
    throw new OpenworkError('migration_error', `migration failed: ${errorMessage(error)}`, { cause: error });
  }
}
