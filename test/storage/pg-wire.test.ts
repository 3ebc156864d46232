/**
 * Issue 14: the client side of a statement on `pg` (src/storage/postgres.ts builds each query from
 * its text, then names it). On a real Postgres server: a fenced fact leaves in one socket write
 * (counted at the socket: each is one write/writev syscall), and the error paths still answer: a
 * bind that throws on a bad value, a statement the server refuses, a statement queued behind a slow one.
 */
import net from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresDatabase, postgresStorage } from '../../src/storage/postgres.js';
import { statement } from '../../src/storage/sql.js';
import type { WriteFence } from '../../src/storage/fence.js';
import { createTestDatabase } from '../support/databases.js';
import { beginRunningTurn, toolResultMessage, uid } from '../support/storage-fixtures.js';

/** Socket writes to the server at `port` while `fn` runs: every write syscall passes `_writeGeneric`. */
async function writesTo<T>(port: number, fn: () => Promise<T>): Promise<{ result: T; writes: number }> {
  const proto = net.Socket.prototype as unknown as { _writeGeneric: (this: net.Socket, ...args: unknown[]) => unknown };
  const generic = proto._writeGeneric;
  let writes = 0;
  proto._writeGeneric = function (...args: unknown[]) {
    if (this.remotePort === port) writes += 1;
    return generic.apply(this, args);
  };
  try {
    return { result: await fn(), writes };
  } finally {
    proto._writeGeneric = generic;
  }
}

const ECHO = statement('lanes_echo', 'SELECT $1::int AS n');

describe('statements on the pg client (Postgres)', () => {
  let url: string;
  let port: number;
  let admin: pg.Client;
  let db: PostgresDatabase;

  beforeAll(async () => {
    url = await createTestDatabase();
    port = Number(new URL(url).port);
    admin = new pg.Client({ connectionString: url });
    await admin.connect();
    db = new PostgresDatabase({ connectionString: url, max: 1 });
    await db.query('SELECT 1');
  });
  afterAll(async () => {
    await db.close();
    await admin.end();
  });


  it('a fenced fact is one statement in one socket write', async () => {
    const storage = postgresStorage({ connectionString: url });
    try {
      await storage.migrate();
      const tokens = new Map<string, number>();
      const fence: WriteFence = { ownerId: uid('owner'), tokenOf: (id) => tokens.get(id), refused: () => undefined };
      storage.attachFence(fence);
      const sessionId = uid('ses');
      await storage.createSession({ id: sessionId, workingDirectory: '/work' });
      const acquired = await storage.leases.acquire(sessionId, fence.ownerId, 60_000);
      if (acquired.type !== 'acquired') throw new Error(acquired.type);
      tokens.set(sessionId, acquired.token);
      const { turnId } = await beginRunningTurn(storage, { sessionId });
      const { writes } = await writesTo(port, () => storage.commitToolResult(turnId, toolResultMessage('c1')));
      expect(writes).toBe(1);
    } finally {
      await storage.close();
    }
  });

  it('a bind that throws on a bad value fails that statement alone; its neighbours answer', async () => {
    const results = await Promise.allSettled([db.query(ECHO, [1]), db.query('SELECT $1::jsonb AS j', [{ big: 10n }]), db.query(ECHO, [3])]);
    expect(results[0]).toMatchObject({ status: 'fulfilled', value: { rows: [{ n: 1 }] } });
    expect(results[1]).toMatchObject({ status: 'rejected', reason: expect.objectContaining({ message: expect.stringMatching(/BigInt/) }) });
    expect(results[2]).toMatchObject({ status: 'fulfilled', value: { rows: [{ n: 3 }] } });
    expect((await db.query<{ n: number }>(ECHO, [4])).rows).toEqual([{ n: 4 }]);
  });

  it('a statement the server refuses fails alone: it is its own implicit transaction', async () => {
    await db.query('CREATE TABLE IF NOT EXISTS lanes_t (id int PRIMARY KEY)');
    const results = await Promise.allSettled([
      db.query('INSERT INTO lanes_t VALUES (1)'),
      db.query('INSERT INTO lanes_t VALUES (1)'),
      db.query('INSERT INTO lanes_t VALUES (2)'),
      db.query(ECHO, [5]),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
    expect(results[1]).toMatchObject({ reason: { code: '23505' } });
    expect((await db.query('SELECT id FROM lanes_t ORDER BY id')).rows).toEqual([{ id: 1 }, { id: 2 }]);
  });

  it('a statement queued behind a slow one on a pool of one waits for it and gets its own answer', async () => {
    const t0 = performance.now();
    const [slow, quick] = await Promise.all([db.query<{ n: number }>('SELECT 7 AS n FROM pg_sleep(0.3)'), db.query<{ n: number }>(ECHO, [8])]);
    expect(slow.rows).toEqual([{ n: 7 }]);
    expect(quick.rows).toEqual([{ n: 8 }]);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(290);
  });


});
