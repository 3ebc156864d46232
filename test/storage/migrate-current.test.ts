/**
 * Migrations on a store whose schema is current (issue 14.4, "the store ready sooner"): one read
 * and nothing else, on both backends; anything missing still goes the locked way and is applied, and
 * a changed file is still refused.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadMigrations, migrate } from '../../src/storage/migrate.js';
import type { SqlDatabase, SqlExecutor } from '../../src/storage/sql.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { backends } from '../support/databases.js';

/** The database, with every statement's text written to `seen` (on any connection or transaction). */
function counting(db: SqlDatabase, seen: string[]): SqlDatabase {
  const exec = (inner: SqlExecutor): SqlExecutor => ({
    query: (text, params) => {
      seen.push(typeof text === 'string' ? text.trim().split(/\s+/).slice(0, 4).join(' ') : text.name);
      return inner.query(text, params);
    },
  });
  return {
    kind: db.kind,
    query: exec(db).query,
    transaction: (fn) => db.transaction((tx) => fn(exec(tx))),
    withConnection: (fn) => db.withConnection((conn) => fn({ ...exec(conn), transaction: (f) => conn.transaction((tx) => f(exec(tx))) })),
    close: () => db.close(),
  };
}

describe.each(backends)('migrations on a current schema ($name)', (backend) => {
  let storage: SqlSessionStorage;
  let ids: string[];

  beforeAll(async () => {
    storage = await backend.create();
    ids = (await loadMigrations()).map((m) => m.id);
  }, 120_000);

  afterAll(() => storage?.close());

  it('a store without the migration table is migrated under the advisory lock', async () => {
    // A new PGlite store starts from the seed, already migrated (test/storage/pglite-seed.test.ts
    // covers one made by initdb); on Postgres the new database is empty.
    if (backend.name === 'pglite') return void (await storage.migrate());
    const seen: string[] = [];
    const report = await migrate(counting(storage.db, seen));
    expect(report).toEqual({ applied: ids, alreadyApplied: [] });
    // The single read failed (no table yet) and the locked way took over.
    expect(seen[0]).toBe('SELECT id, checksum FROM');
    expect(seen).toContain('SELECT pg_advisory_lock($1)');
  }, 120_000);

  it('a current schema costs one statement: the applied ids and checksums, no lock, no DDL', async () => {
    const seen: string[] = [];
    const report = await migrate(counting(storage.db, seen));
    expect(report).toEqual({ applied: [], alreadyApplied: ids });
    expect(seen).toEqual(['SELECT id, checksum FROM']);
  });

  it('a migration missing from the table is applied again under the lock', async () => {
    // 0007 only drops indexes IF EXISTS, so running it twice is harmless.
    const missing = '0007_trace_index_and_plan_duplicates';
    expect(ids).toContain(missing);
    await storage.db.query('DELETE FROM openwork_migrations WHERE id = $1', [missing]);
    const seen: string[] = [];
    const report = await migrate(counting(storage.db, seen));
    expect(report).toEqual({ applied: [missing], alreadyApplied: ids.filter((id) => id !== missing) });
    expect(seen).toContain('SELECT pg_advisory_lock($1)');
    const rows = await storage.db.query('SELECT id FROM openwork_migrations');
    expect(rows.rowCount).toBe(ids.length);
  });

  it('a migration changed after it was applied is refused (migration_error), by the single read too', async () => {
    const first = ids[0]!;
    const { rows } = await storage.db.query<{ checksum: string }>('SELECT checksum FROM openwork_migrations WHERE id = $1', [first]);
    await storage.db.query(`UPDATE openwork_migrations SET checksum = 'tampered' WHERE id = $1`, [first]);
    try {
      const seen: string[] = [];
      await expect(migrate(counting(storage.db, seen))).rejects.toMatchObject({ code: 'migration_error', message: `migration ${first} was changed after it was applied` });
      expect(seen).toEqual(['SELECT id, checksum FROM']);
    } finally {
      await storage.db.query('UPDATE openwork_migrations SET checksum = $2 WHERE id = $1', [first, rows[0]!.checksum]);
    }
  });
});
