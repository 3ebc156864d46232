/**
 * The first lease of a session in one statement (issue 14 point 2, "the wait"): a session no core
 * has leased is taken with its startup correction in one round trip and one implicit transaction,
 * not BEGIN + upsert + two correcting UPDATEs + COMMIT; any session that has a lease row goes the
 * transaction path as before. Attacks through the lease store a core uses, on PGlite and a real
 * Postgres server: running turns and spans left in an unleased session by a writer without a fence
 * must be closed by that one statement (remove its correction and the first test fails); two cores
 * racing for the same unleased sessions on separate connections must never both win.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SqlSessionLeases } from '../../src/storage/leases.js';
import { postgresStorage } from '../../src/storage/postgres.js';
import type { SqlDatabase } from '../../src/storage/sql.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { backends, createTestDatabase } from '../support/databases.js';
import { uid, userMessage as user } from '../support/storage-fixtures.js';

const LEASE_MS = 60_000;

/** The storage's database with every statement and transaction sent through it counted. */
function counting(db: SqlDatabase): { db: SqlDatabase; seen: { queries: number; transactions: number } } {
  const seen = { queries: 0, transactions: 0 };
  const wrapped: SqlDatabase = {
    kind: db.kind,
    query: (text, params) => {
      seen.queries += 1;
      return db.query(text, params);
    },
    transaction: (fn) => {
      seen.transactions += 1;
      return db.transaction(fn);
    },
    withConnection: (fn) => db.withConnection(fn),
    close: () => db.close(),
  };
  return { db: wrapped, seen };
}

describe.each(backends)('the first lease of a session on $name', (backend) => {
  let storage: SqlSessionStorage;
  let leases: SqlSessionLeases;
  let seen: { queries: number; transactions: number };

  beforeAll(async () => {
    storage = await backend.create();
    await storage.migrate();
    const counted = counting(storage.db);
    seen = counted.seen;
    leases = new SqlSessionLeases(() => counted.db);
  });
  afterAll(async () => {
    await storage.close();
  });

  function reset(): void {
    seen.queries = 0;
    seen.transactions = 0;
  }

  it('closes the running turns and spans an unfenced writer left in an unleased session, in one statement', async () => {
    const sessionId = uid('ses');
    await storage.createSession({ id: sessionId, workingDirectory: '/work' });
    // A writer without a fence (one process by construction, or a database from before leases)
    // began a turn and a span, and ended without closing them: no lease row exists.
    const turnId = uid('turn');
    await storage.beginTurn({ turnId, sessionId, clientRequestId: uid('req'), modelId: 'scripted/m', resolvedProviderId: 'scripted', resolvedModelName: 'm', appVersion: 'test', messages: [user('hello')] });
    const spanId = uid('span');
    await storage.db.query(
      `INSERT INTO trace_spans (id, trace_id, session_id, turn_id, kind, name, status, started_at) VALUES ($1, $2, $3, $4, 'model_call', 'model', 'running', now())`,
      [spanId, uid('trace'), sessionId, turnId],
    );
    reset();
    const acquired = await leases.acquire(sessionId, 'owner_a', LEASE_MS);
    expect(acquired).toMatchObject({ type: 'acquired', token: 1, corrected: { turns: 1, spans: 1 } });
    expect(seen).toEqual({ queries: 1, transactions: 0 });
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'interrupted', errorCode: 'process_restart' });
    const { rows } = await storage.db.query<{ status: string; error_code: string }>('SELECT status, error_code FROM trace_spans WHERE id = $1', [spanId]);
    expect(rows[0]).toEqual({ status: 'outcome_unknown', error_code: 'process_restart' });
    const lease = await storage.db.query<{ owner_id: string; token: unknown }>('SELECT owner_id, token FROM session_leases WHERE session_id = $1', [sessionId]);
    expect(lease.rows.map((r) => ({ owner: r.owner_id, token: Number(r.token) }))).toEqual([{ owner: 'owner_a', token: 1 }]);
  });

  it('a new session is one statement with nothing corrected; a session with a lease row keeps the transaction path', async () => {
    const sessionId = uid('ses');
    await storage.createSession({ id: sessionId, workingDirectory: '/work' });
    reset();
    expect(await leases.acquire(sessionId, 'owner_a', LEASE_MS)).toMatchObject({ type: 'acquired', token: 1, corrected: { turns: 0, spans: 0 } });
    expect(seen).toEqual({ queries: 1, transactions: 0 });

    // Held, not expired: another owner is refused and the row is left as it was.
    reset();
    expect(await leases.acquire(sessionId, 'owner_b', LEASE_MS)).toMatchObject({ type: 'owned_elsewhere', ownerId: 'owner_a' });
    expect(seen).toEqual({ queries: 1, transactions: 1 });
    // The same owner again: the next token, through the transaction.
    expect(await leases.acquire(sessionId, 'owner_a', LEASE_MS)).toMatchObject({ type: 'acquired', token: 2 });
    // Released, then taken by another owner: the next token again.
    await leases.release(sessionId, 'owner_a', 2);
    expect(await leases.acquire(sessionId, 'owner_b', LEASE_MS)).toMatchObject({ type: 'acquired', token: 3 });
    // No such session: nothing is inserted.
    const missing = uid('ses');
    expect(await leases.acquire(missing, 'owner_a', LEASE_MS)).toEqual({ type: 'not_found' });
    const { rows } = await storage.db.query('SELECT 1 FROM session_leases WHERE session_id = $1', [missing]);
    expect(rows).toEqual([]);
  });

  it('a session created under a lease is one statement: both rows or neither, and another owner is refused', async () => {
    const sessionId = uid('ses');
    const counted = counting(storage.db);
    // Count what the storage sends for the creation: its own handle (a getter), shadowed for the call.
    Object.defineProperty(storage, 'db', { get: () => counted.db, configurable: true });
    let created: Awaited<ReturnType<SqlSessionStorage['createLeasedSession']>>;
    try {
      created = await storage.createLeasedSession({ id: sessionId, workingDirectory: '/work' }, { ownerId: 'owner_a', leaseMs: LEASE_MS });
    } finally {
      delete (storage as unknown as Record<string, unknown>).db;
    }
    expect(counted.seen).toEqual({ queries: 1, transactions: 0 });
    expect(created.session).toMatchObject({ id: sessionId, workingDirectory: '/work' });
    expect(created.lease.token).toBe(1);
    expect(Date.parse(created.lease.expiresAt)).toBeGreaterThan(Date.now() + LEASE_MS / 2);
    expect(await storage.getSession(sessionId)).toMatchObject({ id: sessionId });
    // Held: another owner is refused, the same owner re-acquires under the next token.
    expect(await leases.acquire(sessionId, 'owner_b', LEASE_MS)).toMatchObject({ type: 'owned_elsewhere', ownerId: 'owner_a' });
    expect(await leases.acquire(sessionId, 'owner_a', LEASE_MS)).toMatchObject({ type: 'acquired', token: 2 });

    // The same id again: refused by the database, and neither row of the first creation moves.
    await expect(storage.createLeasedSession({ id: sessionId, workingDirectory: '/elsewhere' }, { ownerId: 'owner_b', leaseMs: LEASE_MS })).rejects.toMatchObject({ code: 'persistence_error' });
    expect(await storage.getSession(sessionId)).toMatchObject({ workingDirectory: '/work' });
    const { rows } = await storage.db.query<{ owner_id: string; token: unknown }>('SELECT owner_id, token FROM session_leases WHERE session_id = $1', [sessionId]);
    expect(rows.map((r) => ({ owner: r.owner_id, token: Number(r.token) }))).toEqual([{ owner: 'owner_a', token: 2 }]);
  });
});

describe('the first lease of a session on a Postgres server, two cores racing', () => {
  it('two owners on separate connections racing for the same unleased sessions never both win', async () => {
    const url = await createTestDatabase();
    const a = postgresStorage({ connectionString: url, max: 2 });
    const b = postgresStorage({ connectionString: url, max: 2 });
    try {
      await a.migrate();
      const ids = Array.from({ length: 20 }, () => uid('ses'));
      for (const id of ids) await a.createSession({ id, workingDirectory: '/work' });
      const results = await Promise.all(ids.map((id) => Promise.all([a.leases.acquire(id, 'owner_a', LEASE_MS), b.leases.acquire(id, 'owner_b', LEASE_MS)])));
      for (const pair of results) {
        const kinds = pair.map((r) => r.type).sort();
        expect(kinds).toEqual(['acquired', 'owned_elsewhere']);
        expect(pair.find((r) => r.type === 'acquired')).toMatchObject({ token: 1 });
      }
      const { rows } = await a.db.query<{ n: unknown }>('SELECT count(*)::int AS n FROM session_leases');
      expect(Number(rows[0]!.n)).toBe(ids.length);
    } finally {
      await a.close();
      await b.close();
    }
  });
});
