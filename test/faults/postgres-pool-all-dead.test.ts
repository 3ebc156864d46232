/**
 * Every pooled connection dead at once (integrity-outage, point 2). A fact write whose outcome is
 * unknown runs again at most twice (`src/storage/sql/outcome-unknown.ts`), each time on a "fresh"
 * lane; but a fresh lane is whatever idle client the pool hands out, and after a server restart (or a
 * middlebox that forgot every connection) each of them is dead too. With more than two of them, the
 * third dead connection failed an acknowledged tool result `persistence_error` although the database
 * was healthy again. Now one dead connection makes every connection opened before it suspect: the
 * lanes stop taking statements on them and a checkout discards them, so the repeat opens a new one.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postgresStorage } from '../../src/storage/postgres.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { harness } from '../support/harness.js';
import { assertStoredInvariants } from '../support/invariants.js';
import { spyTool, within } from '../support/faults.js';
import { startPostgres, type PostgresServer } from '../support/postgres-server.js';
import { startWireCutProxy } from '../support/wire-cut-proxy.js';
import { useProxiedPostgres } from '../support/proxied-postgres.js';

const timeouts = { statementMs: 2_000, answerMs: 3_000, connectMs: 5_000 };
const BOUNDED_MS = 20_000;
const POOL = 8;
const oneCall = [{ toolCalls: [{ name: 'spy', arguments: { n: 1 }, callId: 'spy_1' }] }, { text: 'done' }];

/** Opens as many connections as the lanes allow at once and leaves them idle in the pool. */
async function fillPool(storage: SqlSessionStorage): Promise<void> {
  await Promise.all(Array.from({ length: 4 * POOL }, () => storage.getTurn('turn_none')));
}

async function backends(url: string, application: string): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1`, [application]);
    return rows[0]!.n;
  } finally {
    await client.end();
  }
}

async function assertCompletedOnce(direct: SqlSessionStorage, sessionId: string, turnId: string): Promise<void> {
  const stored = await assertStoredInvariants(direct, sessionId);
  expect(stored.messages.filter((m) => m.turnId === turnId && m.role === 'tool').map((m) => m.providerCallId)).toEqual(['spy_1']);
  expect(await direct.getTurn(turnId)).toMatchObject({ status: 'completed', toolCallCount: 1, modelCallCount: 2, modelSubmissionCount: 2 });
}

describe('every pooled connection died while a tool ran', () => {
  const bed = useProxiedPostgres(startWireCutProxy);

  it('killed silently by a middlebox, more than two of them: the result write succeeds on a new connection, the tool ran once', async () => {
    const application = `silent_${Date.now()}`;
    const storage = bed.open({ max: POOL, timeouts, pool: { application_name: application } });
    await fillPool(storage);
    // More dead connections than a fact has repeats: the case that failed before.
    expect(await backends(bed.url, application)).toBeGreaterThan(3);
    const ran: number[] = [];
    const h = await harness(storage, oneCall, { tools: [spyTool(ran, () => bed.proxy.severSilently())], ownership: { leaseMs: 60_000 } });
    const { turnId, outcome } = await within(BOUNDED_MS, 'the turn whose every connection died', h.run('go'));
    expect(outcome).toEqual({ status: 'completed', finalText: 'done' });
    expect(ran).toEqual([1]);
    await assertCompletedOnce(bed.direct, h.session.sessionId, turnId);
    expect(h.session.status()).toEqual({ type: 'idle' });
  });
});

describe('the server restarted while a tool ran', () => {
  let server: PostgresServer;
  let direct: SqlSessionStorage;

  beforeAll(async () => {
    // Durable: the server is crashed under acknowledged writes, which a non-durable server may lose.
    server = await startPostgres({ durable: true });
    direct = postgresStorage({ connectionString: server.url, max: 2 });
    await direct.migrate();
  });

  afterAll(async () => {
    await direct?.close().catch(() => undefined);
    server?.stop();
  });

  it('every pooled connection is dead and the process has not read a goodbye: the result write succeeds, the tool ran once', async () => {
    const application = `restart_${Date.now()}`;
    const storage = postgresStorage({ connectionString: server.url, max: POOL, timeouts, pool: { application_name: application } });
    let core: { shutdown(): Promise<void> } | undefined;
    try {
      await fillPool(storage);
      expect(await backends(server.url, application)).toBeGreaterThan(3);
      const ran: number[] = [];
      // Synchronous: the event loop does not run while the server restarts, so no pooled client has
      // noticed its connection's end when the result write is given one.
      const h = await harness(storage, oneCall, { tools: [spyTool(ran, () => server.crashRestart())], ownership: { leaseMs: 60_000 } });
      core = h.core;
      const { turnId, outcome } = await within(BOUNDED_MS, 'the turn across the restart', h.run('go'));
      expect(outcome).toEqual({ status: 'completed', finalText: 'done' });
      expect(ran).toEqual([1]);
      await assertCompletedOnce(direct, h.session.sessionId, turnId);
      expect(h.session.status()).toEqual({ type: 'idle' });
    } finally {
      // Even after a failed expectation: a core left running would renew its leases into the server's stop.
      await core?.shutdown().catch(() => undefined);
      await storage.close().catch(() => undefined);
    }
  });
});
