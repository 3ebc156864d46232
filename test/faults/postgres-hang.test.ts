/**
 * A database that hangs instead of failing (faults-review): the network to Postgres stops
 * forwarding (a TCP proxy that stops reading, `test/support/tcp-proxy.ts`) in the middle of a step.
 * `pg` alone waits forever for an answer, so the turn's write, the session's next commands and the
 * lease renewal would all wait until the host restarted. With the adapter's bounded waits
 * (`src/storage/postgres-timeouts.ts`) the write fails with a typed `persistence_error`, commands are
 * answered, no tool runs twice, and the session works again once the network does; the late bytes
 * that arrive after the hang never write under a lease another core took over meanwhile.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore, type Core } from '../../src/core.js';
import { OpenworkError } from '../../src/errors.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { defineTool } from '../../src/services/tools/define.js';
import { postgresStorage } from '../../src/storage/postgres.js';
import { DEFAULT_STATEMENT_MS } from '../../src/storage/postgres-timeouts.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { harness } from '../support/harness.js';
import { assertNoRunningAfterTerminal, assertStoredInvariants } from '../support/invariants.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';
import { within } from '../support/faults.js';
import { useProxiedPostgres } from '../support/proxied-postgres.js';

/** Short bounds, so that a hang costs the test a second, not the default half minute. */
const timeouts = { statementMs: 300, answerMs: 700, connectMs: 700 };

/** How long a bounded wait may take here: a few answer timeouts in a row, never "until the test times out". */
const BOUNDED_MS = 8_000;

/** Settles `promise` into its error (or null when it resolved). */
async function errorOf(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
    return null;
  } catch (error) {
    return error;
  }
}

/** A tool that records each run and, on its first, makes the network hang before it returns. */
function hangingTool(ran: number[], proxy: TcpProxy) {
  return defineTool({
    name: 'spy',
    description: 'Records its run; the network hangs while it runs.',
    parameters: z.object({ n: z.number() }),
    execute: ({ n }) => {
      ran.push(n);
      proxy.stall();
      return `ran ${n}`;
    },
  });
}

describe('the network to Postgres hangs mid-step', () => {
  const bed = useProxiedPostgres(startTcpProxy, { beforeClose: (p) => p.resume() });
  let proxy: TcpProxy;
  let storage: SqlSessionStorage;
  let direct: SqlSessionStorage;

  beforeAll(() => {
    ({ proxy, direct } = bed);
    storage = bed.open({ max: 4, timeouts });
  });

  it('during the tool result commit: persistence_error within the bound, commands answered meanwhile, the tool ran once, the session works after', async () => {
    const ran: number[] = [];
    const h = await harness(storage, [{ toolCalls: [{ name: 'spy', arguments: { n: 1 }, callId: 'spy_1' }] }, { text: 'back' }], {
      tools: [hangingTool(ran, proxy)],
      ownership: { leaseMs: 60_000 },
    });
    const turnId = await h.start('first');
    const outcome = await within(BOUNDED_MS, 'the turn whose tool result write hangs', h.session.waitForTurn(turnId));
    expect(outcome).toMatchObject({ status: 'failed', code: 'persistence_error' });
    expect(ran).toEqual([1]);
    expect(h.session.status()).toMatchObject({ type: 'system_error' });

    // While it still hangs: a read command fails typed, a new turn is accepted and fails typed, no model call.
    const listed = await within(BOUNDED_MS, 'listSessions during the hang', errorOf(h.core.listSessions()));
    expect(listed).toBeInstanceOf(OpenworkError);
    expect((listed as OpenworkError).code).toBe('persistence_error');
    // A start is refused typed (its sub-agent reconciliation reads first) or accepted and failed typed.
    let during: unknown;
    try {
      const id = await within(BOUNDED_MS, 'a turn start during the hang', h.start('during'));
      during = await within(BOUNDED_MS, 'a turn started during the hang', h.session.waitForTurn(id));
    } catch (error) {
      expect(error).toBeInstanceOf(OpenworkError);
      during = { status: 'failed', code: (error as OpenworkError).code };
    }
    expect(during).toMatchObject({ status: 'failed', code: 'persistence_error' });
    expect(h.model.requests).toHaveLength(1);

    proxy.resume();
    const next = await within(BOUNDED_MS, 'the turn after the hang', h.run('again'));
    expect(next.outcome).toEqual({ status: 'completed', finalText: 'back' });
    expect(ran).toEqual([1]);
    const stored = await assertStoredInvariants(direct, h.session.sessionId);
    assertNoRunningAfterTerminal(stored.turns, h.session.status());
    expect(await direct.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'persistence_error' });
    expect(h.session.status()).toEqual({ type: 'idle' });
  });

  it('the adapter bounds every wait by default: the server cancels a statement past statement_timeout', async () => {
    const plain = postgresStorage({ connectionString: bed.url, max: 1 });
    try {
      const { rows } = await plain.db.query<{ statement_timeout: string; idle: string }>(
        `SELECT current_setting('statement_timeout') AS statement_timeout, current_setting('idle_in_transaction_session_timeout') AS idle`,
      );
      expect(rows[0]).toEqual({ statement_timeout: `${DEFAULT_STATEMENT_MS / 1000}s`, idle: '1min' });
    } finally {
      await plain.close();
    }
  });

  it('a bad timeout is a configuration error at once', () => {
    expect(() => postgresStorage({ connectionString: bed.url, timeouts: { answerMs: -1 } })).toThrow(
      expect.objectContaining({ code: 'configuration_invalid' }) as Error,
    );
  });
});

describe('the network hangs past the lease and another core takes the session over', () => {
  const bed = useProxiedPostgres(startTcpProxy, { directMax: 4, beforeClose: (p) => p.resume() });
  let proxy: TcpProxy;
  let stale: SqlSessionStorage;
  let direct: SqlSessionStorage;
  const cores: Core[] = [];

  beforeAll(() => {
    ({ proxy, direct } = bed);
    stale = bed.open({ max: 4, timeouts: { statementMs: 2_000, answerMs: 6_000, connectMs: 6_000 } });
  });

  // Registered after the bed's clean-up, so it runs first: the cores stop before their storages close.
  afterAll(async () => {
    for (const core of cores) await core.shutdown().catch(() => undefined);
  });

  it('the late write of the old owner reaches the server after the takeover and is fenced: nothing of it is stored', async () => {
    const ran: number[] = [];
    const leaseMs = 600;
    const oldCore = await createCore({
      storage: stale,
      model: scriptedModel([{ toolCalls: [{ name: 'spy', arguments: { n: 1 }, callId: 'spy_1' }] }]),
      tools: [hangingTool(ran, proxy)],
      closeStorageOnShutdown: false,
      worldState: false,
      ownership: { leaseMs, scanIntervalMs: 200, ownerId: 'old-owner' },
    });
    cores.push(oldCore);
    const newCore = await createCore({
      storage: direct,
      model: scriptedModel([{ text: 'taken over' }]),
      tools: [],
      closeStorageOnShutdown: false,
      worldState: false,
      ownership: { leaseMs, scanIntervalMs: 200, ownerId: 'new-owner' },
    });
    cores.push(newCore);
    const session = await oldCore.createSession({ workingDirectory: process.cwd() });
    const { turnId } = await session.startTurn({ clientRequestId: 'hang-1', input: [{ type: 'text', text: 'first' }] });

    // The tool ran and the network hangs with its result's statement on the wire. The new core's
    // scan sees the expired lease and corrects the turn; then it loads and runs the session.
    for (let i = 0; i < 400 && ran.length === 0; i += 1) await new Promise((r) => setTimeout(r, 10));
    expect(ran).toEqual([1]);
    let taken = null;
    for (let i = 0; i < 100; i += 1) {
      const turn = await direct.getTurn(turnId);
      if (turn?.status === 'interrupted') {
        taken = turn;
        break;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(taken).toMatchObject({ status: 'interrupted', errorCode: 'process_restart' });
    const moved = await newCore.loadSession(session.sessionId);
    const again = await moved.startTurn({ clientRequestId: 'hang-2', input: [{ type: 'text', text: 'again' }] });
    expect(await moved.waitForTurn(again.turnId)).toEqual({ status: 'completed', finalText: 'taken over' });
    const before = await direct.listMessages(session.sessionId);

    // The network comes back: whatever the old owner had on the wire, or sends now, is refused.
    proxy.resume();
    const outcome = await within(BOUNDED_MS, "the old owner's turn", session.waitForTurn(turnId));
    expect(outcome.status).toBe('failed');
    expect(['ownership_lost', 'persistence_error']).toContain((outcome as { code: string }).code);
    await new Promise((r) => setTimeout(r, 300));
    expect(await direct.listMessages(session.sessionId)).toEqual(before);
    expect(ran).toEqual([1]);
    // The tool call has no stored result; the turn that ran after the takeover is the last word.
    expect(before.filter((m) => m.role === 'tool')).toEqual([]);
    expect(await direct.getTurn(again.turnId)).toMatchObject({ status: 'completed' });
  });
});
