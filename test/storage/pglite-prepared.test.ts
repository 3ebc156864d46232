/**
 * PGlite through the extended protocol (issue 14.2, storage/pglite-protocol.ts): a named statement
 * is parsed once per database and then only bound and executed; its rows, row counts and errors are
 * exactly what PGlite's own `query()` gives for the same text; a re-opened database prepares again;
 * a transaction's BEGIN rides with its first statement and an error still rolls the whole of it back.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { PGlite } from '@electric-sql/pglite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PgliteDatabase } from '../../src/storage/pglite.js';
import { statement } from '../../src/storage/sql.js';

/** The build's seed when there is one (skips initdb, seconds under load); else initdb runs. */
const DIST_SEED = join(import.meta.dirname, '../../dist/storage/pglite-seed.tar.gz');
const seed = existsSync(DIST_SEED) ? DIST_SEED : null;

/** PGlite's own instance behind the adapter, to compare with its unprepared `query()`. */
const raw = (database: PgliteDatabase): PGlite => (database as unknown as { db: PGlite }).db;

const TYPES = statement(
  'test_types',
  `SELECT $1::bigint AS big, $2::int AS small, $3::text AS label, $4::jsonb AS doc, $5::timestamptz AS at,
          $6::boolean AS flag, $7::text[] AS tags, $8::numeric AS amount, $9::text AS missing, now() > $5::timestamptz AS later`,
);
const TYPE_PARAMS = [9007199254740993n, 42, 'héllo', { a: [1, { b: null }] }, new Date('2026-01-02T03:04:05.678Z'), true, ['x', 'y,z'], '12.50', null];
const INSERT = statement('test_insert', 'INSERT INTO prepared_t (id, note) VALUES ($1, $2) RETURNING id, note, created');
const UPDATE = statement('test_update', 'UPDATE prepared_t SET note = $2 WHERE id >= $1');
const COUNT = statement('test_count', 'SELECT count(*)::int AS n FROM prepared_t');

async function preparedNamed(database: PgliteDatabase): Promise<{ name: string; prepare_time: Date }[]> {
  const { rows } = await database.query<{ name: string; prepare_time: Date }>(
    `SELECT name, prepare_time FROM pg_prepared_statements WHERE name LIKE 'ow_test_%' ORDER BY name`,
  );
  return rows;
}

describe('PGlite prepared statements (extended protocol)', () => {
  let dir: string;
  let database: PgliteDatabase;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ow-pglite-prepared-'));
    database = new PgliteDatabase({ dataDir: join(dir, 'db'), seed });
    await database.query('CREATE TABLE prepared_t (id int PRIMARY KEY, note text NOT NULL, created timestamptz NOT NULL DEFAULT now())');
  }, 120_000);

  afterAll(async () => {
    await database?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('parses a named statement once per database, then only binds and executes it', async () => {
    expect(database.preparedStatements).toBe(0);
    await database.query(COUNT);
    const [first] = await preparedNamed(database);
    expect(first?.name).toBe('ow_test_count');
    for (let i = 0; i < 5; i += 1) await database.query(COUNT);
    await database.transaction(async (tx) => {
      await tx.query(COUNT);
    });
    // Still the one statement Postgres parsed the first time: a second Parse under the name would
    // fail ("already exists"), and one after a DEALLOCATE would carry a later prepare_time.
    const after = await preparedNamed(database);
    expect(after).toEqual([first]);
    expect(database.preparedStatements).toBe(1);
  });

  it('returns the rows, types and row counts that PGlite parses on its own path', async () => {
    const mine = await database.query(TYPES, TYPE_PARAMS);
    const theirs = await raw(database).query<Record<string, unknown>>(TYPES.text, TYPE_PARAMS);
    expect(mine.rows).toEqual(theirs.rows);
    expect(typeof mine.rows[0]!.big).toBe(typeof theirs.rows[0]!.big);
    expect(mine.rows[0]!.at).toBeInstanceOf(Date);
    expect(mine.rows[0]!.doc).toEqual({ a: [1, { b: null }] });
    expect(mine.rowCount).toBe(1);
    // Again, now bound to the statement prepared above, and through an unnamed statement.
    expect((await database.query(TYPES, TYPE_PARAMS)).rows).toEqual(theirs.rows);
    expect((await database.query(TYPES.text, TYPE_PARAMS)).rows).toEqual(theirs.rows);

    const inserted = await database.query(INSERT, [1, 'one']);
    expect(inserted.rowCount).toBe(1);
    expect(inserted.rows[0]).toMatchObject({ id: 1, note: 'one' });
    expect(inserted.rows[0]!.created).toBeInstanceOf(Date);
    await database.query(INSERT, [2, 'two']);
    const updated = await database.query(UPDATE, [1, 'both']);
    const theirUpdate = await raw(database).query(UPDATE.text, [1, 'both']);
    expect(updated).toEqual({ rows: [], rowCount: 2 });
    expect(theirUpdate.affectedRows).toBe(2);
  });

  it('reads a reply that the backend writes in several chunks, nulls and a BEGIN before it, as PGlite does', async () => {
    // About 300 kB of rows: the backend flushes its 8 kB send buffer many times within one call.
    const many = statement('test_many', `SELECT g AS n, CASE WHEN g % 3 = 0 THEN NULL ELSE repeat('é', 20) END AS filler, jsonb_build_object('g', g) AS doc FROM generate_series(1, $1::int) g`);
    const mine = await database.query(many, [5000]);
    const theirs = await raw(database).query<Record<string, unknown>>(many.text, [5000]);
    expect(mine.rows.length).toBe(5000);
    expect(mine.rows).toEqual(theirs.rows);
    expect(mine.rowCount).toBe(5000);
    const inTx = await database.transaction(async (tx) => (await tx.query(many, [3])).rows);
    expect(inTx).toEqual(theirs.rows.slice(0, 3));
  });

  it('fails with the same DatabaseError as PGlite, and the database goes on', async () => {
    const mine = await database.query(INSERT, [1, 'again']).catch((error: unknown) => error);
    const theirs = await raw(database).query(INSERT.text, [1, 'again']).catch((error: unknown) => error);
    expect(mine).toBeInstanceOf(Error);
    const fields = ['constructor', 'message', 'code', 'severity', 'detail', 'constraint', 'table', 'schema', 'query', 'params'];
    const pick = (e: unknown) => Object.fromEntries(fields.map((f) => [f, (e as Record<string, unknown>)[f]]));
    expect(pick(mine)).toEqual(pick(theirs));
    expect(pick(mine)).toMatchObject({ code: '23505', constraint: 'prepared_t_pkey' });
    // A syntax error in a named statement is reported too, and leaves nothing prepared under its name.
    const bad = statement('test_bad', 'SELEC 1');
    await expect(database.query(bad)).rejects.toMatchObject({ code: '42601' });
    expect((await preparedNamed(database)).map((r) => r.name)).not.toContain('ow_test_bad');
    expect((await database.query(COUNT)).rows).toEqual([{ n: 2 }]);
  });

  it('a transaction sends BEGIN with its first statement and rolls all of it back on an error', async () => {
    const failure = await database
      .transaction(async (tx) => {
        await tx.query(INSERT, [10, 'ten']);
        await tx.query(INSERT, [11, 'eleven']);
        await tx.query(INSERT, [1, 'duplicate']);
      })
      .catch((error: unknown) => error);
    expect(failure).toMatchObject({ code: '23505' });
    expect((await database.query(COUNT)).rows).toEqual([{ n: 2 }]);
    // The error caught inside: COMMIT then answers ROLLBACK, which fails as PGlite's transaction does.
    const aborted = await database
      .transaction(async (tx) => {
        await tx.query(INSERT, [12, 'twelve']);
        await tx.query(INSERT, [1, 'duplicate']).catch(() => undefined);
      })
      .catch((error: unknown) => error);
    expect(aborted).toMatchObject({ code: '25P02' });
    expect((await database.query(COUNT)).rows).toEqual([{ n: 2 }]);
    const committed = await database.transaction(async (tx) => {
      await tx.query(INSERT, [13, 'thirteen']);
      return (await tx.query(COUNT)).rows[0];
    });
    expect(committed).toEqual({ n: 3 });
    // Nothing is left open: a transaction that ran no statement sent nothing, and BEGIN works again.
    await database.transaction(async () => undefined);
    const { rows } = await database.query<{ open: boolean }>('SELECT pg_current_xact_id_if_assigned() IS NULL AS open');
    expect(rows).toEqual([{ open: true }]);
  });

  it('a re-opened database prepares its statements again', async () => {
    await database.close();
    database = new PgliteDatabase({ dataDir: join(dir, 'db'), seed });
    expect(database.preparedStatements).toBe(0);
    expect(await preparedNamed(database)).toEqual([]);
    expect((await database.query(COUNT)).rows).toEqual([{ n: 3 }]);
    expect((await preparedNamed(database)).map((r) => r.name)).toEqual(['ow_test_count']);
  }, 60_000);
});
