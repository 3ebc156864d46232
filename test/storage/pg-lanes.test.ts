/**
 * Issue 14: single statements on `pg` ride pipelined lanes (src/storage/pg-lanes.ts), and what a lane
 * is given in one tick leaves in one socket write. On a real Postgres server: the writes counted at
 * the socket (each is one write/writev syscall), and the answers of every error path: a bind that
 * throws on a bad value, a statement the server refuses, a connection that dies mid-query, a
 * statement queued behind a slow one, and a transaction that must not share its connection.
 */
import net from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresDatabase, postgresStorage } from '../../src/storage/postgres.js';
import { statement } from '../../src/storage/sql.js';
import type { WriteFence } from '../../src/storage/fence.js';
import { createTestDatabase } from '../support/databases.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';
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

/** A test database of the block's own and an admin connection to it, closed after the block. */
function useAdminDatabase(prepare?: (admin: pg.Client) => Promise<void>): { url: string; admin: pg.Client } {
  const bed = {} as { url: string; admin: pg.Client };
  beforeAll(async () => {
    bed.url = await createTestDatabase();
    bed.admin = new pg.Client({ connectionString: bed.url });
    await bed.admin.connect();
    await prepare?.(bed.admin);
  });
  afterAll(async () => {
    await bed.admin?.end();
  });
  return bed;
}

/** A database of its own for one test, closed after it whatever the test did. */
async function onDatabase(options: ConstructorParameters<typeof PostgresDatabase>[0], test: (db: PostgresDatabase) => Promise<void>): Promise<void> {
  const db = new PostgresDatabase(options);
  try {
    await test(db);
  } finally {
    await db.close();
  }
}

describe('single statements on pipelined lanes (Postgres)', () => {
  let url: string;
  let port: number;
  let admin: pg.Client;
  /** A pool of two: one lane and one connection kept for transactions. */
  let db: PostgresDatabase;

  /**
   * The suite's own statements reach the server through a proxy of its own, so that counting the
   * writes to the proxy's port counts theirs alone: a shared worker's earlier file may still be
   * closing its own connections to the server.
   */
  let proxy: TcpProxy;

  beforeAll(async () => {
    const direct = await createTestDatabase();
    const target = new URL(direct);
    proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port) });
    url = proxy.urlFor(direct);
    port = proxy.port;
    admin = new pg.Client({ connectionString: direct });
    await admin.connect();
    db = new PostgresDatabase({ connectionString: url, max: 2 });
    await db.query('SELECT 1');
  });
  afterAll(async () => {
    await db.close();
    await admin.end();
    await proxy.close();
  });

  it('statements submitted in one tick leave in one socket write, each with its own answer', async () => {
    const { result, writes } = await writesTo(port, () => Promise.all(Array.from({ length: 20 }, (_, i) => db.query<{ n: number }>(ECHO, [i]))));
    expect(result.map((r) => r.rows[0]!.n)).toEqual(Array.from({ length: 20 }, (_, i) => i));
    // Without the lane, twenty statements on a pool of two make twenty writes; without the cork, the
    // lane still writes each statement on its own.
    expect(writes).toBe(1);
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
      // And two sessions' facts in the same tick share one write on the one lane they ride.
    } finally {
      await storage.close();
    }
  });

  it('a bind that throws on a bad value fails that statement alone; its neighbours in the pipeline answer', async () => {
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

  it('a statement queued behind a slow one on the lane waits for it and gets its own answer', async () => {
    const t0 = performance.now();
    const [slow, quick] = await Promise.all([db.query<{ n: number }>('SELECT 7 AS n FROM pg_sleep(0.3)'), db.query<{ n: number }>(ECHO, [8])]);
    expect(slow.rows).toEqual([{ n: 7 }]);
    expect(quick.rows).toEqual([{ n: 8 }]);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(290);
  });

  it('a connection that dies mid-query fails the statements in flight on it, and the next statement gets a fresh one', async () => {
    const pidOf = async () => (await db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    const inFlight = [db.query('SELECT pg_sleep(5)'), db.query(ECHO, [9])].map((p) => p.then(() => 'answered', (e: Error) => e.message));
    // The lane's backend is the one sleeping.
    let victim: number | undefined;
    for (let i = 0; i < 50 && victim === undefined; i += 1) {
      const { rows } = await admin.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(5)' AND state = 'active'`);
      victim = rows[0]?.pid;
      if (victim === undefined) await new Promise((r) => setTimeout(r, 20));
    }
    expect(victim).toBeDefined();
    await admin.query('SELECT pg_terminate_backend($1)', [victim]);
    const outcomes = await Promise.all(inFlight);
    expect(outcomes).toHaveLength(2);
    for (const outcome of outcomes) expect(outcome).not.toBe('answered');
    expect((await db.query<{ n: number }>(ECHO, [10])).rows).toEqual([{ n: 10 }]);
    expect(await pidOf()).not.toBe(victim);
  });

  /** The pid of the backend running `sql` (a sleep), once it runs. */
  async function backendRunning(sql: string): Promise<number> {
    for (let i = 0; i < 100; i += 1) {
      const { rows } = await admin.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE query = $1 AND state = 'active'`, [sql]);
      if (rows[0]) return rows[0].pid;
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`not running: ${sql}`);
  }

  it('a connection the server ends (57P01, as on a server stop) is never handed to the next statement', async () => {
    // The statement in flight gets the server's FATAL as its answer before pg reads the socket's
    // close; the statement sent right after must not be given that connection (it failed with EPIPE
    // or "Connection terminated" when the lane gave it back to the pool as healthy).
    for (const round of [1, 2, 3]) {
      const sql = `SELECT pg_sleep(5), ${round} AS round`;
      const dying = db.query(sql);
      const victim = await backendRunning(sql);
      const next = dying.then(
        () => {
          throw new Error('the terminated statement answered');
        },
        (error: { code?: string }) => {
          expect(error.code).toBe('57P01');
          return db.query<{ n: number; pid: number }>('SELECT $1::int AS n, pg_backend_pid() AS pid', [round]);
        },
      );
      await admin.query('SELECT pg_terminate_backend($1)', [victim]);
      const { rows } = await next;
      expect(rows[0]!.n).toBe(round);
      expect(rows[0]!.pid).not.toBe(victim);
    }
  });

  it('a checked-out connection the server ends is discarded, not given back to the pool', async () => {
    for (const round of [1, 2, 3]) {
      const sql = `SELECT pg_sleep(5), ${round} AS held`;
      const dying = db.withConnection((conn) => conn.query(sql));
      const victim = await backendRunning(sql);
      const next = dying.then(
        () => {
          throw new Error('the terminated statement answered');
        },
        (error: { code?: string }) => {
          expect(error.code).toBe('57P01');
          return db.withConnection((conn) => conn.query<{ pid: number }>('SELECT pg_backend_pid() AS pid'));
        },
      );
      await admin.query('SELECT pg_terminate_backend($1)', [victim]);
      const { rows } = await next;
      expect(rows[0]!.pid).not.toBe(victim);
    }
  });

  it('a statement on a lane that gets no answer (query_timeout): the lane is discarded, the statements behind it fail, the next gets a fresh connection', async () => {
    const quick = new PostgresDatabase({ connectionString: url, max: 2, timeouts: { statementMs: 0, answerMs: 300 } });
    try {
      const before = (await quick.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      const outcomes = await Promise.allSettled([quick.query('SELECT pg_sleep(2)'), quick.query(ECHO, [1]), quick.query(ECHO, [2])]);
      expect(outcomes[0]).toMatchObject({ status: 'rejected', reason: { message: 'Query read timeout' } });
      // pg destroys the socket to unblock the pipeline: the statements behind fail with it, none hangs.
      for (const behind of outcomes.slice(1)) expect(behind.status).toBe('rejected');
      const after = (await quick.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      expect(after).not.toBe(before);
    } finally {
      await quick.close();
    }
  });

  it('a statement of a transaction or a held connection that gets no answer fails Query read timeout within the bound, and its connection is discarded', async () => {
    // The pool's clients carry no query_timeout (a lane's watchdog bounds lane statements); a
    // checked-out client's statements carry the bound themselves.
    const quick = new PostgresDatabase({ connectionString: url, max: 2, timeouts: { statementMs: 0, answerMs: 300 } });
    try {
      for (const run of [
        () => quick.transaction((tx) => tx.query('SELECT pg_sleep(2)')),
        () => quick.withConnection((conn) => conn.query('SELECT pg_sleep(2)')),
        () => quick.withConnection((conn) => conn.transaction((tx) => tx.query('SELECT pg_sleep(2)'))),
      ]) {
        const started = performance.now();
        await expect(run()).rejects.toThrow('Query read timeout');
        expect(performance.now() - started).toBeLessThan(1_500);
      }
      // The pool of two still serves statements and transactions: no timed-out connection came back.
      expect((await quick.transaction((tx) => tx.query<{ n: number }>(ECHO, [3]))).rows).toEqual([{ n: 3 }]);
      expect((await quick.query<{ n: number }>(ECHO, [4])).rows).toEqual([{ n: 4 }]);
    } finally {
      await quick.close();
    }
  });

  it('a transaction never shares its connection with the statements riding a lane', async () => {
    await db.query('CREATE TABLE IF NOT EXISTS lanes_tx (id int PRIMARY KEY)');
    const lanePids = new Set<number>();
    let txPid = 0;
    await Promise.all([
      db.transaction(async (tx) => {
        txPid = (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
        await tx.query('INSERT INTO lanes_tx VALUES (1)');
        await new Promise((r) => setTimeout(r, 100));
        // A statement of the lane written between BEGIN and COMMIT would see this row; none does.
        throw new Error('roll back');
      }).catch(() => undefined),
      ...Array.from({ length: 10 }, async () => {
        const { rows } = await db.query<{ pid: number; seen: string }>('SELECT pg_backend_pid() AS pid, (SELECT count(*) FROM lanes_tx)::text AS seen FROM pg_sleep(0.01)');
        lanePids.add(rows[0]!.pid);
        expect(rows[0]!.seen).toBe('0');
      }),
    ]);
    expect(txPid).not.toBe(0);
    expect(lanePids.has(txPid)).toBe(false);
    expect((await db.query('SELECT count(*)::int AS n FROM lanes_tx')).rows).toEqual([{ n: 0 }]);
  });
});

/**
 * A drained lane rests on its connection for the next statement (src/storage/pg-lanes.ts `rest`), so
 * serial statements cost no pool checkout each. The resting connection must never be kept from
 * anything else that asks the pool, nor outlive its server connection. A pool of ONE (the lease
 * database's size) is the sharpest case: a connection the lane kept would leave nothing.
 */
describe('the resting lane (Postgres)', () => {
  const bed = useAdminDatabase();

  const within = <T>(ms: number, p: Promise<T>) =>
    Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms))]);
  const pidOf = async (db: PostgresDatabase) => (await db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;

  it('serial statements ride one connection without a checkout each', async () => {
    await onDatabase({ connectionString: bed.url, max: 10 }, async (db) => {
      const pool = (db as unknown as { pool: pg.Pool }).pool;
      const connect = pool.connect.bind(pool);
      let checkouts = 0;
      (pool as unknown as { connect: () => Promise<pg.PoolClient> }).connect = () => ((checkouts += 1), connect());
      const pids = new Set<number>();
      for (let i = 0; i < 20; i += 1) pids.add(await pidOf(db));
      expect(pids.size).toBe(1);
      expect(checkouts).toBe(1);
    });
  });

  it('a transaction on a pool of one gets the connection a lane rests on', async () => {
    await onDatabase({ connectionString: bed.url, max: 1, timeouts: { connectMs: 2_000 } }, async (db) => {
      const lanePid = await pidOf(db);
      // Well inside the rest (1 s), after which the connection would go back to the pool anyway.
      const txPid = await within(500, db.transaction(async (tx) => (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid));
      expect(txPid).toBe(lanePid);
      // And the lane takes it back after.
      expect(await pidOf(db)).toBe(lanePid);
    });
  });

  it('a transaction that asked while the lane was busy gets the connection when the lane drains, not after its rest', async () => {
    await onDatabase({ connectionString: bed.url, max: 1, timeouts: { connectMs: 5_000 } }, async (db) => {
      await pidOf(db);
      const busy = db.query('SELECT pg_sleep(0.1)');
      await new Promise((r) => setImmediate(r));
      const started = performance.now();
      const tx = db.transaction(async (t) => (await t.query('SELECT 1 AS one')).rows);
      await busy;
      expect(await within(3_000, tx)).toEqual([{ one: 1 }]);
      // The rest would have held it REST_MS (1 s) longer.
      expect(performance.now() - started).toBeLessThan(700);
    });
  });

  it('a resting connection the server ends is discarded: the next statement gets a fresh one, even on a pool of one', async () => {
    await onDatabase({ connectionString: bed.url, max: 1, timeouts: { connectMs: 2_000 } }, async (db) => {
      const victim = await pidOf(db);
      await bed.admin.query('SELECT pg_terminate_backend($1)', [victim]);
      // The FATAL and the close reach the idle client; give them a moment to be read.
      await new Promise((r) => setTimeout(r, 100));
      // Well inside the rest (1 s), after which the dead connection would be released anyway.
      const next = await within(500, pidOf(db));
      expect(next).not.toBe(victim);
    });
  });

  it('an unused resting lane goes back to the pool after its rest', async () => {
    await onDatabase({ connectionString: bed.url, max: 2 }, async (db) => {
      const pool = (db as unknown as { pool: pg.Pool }).pool;
      await pidOf(db);
      expect(pool.idleCount).toBe(0);
      await new Promise((r) => setTimeout(r, 1_300));
      expect(pool.idleCount).toBe(1);
    });
  });
});

/**
 * Head-of-line blocking: a lane's statements execute one after another, so one waiting for a row lock
 * holds up the statements behind it on that lane (src/storage/pg-lanes.ts `pick`).
 */
describe('a lane statement waiting on a row lock (Postgres)', () => {
  const bed = useAdminDatabase(async (admin) => {
    await admin.query('CREATE TABLE lanes_lock (id int PRIMARY KEY, v int)');
    await admin.query('INSERT INTO lanes_lock VALUES (1, 0)');
  });

  /** Holds the row lock of `lanes_lock` 1 on its own connection until the answer's `release`. */
  async function holdRowLock(): Promise<{ release: () => Promise<void> }> {
    const holder = new pg.Client({ connectionString: bed.url });
    await holder.connect();
    await holder.query('BEGIN');
    await holder.query('UPDATE lanes_lock SET v = v + 1 WHERE id = 1');
    let released: Promise<void> | undefined;
    return {
      release: () => (released ??= holder.query('COMMIT').then(() => holder.end())),
    };
  }

  const within = <T>(ms: number, p: Promise<T>) =>
    Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms))]);

  it('statements sent after a lane stalled behind a lock take another lane and answer at once', async () => {
    // A pool of three: two lanes.
    const db = new PostgresDatabase({ connectionString: bed.url, max: 3 });
    const lock = await holdRowLock();
    try {
      const blocked = db.query('UPDATE lanes_lock SET v = v + 10 WHERE id = 1');
      await new Promise((r) => setTimeout(r, 150));
      // Other sessions' facts: without the stall rule, every other one joins the blocked lane (the
      // least busy on a tie) and waits for the lock's holder.
      const echoes = Array.from({ length: 10 }, (_, i) => db.query<{ n: number }>(ECHO, [i]));
      const answered = await within(2_000, Promise.all(echoes)).finally(() => lock.release());
      expect(answered.map((r) => r.rows[0]!.n)).toEqual(Array.from({ length: 10 }, (_, i) => i));
      expect((await blocked).rowCount).toBe(1);
    } finally {
      await lock.release();
      await db.close();
    }
  });

  it('no cycle: a transaction of the same pool holding the lock finds a connection and commits, then the lane moves on', async () => {
    // A pool of two: one lane, one connection left for transactions.
    await onDatabase({ connectionString: bed.url, max: 2 }, async (db) => {
      let locked!: () => void;
      const lockTaken = new Promise<void>((r) => (locked = r));
      const tx = db.transaction(async (t) => {
        await t.query('UPDATE lanes_lock SET v = v + 1 WHERE id = 1');
        locked();
        // The lane's statement now waits for this transaction, which still needs its connection.
        await new Promise((r) => setTimeout(r, 150));
        await t.query('SELECT pg_sleep(0.05)');
        return 'committed';
      });
      await lockTaken;
      const laneStatements = [db.query('UPDATE lanes_lock SET v = v + 10 WHERE id = 1'), db.query(ECHO, [1]), db.query(ECHO, [2])];
      expect(await within(5_000, tx)).toBe('committed');
      const [update, one, two] = await within(5_000, Promise.all(laneStatements));
      expect(update!.rowCount).toBe(1);
      expect([one!.rows[0], two!.rows[0]]).toEqual([{ n: 1 }, { n: 2 }]);
    });
  });

  it('two statements of one name pipelined while its first Parse waits on a table lock: each gets its own outcome, not 26000', async () => {
    const db = new PostgresDatabase({ connectionString: bed.url, max: 2, timeouts: { statementMs: 300 } });
    const holder = new pg.Client({ connectionString: bed.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('LOCK TABLE lanes_lock IN ACCESS EXCLUSIVE MODE');
      // Parse analysis of the first waits for the table lock and is cancelled: the name never exists.
      const NAMED = statement('lanes_locked_read', 'SELECT v FROM lanes_lock WHERE id = $1');
      const outcomes = await Promise.allSettled([db.query(NAMED, [1]), db.query(NAMED, [1]), db.query(NAMED, [1])]);
      for (const outcome of outcomes) expect(outcome).toMatchObject({ status: 'rejected', reason: { code: '57014' } });
      await holder.query('COMMIT');
      const again = await Promise.all([db.query(NAMED, [1]), db.query(NAMED, [1])]);
      for (const r of again) expect(r.rowCount).toBe(1);
    } finally {
      await holder.end();
      await db.close();
    }
  });

  it('statements queued behind a lock waiter are not timed out by the client while the lane answers: each gets the server\'s own, certain 57014', async () => {
    // Each UPDATE waits 300 ms for the lock in turn; the fourth answers about 1.2 s after it was sent,
    // past the 700 ms answer bound that pg would count from its submission.
    const db = new PostgresDatabase({ connectionString: bed.url, max: 2, timeouts: { statementMs: 300, answerMs: 700 } });
    const v = async () => (await bed.admin.query<{ v: number }>('SELECT v FROM lanes_lock WHERE id = 1')).rows[0]!.v;
    const before = await v();
    const lock = await holdRowLock();
    try {
      const outcomes = await Promise.allSettled(Array.from({ length: 4 }, () => db.query('UPDATE lanes_lock SET v = v + 10 WHERE id = 1')));
      for (const outcome of outcomes) expect(outcome).toMatchObject({ status: 'rejected', reason: { code: '57014' } });
    } finally {
      await lock.release();
      await db.close();
    }
    // Only the holder's own +1 was stored: every cancelled UPDATE is known not to have happened.
    expect((await v()) - before).toBe(1);
  });

  it('the wait is bounded: a lock never released fails the head with statement_timeout (57014), the statements behind it answer', async () => {
    const db = new PostgresDatabase({ connectionString: bed.url, max: 2, timeouts: { statementMs: 300 } });
    const lock = await holdRowLock();
    try {
      const started = performance.now();
      const [head, behind] = await Promise.allSettled([db.query('UPDATE lanes_lock SET v = v + 10 WHERE id = 1'), db.query(ECHO, [7])]);
      expect(head).toMatchObject({ status: 'rejected', reason: { code: '57014' } });
      expect(behind).toMatchObject({ status: 'fulfilled', value: { rows: [{ n: 7 }] } });
      expect(performance.now() - started).toBeLessThan(3_000);
    } finally {
      await lock.release();
      await db.close();
    }
  });
});
