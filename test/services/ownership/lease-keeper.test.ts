/**
 * The takeover scan's patience (issue 15.3 with 13.1): a lease that expired while nobody could
 * renew it (the database was down, or this very process was stalled) says nothing about its owner
 * being dead, so the scan takes nothing over until it has watched the database for a whole lease
 * period. A fake lease store and clock make the order of looks exact; the outage soak and the
 * scale-out tests show the same on a real Postgres.
 */
import { describe, expect, it } from 'vitest';
import { LeaseKeeper, resolveOwnership } from '../../../src/services/ownership/lease-keeper.js';
import type { SessionLeaseStore } from '../../../src/storage/leases.js';

function fakeStore() {
  const calls: string[] = [];
  let down = false;
  const answer = async <T>(what: string, value: T): Promise<T> => {
    calls.push(what);
    if (down) throw new Error('connect ECONNREFUSED');
    return value;
  };
  const store: SessionLeaseStore = {
    acquire: () => answer('acquire', { type: 'acquired' as const, token: 1, expiresAt: new Date().toISOString(), corrected: { turns: 0, spans: 0 } }),
    renew: (_owner, ids) => answer('renew', ids.map((sessionId) => ({ sessionId, token: 1 }))),
    release: () => answer('release', undefined),
    releaseAll: () => answer('releaseAll', 0),
    takeOverExpired: () => answer('takeOver', { turns: 0, spans: 0, sessions: [] }),
    ping: () => answer('ping', undefined),
  };
  return { store, calls, setDown: (d: boolean) => (down = d) };
}

describe('the takeover scan waits a lease period after it could not watch the database', () => {
  const leaseMs = 300; // renewals every 100 ms, a stall is a gap of more than 200 ms

  async function keeperAt() {
    const fake = fakeStore();
    let now = 0;
    const keeper = new LeaseKeeper(fake.store, resolveOwnership({ leaseMs, ownerId: 'core-b' }), () => undefined, () => now);
    await keeper.acquire('ses_b');
    /** One look of each timer at `t`: the renewal, then the scan; answers which statements the scan made. */
    const lookAt = async (t: number) => {
      now = t;
      await keeper.renewNow();
      const before = fake.calls.length;
      await keeper.scanNow();
      return fake.calls.slice(before);
    };
    return { fake, lookAt };
  }

  it('a process stalled past the lease (a blocked event loop, a pause) scans only after watching for a lease period', async () => {
    const { lookAt } = await keeperAt();
    expect(await lookAt(0)).toEqual(['takeOver']);
    expect(await lookAt(100)).toEqual(['takeOver']);
    // Stalled for two seconds: every lease on the database, a sibling core's in this process too, expired.
    expect(await lookAt(2_100)).toEqual(['ping']);
    expect(await lookAt(2_200)).toEqual(['ping']);
    expect(await lookAt(2_300)).toEqual(['ping']);
    // A whole lease period of looks since the first one after the stall: live owners have renewed.
    expect(await lookAt(2_400)).toEqual(['takeOver']);
  });

  it('an outage it saw: nothing is taken over until the database has answered for a lease period', async () => {
    const { fake, lookAt } = await keeperAt();
    expect(await lookAt(0)).toEqual(['takeOver']);
    fake.setDown(true);
    expect(await lookAt(100)).toEqual(['ping']);
    expect(await lookAt(200)).toEqual(['ping']);
    fake.setDown(false);
    expect(await lookAt(300)).toEqual(['ping']);
    expect(await lookAt(500)).toEqual(['ping']);
    expect(await lookAt(600)).toEqual(['takeOver']);
  });

  it('looks at the usual pace never count as a stall', async () => {
    const { lookAt } = await keeperAt();
    for (let t = 0; t <= 2_000; t += 190) expect(await lookAt(t)).toEqual(['takeOver']);
  });
});
