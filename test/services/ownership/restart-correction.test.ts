/**
 * A core restarted under a stable owner id (trust-lease, point 2) frees its previous incarnation's
 * leases and corrects the running turns no live process owns. It once did so in two statements: a
 * release, then the takeover scan. Another core's scan that ran between them took the freed
 * sessions and closed their turns itself, and the restart reported 0 corrected turns while its own
 * previous incarnation's turn had been corrected. The store below lets a second core scan before
 * and after every statement of the restarting one, on a real Postgres: the report must count the
 * turn, whatever order the statements land in.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeaseKeeper, resolveOwnership } from '../../../src/services/ownership/lease-keeper.js';
import type { SessionLeaseStore } from '../../../src/storage/leases.js';
import { postgresStorage } from '../../../src/storage/postgres.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { createTestDatabase } from '../../support/databases.js';

let storage: SqlSessionStorage;
let other: SqlSessionStorage;

beforeAll(async () => {
  const url = await createTestDatabase();
  storage = postgresStorage({ connectionString: url, max: 2 });
  other = postgresStorage({ connectionString: url, max: 2 });
  await storage.migrate();
});

afterAll(async () => {
  await storage.close();
  await other.close();
});

/** The restarting core's lease store, with the other core's takeover scan before and after each of its statements. */
function interleaved(leases: SessionLeaseStore, scan: () => Promise<unknown>): SessionLeaseStore {
  return new Proxy(leases, {
    get(target, prop, receiver) {
      const value: unknown = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function') return value;
      return async (...args: unknown[]) => {
        await scan();
        const result: unknown = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        await scan();
        return result;
      };
    },
  });
}

describe("a restart under a stable owner id and another core's takeover scan", () => {
  it("counts its previous incarnation's running turn, whichever core's statement lands first", async () => {
    const session = await storage.createSession({ id: 'ses_restart_race', workingDirectory: process.cwd() });
    const acquired = await storage.leases.acquire(session.id, 'pod-a', 60_000);
    expect(acquired).toMatchObject({ type: 'acquired' });
    await storage.beginTurn({
      turnId: 'turn_restart_race',
      sessionId: session.id,
      clientRequestId: 'restart-race',
      modelId: 'scripted',
      resolvedProviderId: 'scripted',
      resolvedModelName: 'scripted',
      appVersion: 'test',
      messages: [],
      reserveModelCall: false,
    });

    // The other core's periodic scan, as `LeaseKeeper.scanNow` sends it.
    const otherScans: number[] = [];
    const scan = async () => otherScans.push((await other.leases.takeOverExpired('pod-b')).turns);
    // pod-a restarted: its previous incarnation's lease is still live on the database.
    const keeper = new LeaseKeeper(interleaved(storage.leases, scan), resolveOwnership({ ownerId: 'pod-a', leaseMs: 60_000 }), () => undefined);
    const report = await keeper.startupCorrection();

    expect(report).toEqual({ turns: 1, spans: 0 });
    expect(otherScans.every((n) => n === 0)).toBe(true);
    expect(keeper.stats()).toMatchObject({ scans: 1, correctedTurns: 1, takenOver: 1 });
    expect(await storage.getTurn('turn_restart_race')).toMatchObject({ status: 'interrupted', errorCode: 'process_restart' });
    // Freed: nobody owns the session, and the old incarnation's token is fenced off.
    const { rows } = await storage.db.query<{ owner_id: string | null; token: number }>('SELECT owner_id, token FROM session_leases WHERE session_id = $1', [session.id]);
    expect(rows[0]!.owner_id).toBeNull();
    expect(Number(rows[0]!.token)).toBeGreaterThan(acquired.type === 'acquired' ? acquired.token : Infinity);
  });

  it('frees the leases of sessions without a running turn as well', async () => {
    const idle = await storage.createSession({ id: 'ses_restart_idle', workingDirectory: process.cwd() });
    await storage.leases.acquire(idle.id, 'pod-c', 60_000);
    const keeper = new LeaseKeeper(storage.leases, resolveOwnership({ ownerId: 'pod-c', leaseMs: 60_000 }), () => undefined);
    expect(await keeper.startupCorrection()).toEqual({ turns: 0, spans: 0 });
    const { rows } = await storage.db.query<{ owner_id: string | null }>('SELECT owner_id FROM session_leases WHERE session_id = $1', [idle.id]);
    expect(rows).toEqual([{ owner_id: null }]);
    // Another core takes it at once, without waiting for an expiry.
    expect(await other.leases.acquire(idle.id, 'pod-d', 60_000)).toMatchObject({ type: 'acquired' });
  });
});
