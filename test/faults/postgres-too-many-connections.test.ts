/**
 * The server refuses connections: `too many connections` (faults-review). The runtime's role may
 * open only three connections (`CONNECTION LIMIT`, the same SQLSTATE 53300 a server at
 * `max_connections` answers), one of them the lease connection, while its pool may open six and
 * six sessions start turns at once. A refused connection sent no statement, so the adapter asks
 * again within its connection bound (`src/storage/postgres-connect.ts`) until a connection is free:
 * every turn completes. Before, each write that met the limit failed its turn `persistence_error`,
 * even one by one (the pool keeps idle connections and opens more when its clients are busy).
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../src/core.js';
import type { SessionHandle } from '../../src/session-handle.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { postgresStorage } from '../../src/storage/postgres.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { createTestDatabase } from '../support/databases.js';
import { assertNoRunningAfterTerminal, assertStoredInvariants } from '../support/invariants.js';
import { within, echoLastUser } from '../support/faults.js';

const SESSIONS = 6;
const BOUNDED_MS = 15_000;

describe('the server answers too many connections', () => {
  let storage: SqlSessionStorage;
  let core: Core;
  const sessions: SessionHandle[] = [];
  let n = 0;

  beforeAll(async () => {
    const url = await createTestDatabase();
    const role = `limited_${Math.random().toString(36).slice(2, 10)}`;
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    try {
      await admin.query(`CREATE ROLE ${role} LOGIN CONNECTION LIMIT 3`);
      await admin.query(`GRANT ALL ON SCHEMA public TO ${role}`);
    } finally {
      await admin.end();
    }
    const limited = new URL(url);
    limited.username = role;
    // Migrated by the role itself, so that it owns the tables it writes.
    storage = postgresStorage({ connectionString: limited.toString(), max: SESSIONS, timeouts: { statementMs: 2_000, answerMs: 4_000, connectMs: 5_000 } });
    await storage.migrate();
    core = await createCore({ storage, model: scriptedModel(echoLastUser), tools: [], closeStorageOnShutdown: false, worldState: false, ownership: { leaseMs: 60_000 } });
    for (let i = 0; i < SESSIONS; i += 1) sessions.push(await core.createSession({ workingDirectory: process.cwd() }));
  });

  afterAll(async () => {
    await core?.shutdown().catch(() => undefined);
    await storage?.close().catch(() => undefined);
  });

  const turn = async (s: SessionHandle, text: string) => {
    n += 1;
    const { turnId } = await s.startTurn({ clientRequestId: `conn-${n}`, input: [{ type: 'text', text }] });
    return s.waitForTurn(turnId);
  };

  it(`${SESSIONS} sessions at once on a role limited to 3 connections: refused connections are asked for again, every turn completes`, async () => {
    const outcomes = await within(
      BOUNDED_MS,
      'the turns at the connection limit',
      Promise.all(
        sessions.map((s, i) =>
          turn(s, `at once ${i}`).catch((error: unknown) => ({ status: 'refused' as const, code: (error as { code?: string }).code })),
        ),
      ),
    );
    outcomes.forEach((outcome, i) => expect(outcome).toEqual({ status: 'completed', finalText: `at once ${i}` }));

    // One by one, each session completes its next turn on the connections the limit allows.
    for (const [i, s] of sessions.entries()) {
      expect(await within(BOUNDED_MS, `session ${i}'s next turn`, turn(s, `later ${i}`))).toEqual({ status: 'completed', finalText: `later ${i}` });
      const stored = await assertStoredInvariants(storage, s.sessionId);
      assertNoRunningAfterTerminal(stored.turns, s.status());
      expect(s.status()).toEqual({ type: 'idle' });
    }
  });
});
