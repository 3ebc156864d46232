/**
 * The `pg` adapter's `timestamptz` parser (storage/pg-timestamps.ts, branch perf-jit2) gives the same
 * `Date` as `pg`'s own (postgres-date) for every text, the shapes it reads itself and the ones it
 * hands back; and on a real server the times read back through the adapter are the ones `pg` reads.
 */
import { createRequire } from 'node:module';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { timestamptzParser } from '../../src/storage/pg-timestamps.js';
import { PostgresDatabase } from '../../src/storage/postgres.js';
import { iso } from '../../src/storage/sql.js';
import { createTestDatabase } from '../support/databases.js';

const parseDate = createRequire(createRequire(import.meta.url).resolve('pg-types')).resolve('postgres-date');
const pgParse = createRequire(import.meta.url)(parseDate) as (text: string) => unknown;

/** A seeded generator, so a failure names texts that can be run again. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const same = (a: unknown, b: unknown): boolean =>
  a instanceof Date && b instanceof Date ? Object.is(a.getTime(), b.getTime()) : Object.is(a, b);

describe('timestamptzParser', () => {
  let handedBack: string[] = [];
  const parse = timestamptzParser((text) => {
    handedBack.push(text);
    return pgParse(text);
  });

  it('reads UTC texts of the years 1000-9999 with 0 to 6 fraction digits as pg does, without pg', () => {
    const next = random(20261203);
    const wrong: string[] = [];
    handedBack = [];
    for (let i = 0; i < 20000; i += 1) {
      const ms = Math.floor(next() * (253402300800000 + 30610224000000)) - 30610224000000; // 1000-01-01 .. 9999-12-31
      const base = new Date(ms).toISOString().slice(0, 19).replace('T', ' ');
      const k = Math.floor(next() * 7);
      const fraction = k === 0 ? '' : `.${String(Math.floor(next() * 10 ** k)).padStart(k, '0')}`;
      const text = `${base}${fraction}+00`;
      if (!same(parse(text), pgParse(text))) wrong.push(text);
    }
    expect(wrong.slice(0, 5)).toEqual([]);
    expect(handedBack).toEqual([]);
  });

  it('hands every other shape to pg', () => {
    const others = [
      '2026-12-03 08:55:36.132039+05:30',
      '2026-12-03 08:55:36-08',
      '2026-12-03 08:55:36.5+01',
      '0099-01-01 00:00:00+00',
      '0500-06-01 12:00:00+00',
      '2026-12-03 08:55:36+00 BC',
      '12026-12-03 08:55:36+00',
      'infinity',
      '-infinity',
      '2026-12-03',
      '2026-12-03 08:55:36.+00',
      '2026-12-03 08:55:36.1234567+00',
      '2026-12-03T08:55:36+00',
      '2026-1a-03 08:55:36+00',
      '',
    ];
    handedBack = [];
    for (const text of others) expect(same(parse(text), pgParse(text)), text).toBe(true);
    expect(handedBack).toEqual(others);
  });

  it('formats what it read as toISOString does (storage iso)', () => {
    for (const text of ['2026-12-03 08:55:36.291+00', '1999-12-31 23:59:59.999999+00', '2000-02-29 00:00:00+00']) {
      const date = parse(text) as Date;
      expect(iso(date)).toBe(date.toISOString());
    }
  });
});

describe('the pg adapter reads timestamptz as pg does', () => {
  let url: string;
  let db: PostgresDatabase;
  let client: pg.Client;
  beforeAll(async () => {
    url = await createTestDatabase();
    db = new PostgresDatabase({ connectionString: url, max: 2 });
    client = new pg.Client({ connectionString: url });
    await client.connect();
  });
  afterAll(async () => {
    await client?.end();
    await db?.close();
  });

  it('in a UTC session and in another time zone', async () => {
    const sql = `SELECT now() AS a, '1999-12-31 23:59:59.999999+00'::timestamptz AS b, '2026-03-01 00:00:00.291+00'::timestamptz AS c,
                        '0099-01-01 00:00:00+00'::timestamptz AS d, 'infinity'::timestamptz AS e`;
    for (const zone of ['UTC', 'Asia/Kolkata']) {
      await client.query(`SET TimeZone = '${zone}'`);
      await db.transaction(async (tx) => {
        await tx.query(`SET LOCAL TimeZone = '${zone}'`);
        const ours = (await tx.query(sql.replace('now()', `'2026-12-03 08:55:36.132039+00'::timestamptz`))).rows[0]!;
        const theirs = (await client.query(sql.replace('now()', `'2026-12-03 08:55:36.132039+00'::timestamptz`))).rows[0]!;
        for (const key of ['a', 'b', 'c', 'd', 'e']) expect(same(ours[key], theirs[key]), `${zone} ${key}`).toBe(true);
      });
    }
  });
});
