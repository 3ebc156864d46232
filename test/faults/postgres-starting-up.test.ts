/**
 * A server that answers `57P03` while connections are opened (integrity3): `the database system is
 * starting up` (a restart or failover in progress) is asked again within the connection bound, like
 * `too many connections`, so the turn completes once the server accepts; `the database system is
 * shutting down` is not waited for: the write fails typed at once, well inside the bound. The
 * answers come over the real wire (`test/support/wire-cut-proxy.ts` answers the startup message with
 * the server's FATAL ErrorResponse), in front of the suite's real Postgres server.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { OpenworkError } from '../../src/errors.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { harness } from '../support/harness.js';
import { within } from '../support/faults.js';
import { startWireCutProxy, type WireCutProxy } from '../support/wire-cut-proxy.js';
import { useProxiedPostgres } from '../support/proxied-postgres.js';

const CONNECT_MS = 4_000;
const timeouts = { statementMs: 2_000, answerMs: 3_000, connectMs: CONNECT_MS };

describe('the server answers 57P03 while a connection is opened', () => {
  const bed = useProxiedPostgres(startWireCutProxy);
  let proxy: WireCutProxy;
  let direct: SqlSessionStorage;

  beforeAll(() => {
    ({ proxy, direct } = bed);
  });

  it('starting up: asked again within the connection bound, the turn completes', async () => {
    const storage = bed.open({ max: 3, timeouts });
    const h = await harness(storage, [{ text: 'up' }]);
    // Every connection the storage holds is gone (a restart), and the next three are refused as starting up.
    await storage.close();
    const refusedBefore = proxy.refused;
    proxy.refuseNext(3, 'the database system is starting up');
    const started = Date.now();
    const { turnId, outcome } = await within(CONNECT_MS * 2, 'the turn after the start-up', h.run('hello'));
    expect(outcome).toEqual({ status: 'completed', finalText: 'up' });
    expect(proxy.refused - refusedBefore).toBe(3);
    expect(Date.now() - started).toBeLessThan(CONNECT_MS);
    expect(await direct.getTurn(turnId)).toMatchObject({ status: 'completed' });
  });

  it('shutting down: not waited for, the write fails persistence_error well inside the bound', async () => {
    const storage = bed.open({ max: 3, timeouts });
    proxy.refuseNext(1_000, 'the database system is shutting down');
    const started = Date.now();
    const error = await storage.createSession({ id: `ses_${Date.now()}`, workingDirectory: '/work' }).then(
      () => null,
      (e: unknown) => e,
    );
    const took = Date.now() - started;
    proxy.refuseNext(0, '');
    expect(error).toBeInstanceOf(OpenworkError);
    expect((error as OpenworkError).code).toBe('persistence_error');
    expect((error as OpenworkError).message).toContain('shutting down');
    expect(took).toBeLessThan(CONNECT_MS / 2);
  });
});
