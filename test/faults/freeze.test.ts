/**
 * The fault helper's `freeze()` is a process death as far as the database can tell: nothing the
 * frozen core does reaches it afterwards, its lease keeper's renewals and takeover scans included.
 * Two load-only failures came from a "dead" core whose lease keeper lived on: its takeover scan
 * corrected its own running turns between its successor's release of the old leases and the
 * successor's own scan (test/core/session-runtime.test.ts, "restart marks running turns…": the
 * startup correction reported 0 turns), and, left alive by "the process dies after a tool side
 * effect" (test/faults/degradation.test.ts, ownership on even on PGlite), it interrupted the running
 * turn of a later test's session, which has no lease row ("prune watermark write fails…": the
 * checkpoint's trigger turn "is not the running turn").
 */
import { describe, expect, it } from 'vitest';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { faultyStorage } from '../support/faults.js';

describe('faultyStorage.freeze()', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  it('freezes the lease store too: a takeover scan of the frozen storage never reaches the database', async () => {
    const session = await storage.createSession({ id: 'ses_frozen_scan', workingDirectory: process.cwd() });
    await storage.beginTurn({
      turnId: 'turn_frozen_scan',
      sessionId: session.id,
      clientRequestId: 'frozen-scan',
      modelId: 'scripted',
      resolvedProviderId: 'scripted',
      resolvedModelName: 'scripted',
      appVersion: 'test',
      messages: [],
      reserveModelCall: false,
    });
    const faulty = faultyStorage(storage);
    faulty.freeze();
    let settled = false;
    // PGlite runs one statement at a time, in the order asked: had the frozen scan been sent, it
    // would have run (and settled) before the live read below.
    void faulty.leases!.takeOverExpired('dead-owner').finally(() => (settled = true));
    void faulty.leases!.renew('dead-owner', [session.id], 1_000).finally(() => (settled = true));
    expect(await storage.getTurn('turn_frozen_scan')).toMatchObject({ status: 'running' });
    await storage.leases!.ping();
    expect(settled).toBe(false);
    // The live storage's own scan still corrects the turn: the lease store itself is untouched.
    expect(await storage.leases!.takeOverExpired()).toMatchObject({ turns: 1 });
    expect(settled).toBe(false);
  });
});
