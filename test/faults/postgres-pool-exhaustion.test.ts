/**
 * Pool exhaustion behind a slow statement (faults-review). Another client of the database holds a
 * lock every message write waits for (an administrator's long `LOCK TABLE`, a migration, a stuck
 * transaction of another application), while more sessions than the pool has connections start
 * turns: every pooled connection blocks in a write and the other writes queue for a connection.
 * `pg` alone waits as long as the lock is held, with every session wedged; with the adapter's
 * bounds the server cancels the blocked statements (`statement_timeout`) and the queued ones give
 * up waiting for a connection, so every turn ends typed (`persistence_error`) within a bound, and
 * every session completes its next turn once the lock is gone.
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
const BOUNDED_MS = 10_000;

describe('a pool exhausted behind a statement that waits for a lock', () => {
  let url: string;
  let storage: SqlSessionStorage;
  let core: Core;
  let sessions: SessionHandle[] = [];
  let n = 0;

  beforeAll(async () => {
    url = await createTestDatabase();
    storage = postgresStorage({ connectionString: url, max: 2, timeouts: { statementMs: 500, answerMs: 1_500, connectMs: 1_000 } });
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
    const { turnId } = await s.startTurn({ clientRequestId: `pool-${n}`, input: [{ type: 'text', text }] });
    return { turnId, outcome: await s.waitForTurn(turnId) };
  };

  it(`${SESSIONS} sessions on a pool of 2 while another client holds the messages table: every turn ends typed, all work after`, async () => {
    const locker = new pg.Client({ connectionString: url });
    await locker.connect();
    let locked = true;
    try {
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE messages IN EXCLUSIVE MODE');
      const results = await within(
        BOUNDED_MS,
        'the turns behind the lock (the blocked pool wedged them)',
        Promise.all(sessions.map((s, i) => turn(s, `blocked ${i}`).catch((error: unknown) => ({ turnId: null, outcome: { status: 'refused', error } })))),
      );
      for (const { outcome } of results) {
        if (outcome.status === 'refused') {
          // A start refused typed (it read before accepting) is an answer too.
          expect((outcome as { error: { code?: string } }).error.code).toBe('persistence_error');
        } else {
          expect(outcome).toMatchObject({ status: 'failed', code: 'persistence_error' });
          expect((outcome as { message: string }).message).toMatch(/statement timeout|timeout exceeded when trying to connect|Query read timeout/);
        }
      }
      // At least one was cancelled by the server itself: its write is known not to have happened.
      expect(results.some((r) => /statement timeout/.test((r.outcome as { message?: string }).message ?? ''))).toBe(true);
      await locker.query('ROLLBACK');
      locked = false;
    } finally {
      if (locked) await locker.query('ROLLBACK').catch(() => undefined);
      await locker.end();
    }

    const after = await within(BOUNDED_MS, 'the turns after the lock', Promise.all(sessions.map((s, i) => turn(s, `free ${i}`))));
    after.forEach(({ outcome }, i) => expect(outcome).toEqual({ status: 'completed', finalText: `free ${i}` }));
    for (const s of sessions) {
      const stored = await assertStoredInvariants(storage, s.sessionId);
      assertNoRunningAfterTerminal(stored.turns, s.status());
      expect(s.status()).toEqual({ type: 'idle' });
      // Nothing of a blocked turn was stored: the server cancelled each of its writes whole.
      const texts = stored.messages.filter((m) => m.role === 'user').map((m) => JSON.stringify(m.content));
      expect(texts.some((t) => t.includes('blocked'))).toBe(false);
    }
  });
});
