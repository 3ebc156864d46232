/**
 * Issue 13.1: a database outage never wedges a session. A dedicated Postgres server is killed
 * (`pg_ctl -m immediate`) again and again while several sessions are in the middle of a turn:
 * restarted at once, or left stopped across two turn attempts of every session. After each outage
 * every session completes its next turn, and no session is left with a `running` row.
 *
 * PG_OUTAGES (default 10) sets the number of outages; `npm run crash` runs 60.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../src/core.js';
import { StorageError } from '../../src/errors.js';
import { UNRECORDED_END_MESSAGE } from '../../src/services/turn-actors.js';
import type { SessionStorage } from '../../src/storage/storage.js';
import type { SessionHandle } from '../../src/session-handle.js';
import type { ModelRequest } from '../../src/services/model/port.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { postgresStorage } from '../../src/storage/postgres.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { assertStoredInvariants } from '../support/invariants.js';
import { startPostgres, type PostgresServer } from '../support/postgres-server.js';

const OUTAGES = Number(process.env.PG_OUTAGES ?? 10);
/** Sessions per runtime: one runtime with sub-agents (its starts reconcile first), one without. */
const PER_CORE = 2;
const SESSIONS = 2 * PER_CORE;

/** The model answers each request with its last user text, whichever session's call comes first. */
function lastUserText(request: ModelRequest): string {
  const user = request.messages.filter((m) => m.role === 'user').at(-1);
  return user && user.role === 'user' ? user.content.map((b) => ('text' in b ? b.text : '')).join('') : '';
}

let request = 0;
const text = (t: string) => ({ clientRequestId: `soak-${(request += 1)}`, input: [{ type: 'text' as const, text: t }] });

describe('Postgres outages mid-turn (issue 13.1)', () => {
  let server: PostgresServer;
  let storage: SqlSessionStorage;
  let cores: Core[] = [];
  const model = scriptedModel([]);

  beforeAll(async () => {
    // Default durability: with synchronous_commit off, `pg_ctl -m immediate` loses commits the
    // runtime was told were made, and the invariants below check exactly what a crash keeps.
    server = await startPostgres({ durable: true });
    storage = postgresStorage({ connectionString: server.url, max: 4 });
    await storage.migrate();
    cores = [
      await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, tools: [], closeStorageOnShutdown: false, worldState: false }),
      await createCore({ plan: true, conversationHistory: true, storage, model, tools: [], closeStorageOnShutdown: false, worldState: false, agents: false }),
    ];
  });

  afterAll(async () => {
    for (const core of cores) await core.shutdown().catch(() => undefined);
    await storage?.close().catch(() => undefined);
    server?.stop();
  });

  /** Waits until `n` model requests have been received in total. */
  async function requestsReach(n: number): Promise<void> {
    for (let i = 0; i < 2_000 && model.requests.length < n; i += 1) await new Promise((r) => setTimeout(r, 5));
    expect(model.requests.length).toBe(n);
  }

  it(`survives ${OUTAGES} outages with ${SESSIONS} busy sessions; every session completes its next turn after each`, async () => {
    const sessions: SessionHandle[] = [];
    for (const core of cores) {
      for (let i = 0; i < PER_CORE; i += 1) sessions.push(await core.createSession({ workingDirectory: process.cwd() }));
    }
    const figures = { outages: 0, failedInOutage: 0, refusedStarts: 0, completedAfter: 0 };

    for (let outage = 1; outage <= OUTAGES; outage += 1) {
      const stoppedAcrossTwo = outage % 2 === 0;
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      model.push(...sessions.map(() => (r: ModelRequest) => ({ gate, step: { text: `answer to ${lastUserText(r)}` } })));
      const seen = model.requests.length;
      const busy = await Promise.all(sessions.map(async (s, i) => (await s.startTurn(text(`busy ${outage}.${i}`))).turnId));
      // Every session is in its model call (its turn row and counter are committed) when the server dies.
      await requestsReach(seen + SESSIONS);

      if (stoppedAcrossTwo) server.crash();
      else server.crashRestart();
      release();
      const outcomes = await Promise.all(busy.map((id, i) => sessions[i]!.waitForTurn(id)));
      for (const outcome of outcomes) {
        // A restarted server may already take the answer; a stopped one never does.
        if (stoppedAcrossTwo || outcome.status !== 'completed') expect(outcome).toMatchObject({ status: 'failed', code: 'persistence_error' });
        if (outcome.status === 'failed') figures.failedInOutage += 1;
      }

      if (stoppedAcrossTwo) {
        // A second attempt while the server is still down fails cleanly and must not hide the first:
        // refused at the door where the start reads the database first (sub-agent reconciliation),
        // otherwise a turn that fails at its begin.
        const second = await Promise.all(
          sessions.map(async (s, i) => {
            try {
              const { turnId } = await s.startTurn(text(`while down ${outage}.${i}`));
              return await s.waitForTurn(turnId);
            } catch (error) {
              return { status: 'refused', code: (error as { code?: string }).code };
            }
          }),
        );
        expect(second).toEqual(
          sessions.map((_, i) =>
            i < PER_CORE ? { status: 'refused', code: 'persistence_error' } : expect.objectContaining({ status: 'failed', code: 'persistence_error' }),
          ),
        );
        figures.refusedStarts += second.length;
        server.restart();
      }
      figures.outages += 1;

      model.push(...sessions.map(() => (r: ModelRequest) => ({ text: `answer to ${lastUserText(r)}` })));
      const next = await Promise.all(
        sessions.map(async (s, i) => {
          const { turnId } = await s.startTurn(text(`after ${outage}.${i}`));
          return s.waitForTurn(turnId);
        }),
      );
      expect(next).toEqual(sessions.map((_, i) => ({ status: 'completed', finalText: `answer to after ${outage}.${i}` })));
      figures.completedAfter += next.length;
      for (const s of sessions) {
        const { turns } = await assertStoredInvariants(storage, s.sessionId);
        expect(turns.filter((t) => t.status === 'running')).toEqual([]);
        expect(s.status()).toEqual({ type: 'idle' });
      }
    }
    expect(figures.outages).toBe(OUTAGES);
    expect(figures.completedAfter).toBe(OUTAGES * SESSIONS);
    console.log(`postgres-outage-soak: ${JSON.stringify(figures)}`);
    model.assertDone();
  }, 60_000 + OUTAGES * 15_000);

  it('a begin that committed but whose answer was lost, then a refused end: the next start closes that stale row as interrupted', async () => {
    // The connection drops after COMMIT: the row exists, the runtime was told the begin failed.
    let loseBeginAnswer = true;
    let refuseEnd = true;
    const lossy = new Proxy(storage, {
      get(target, prop, receiver) {
        if (prop === 'beginTurn') {
          return async (input: Parameters<SessionStorage['beginTurn']>[0]) => {
            const stored = await target.beginTurn(input);
            if (!loseBeginAnswer) return stored;
            loseBeginAnswer = false;
            throw new StorageError('begin turn failed: Connection terminated unexpectedly');
          };
        }
        if (prop === 'finishTurn') {
          return async (...args: Parameters<SessionStorage['finishTurn']>) => {
            if (!refuseEnd) return target.finishTurn(...args);
            refuseEnd = false;
            throw new StorageError('finish turn failed: connect ECONNREFUSED');
          };
        }
        const value = Reflect.get(target, prop, receiver) as unknown;
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    const own = scriptedModel([{ text: 'after the lost answer' }]);
    const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage: lossy, model: own, tools: [], closeStorageOnShutdown: false, worldState: false });
    try {
      const session = await core.createSession({ workingDirectory: process.cwd() });
      const first = (await session.startTurn(text('first'))).turnId;
      expect(await session.waitForTurn(first)).toMatchObject({ status: 'failed', code: 'persistence_error' });
      expect(await storage.getTurn(first)).toMatchObject({ status: 'running' });

      const second = (await session.startTurn(text('second'))).turnId;
      expect(await session.waitForTurn(second)).toEqual({ status: 'completed', finalText: 'after the lost answer' });
      expect(await storage.getTurn(first)).toMatchObject({ status: 'interrupted', errorCode: 'persistence_error', errorMessage: UNRECORDED_END_MESSAGE });
      expect(own.requests).toHaveLength(1);
      await assertStoredInvariants(storage, session.sessionId);
      own.assertDone();
    } finally {
      await core.shutdown();
    }
  });
});
