/**
 * What runs before an embedded store answers its first statement (issue 14.4, "the store ready
 * sooner"): PGlite's own catalog query for array types is replaced by a table, and it must answer
 * exactly what that query answers, with arrays still crossing in both directions.
 */
import { PGlite } from '@electric-sql/pglite';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { BUILTIN_ARRAY_TYPES } from '../../src/storage/pglite-array-types.js';
import { pgliteStorage } from '../../src/storage/pglite.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';

describe('PGlite start without the array-types catalog query', () => {
  let storage: SqlSessionStorage;
  let startQueries: string[];

  beforeAll(async () => {
    // Every statement of ours goes through the extended protocol (pglite-protocol.ts), never
    // through PGlite's query(); PGlite's own start calls query() only for that catalog query.
    const spy = vi.spyOn(PGlite.prototype, 'query');
    try {
      storage = pgliteStorage();
      await storage.migrate();
      startQueries = spy.mock.calls.map((call) => String(call[0]));
    } finally {
      spy.mockRestore();
    }
  }, 120_000);

  afterAll(() => storage?.close());

  it('PGlite runs no query of its own while the store opens and migrates', () => {
    expect(startQueries).toEqual([]);
  });

  it('the table is what the catalog answers for every built-in array type (the query PGlite ran)', async () => {
    const { rows } = await storage.db.query<{ oid: number; typarray: number }>(
      `SELECT b.oid, b.typarray
         FROM pg_catalog.pg_type a LEFT JOIN pg_catalog.pg_type b ON b.oid = a.typelem
        WHERE a.typcategory = 'A'
        GROUP BY b.oid, b.typarray ORDER BY b.oid`,
    );
    const builtin = rows.filter((r) => r.oid !== null && r.oid < 10_000 && r.typarray < 10_000).map((r) => [r.oid, r.typarray]);
    expect(builtin.length).toBeGreaterThan(70);
    expect(BUILTIN_ARRAY_TYPES).toEqual(builtin);
    // The schema adds no type of its own whose arrays could cross: only tables' row types.
    const own = await storage.db.query<{ typname: string; typtype: string }>(
      `SELECT typname, typtype::text FROM pg_type WHERE typnamespace = 'public'::regnamespace AND typtype <> 'c' AND typcategory <> 'A'`,
    );
    expect(own.rows).toEqual([]);
  });

  it('arrays cross in both directions: text[] and int8[] parameters, int4[], timestamptz[] and jsonb[] results', async () => {
    const { rows } = await storage.db.query<{ names: string[]; ids: string[]; ints: number[]; times: Date[]; docs: unknown[] }>(
      `SELECT $1::text[] AS names, $2::int8[]::text[] AS ids, ARRAY[1, 2, 3]::int4[] AS ints,
              ARRAY['2026-12-02T00:00:00Z'::timestamptz] AS times, ARRAY['{"a":1}'::jsonb, '[2]'::jsonb] AS docs`,
      [['a', 'b,c', 'd"e'], [1, 2]],
    );
    expect(rows[0]).toEqual({ names: ['a', 'b,c', 'd"e'], ids: ['1', '2'], ints: [1, 2, 3], times: [new Date('2026-12-02T00:00:00Z')], docs: [{ a: 1 }, [2]] });
    // The statements of the store that send arrays (leases, the fence) run as before.
    const owners = await storage.db.query<{ hit: boolean }>(`SELECT 'x' = ANY($1::text[]) AS hit`, [['y', 'x']]);
    expect(owners.rows[0]!.hit).toBe(true);
  });
});
