/**
 * The server answers a fact write with a deadlock error (faults-review). Another client of the
 * database (an administrator's script, another application, a takeover in another runtime process)
 * holds the session row while the tool result's write waits for it, then asks for a lock the write
 * already holds: Postgres breaks the cycle by rolling the waiting write back whole (40P01). That
 * write is known to have written nothing, so it runs again once the other transaction's lock is
 * gone, and the turn completes; before, the turn failed `persistence_error` for a conflict that left
 * nothing to repair. The tool runs once and its result is stored once.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool } from '../../src/services/tools/define.js';
import { postgresStorage } from '../../src/storage/postgres.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { createTestDatabase } from '../support/databases.js';
import { harness } from '../support/harness.js';
import { assertNoRunningAfterTerminal, assertStoredInvariants } from '../support/invariants.js';

describe('a deadlock on a fact write', () => {
  let url: string;
  let storage: SqlSessionStorage;
  let other: pg.Client;

  beforeAll(async () => {
    url = await createTestDatabase();
    storage = postgresStorage({ connectionString: url, max: 4 });
    await storage.migrate();
    other = new pg.Client({ connectionString: url, application_name: 'deadlock-other' });
    await other.connect();
  });

  afterAll(async () => {
    await other.end().catch(() => undefined);
    await storage.close().catch(() => undefined);
  });

  it('the tool result write chosen as the deadlock victim runs again: the turn completes, the result stored once', async () => {
    const ran: number[] = [];
    let sessionId = '';
    const tool = defineTool({
      name: 'spy',
      description: 'Records its run; meanwhile another client takes the session row.',
      parameters: z.object({ n: z.number() }),
      execute: async ({ n }) => {
        ran.push(n);
        await other.query('BEGIN');
        await other.query('SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE', [sessionId]);
        return `ran ${n}`;
      },
    });
    const h = await harness(storage, [{ toolCalls: [{ name: 'spy', arguments: { n: 1 }, callId: 'spy_1' }] }, { text: 'done' }], {
      tools: [tool],
      ownership: false,
    });
    sessionId = h.session.sessionId;
    const turnId = await h.start('go');

    // The result's write now holds its table locks and waits for the session row.
    const watcher = new pg.Client({ connectionString: url });
    await watcher.connect();
    try {
      let waiting = false;
      for (let i = 0; i < 500 && !waiting; i += 1) {
        const { rows } = await watcher.query(
          `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND application_name <> 'deadlock-other'`,
        );
        waiting = rows.length > 0;
        if (!waiting) await new Promise((r) => setTimeout(r, 10));
      }
      expect(waiting).toBe(true);
    } finally {
      await watcher.end();
    }
    // Closing the cycle: the write waited first, so after deadlock_timeout it is the victim.
    await other.query('LOCK TABLE messages IN SHARE MODE');
    await other.query('ROLLBACK');

    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'done' });
    expect(ran).toEqual([1]);
    const stored = await assertStoredInvariants(storage, h.session.sessionId);
    assertNoRunningAfterTerminal(stored.turns, h.session.status());
    expect(stored.messages.filter((m) => m.role === 'tool')).toHaveLength(1);
  });
});
