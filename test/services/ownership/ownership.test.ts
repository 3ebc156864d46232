/**
 * Session ownership in one process (issue 15, points 1-3): two cores on one real Postgres, each with
 * its own storage, as two processes would have. A stale owner is simulated by expiring its lease in
 * the database while its core runs with a lease too long to renew in time (the SIGSTOP suite in
 * scale-out.test.ts pauses real processes instead).
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../../src/core.js';
import { CommandError, type OpenworkError } from '../../../src/errors.js';
import type { SessionUpdateEnvelope } from '../../../src/protocol/updates.js';
import { scriptedModel, type ScriptedStep } from '../../../src/services/model/scripted.js';
import { postgresStorage } from '../../../src/storage/postgres.js';
import { createTestDatabase } from '../../support/databases.js';

let url: string;
let admin: pg.Client;
const cores: Core[] = [];

beforeAll(async () => {
  url = await createTestDatabase();
  admin = new pg.Client({ connectionString: url });
  await admin.connect();
});

afterAll(async () => {
  for (const core of cores) await core.shutdown().catch(() => undefined);
  await admin.end();
});

async function core(steps: ScriptedStep[] | ((...a: never[]) => ScriptedStep), ownership: { leaseMs?: number; scanIntervalMs?: number } = {}): Promise<Core> {
  const c = await createCore({
    storage: postgresStorage({ connectionString: url, max: 4 }),
    model: scriptedModel(steps as ScriptedStep[]),
    ownership: { leaseMs: 60_000, ...ownership },
    worldState: false,
  });
  cores.push(c);
  return c;
}

/** What a pause past the lease leaves behind: the lease row says expired; the paused core has not noticed. */
async function expireLease(sessionId: string): Promise<void> {
  await admin.query(`UPDATE session_leases SET expires_at = now() - interval '1 second' WHERE session_id = $1`, [sessionId]);
}

async function rejection(promise: Promise<unknown>): Promise<OpenworkError> {
  try {
    await promise;
  } catch (error) {
    return error as OpenworkError;
  }
  throw new Error('expected a rejection');
}

async function until(test: () => boolean | Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await test())) {
    if (Date.now() > end) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('session ownership (issue 15) on one Postgres', () => {
  it('loadSession of a session another live core owns answers session_owned_elsewhere with its owner and expiry; shutdown frees it at once', async () => {
    const a = await core([{ text: 'a' }]);
    const b = await core([{ text: 'b' }]);
    const session = await a.createSession({ workingDirectory: process.cwd() });
    const error = await rejection(b.loadSession(session.sessionId));
    expect(error).toBeInstanceOf(CommandError);
    expect(error.code).toBe('session_owned_elsewhere');
    expect(error.details).toMatchObject({ sessionId: session.sessionId, ownerId: a.ownership!.ownerId });
    expect(Date.parse(String(error.details.leaseExpiresAt))).toBeGreaterThan(Date.now());
    expect(b.status(session.sessionId)).toEqual({ type: 'not_loaded' });

    await a.shutdown();
    const started = Date.now();
    const loaded = await b.loadSession(session.sessionId);
    expect(Date.now() - started).toBeLessThan(1_000);
    const { turnId } = await loaded.startTurn({ clientRequestId: 'r1', input: [{ type: 'text', text: 'hi' }] });
    expect(await loaded.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'b' });
  });

  it('deleteSession of a session another live core is running is refused with session_owned_elsewhere; nothing is deleted; once freed it deletes', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const a = await core([() => ({ gate, step: { text: 'still here' } })] as never);
    const b = await core([]);
    const session = await a.createSession({ workingDirectory: process.cwd() });
    const { turnId } = await session.startTurn({ clientRequestId: 'd1', input: [{ type: 'text', text: 'work' }] });
    const error = await rejection(b.deleteSession(session.sessionId));
    expect(error).toBeInstanceOf(CommandError);
    expect(error.code).toBe('session_owned_elsewhere');
    expect(error.details).toMatchObject({ sessionId: session.sessionId, ownerId: a.ownership!.ownerId });
    release();
    expect(await session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'still here' });
    const { rows } = await admin.query('SELECT status FROM turns WHERE session_id = $1', [session.sessionId]);
    expect(rows).toEqual([{ status: 'completed' }]);

    // The owner itself may delete; another core may once the lease is free.
    const other = await a.createSession({ workingDirectory: process.cwd() });
    expect(await a.deleteSession(other.sessionId)).toBe(true);
    await a.shutdown();
    expect(await b.deleteSession(session.sessionId)).toBe(true);
    expect((await admin.query('SELECT 1 FROM sessions WHERE id = $1', [session.sessionId])).rowCount).toBe(0);
  });

  it('deleteSession locks lease rows before session rows, as a fenced fact does: a fact between its fence and its session lock is not deadlocked by a delete from another core', async () => {
    const a = await core([{ text: 'x' }]);
    const b = await core([]);
    const session = await a.createSession({ workingDirectory: process.cwd() });
    // The owner's fenced fact, caught between its two locks: its fence holds the lease row FOR SHARE,
    // its session row is not locked yet (what a turn beginning on core a does in one statement).
    const fact = new pg.Client({ connectionString: url });
    await fact.connect();
    try {
      await fact.query('BEGIN');
      await fact.query(`SET LOCAL lock_timeout = '5s'`);
      await fact.query('SELECT 1 FROM session_leases WHERE session_id = $1 FOR SHARE', [session.sessionId]);
      const deleting = rejection(b.deleteSession(session.sessionId));
      await until(async () => (await admin.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`)).rows[0].n > 0);
      // The fact takes its session lock now. A delete that had locked the session rows first would
      // be waiting on the lease while holding them: a deadlock, one of the two aborted.
      await fact.query('SELECT 1 FROM sessions WHERE id = $1 FOR NO KEY UPDATE', [session.sessionId]);
      await fact.query('COMMIT');
      const error = await deleting;
      expect(error.code).toBe('session_owned_elsewhere');
    } finally {
      await fact.end();
    }
    expect((await admin.query('SELECT 1 FROM sessions WHERE id = $1', [session.sessionId])).rowCount).toBe(1);
  });

  it('a stale owner cannot start a turn after a takeover: ownership_lost, nothing of it stored, every later command answers ownership_lost', async () => {
    const a = await core([{ text: 'stale' }]);
    const b = await core([{ text: 'fresh' }]);
    const stale = await a.createSession({ workingDirectory: process.cwd() });
    let completed = false;
    stale.updates$.subscribe({ complete: () => (completed = true) });
    await expireLease(stale.sessionId);
    const fresh = await b.loadSession(stale.sessionId);

    // The stale handle still thinks it owns the session. Its first write is refused: with sub-agents
    // on, the reconciliation before the turn is accepted (startTurn rejects); without, the turn's own
    // begin (the accepted turn ends ownership_lost). Either way nothing of the turn is stored.
    const first = await stale
      .startTurn({ clientRequestId: 'stale-1', input: [{ type: 'text', text: 'hi' }] })
      .then(({ turnId }) => stale.waitForTurn(turnId))
      .catch((error: OpenworkError) => ({ status: 'refused', code: error.code }));
    expect(first).toMatchObject({ code: 'ownership_lost' });
    expect(await b.storage.listTurns(stale.sessionId)).toEqual([]);
    expect(await b.storage.listMessages(stale.sessionId)).toEqual([]);

    const again = await rejection(stale.startTurn({ clientRequestId: 'stale-2', input: [{ type: 'text', text: 'again' }] }));
    expect(again.code).toBe('ownership_lost');
    expect((await rejection(stale.setPermissionMode('accept_edits'))).code).toBe('ownership_lost');
    await until(() => a.status(stale.sessionId).type === 'not_loaded');
    expect(completed).toBe(true); // updates$ ends: this process holds the session no more.
    // The other core is unaffected and runs its turn.
    const { turnId: ok } = await fresh.startTurn({ clientRequestId: 'fresh-1', input: [{ type: 'text', text: 'hi' }] });
    expect(await fresh.waitForTurn(ok)).toEqual({ status: 'completed', finalText: 'fresh' });
    // And the stale core cannot load it back while the other owns it.
    expect((await rejection(a.loadSession(stale.sessionId))).code).toBe('session_owned_elsewhere');
  });

  it('a running turn of a stale owner: its next write is refused, none of its facts land after the takeover, updates$ says so', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const a = await core([{ gate, step: { text: 'too late' } }]);
    const b = await core([{ text: 'after takeover' }]);
    const stale = await a.createSession({ workingDirectory: process.cwd() });
    const updates: SessionUpdateEnvelope[] = [];
    stale.updates$.subscribe((e) => updates.push(e));
    const { turnId } = await stale.startTurn({ clientRequestId: 's1', input: [{ type: 'text', text: 'work' }] });
    await until(() => stale.snapshot().runtime.type === 'running' && (stale.snapshot().runtime as { phase: string }).phase === 'running_model');
    await expireLease(stale.sessionId);
    const fresh = await b.loadSession(stale.sessionId);
    // The takeover corrected the turn as a restart does.
    expect(await b.storage.getTurn(turnId)).toMatchObject({ status: 'interrupted', errorCode: 'process_restart' });
    const before = await b.storage.listMessages(stale.sessionId);

    release();
    expect(await stale.waitForTurn(turnId)).toMatchObject({ status: 'failed', code: 'ownership_lost' });
    expect(updates.at(-1)!.update).toMatchObject({ type: 'turn_finished', outcome: { status: 'failed', code: 'ownership_lost' } });
    expect(await b.storage.listMessages(stale.sessionId)).toEqual(before);
    expect(await b.storage.getTurn(turnId)).toMatchObject({ status: 'interrupted', errorCode: 'process_restart' });
    expect((await rejection(stale.cancelTurn(turnId))).code).toBe('ownership_lost');

    const { turnId: next } = await fresh.startTurn({ clientRequestId: 'b1', input: [{ type: 'text', text: 'go on' }] });
    expect(await fresh.waitForTurn(next)).toEqual({ status: 'completed', finalText: 'after takeover' });
  });

  it('the takeover scan corrects a silent owner\'s running turn within the scan interval and frees the session for anyone', async () => {
    const a = await core([{ hang: true }]);
    const b = await core([], { leaseMs: 2_000, scanIntervalMs: 100 });
    const c = await core([{ text: 'resumed' }]);
    const silent = await a.createSession({ workingDirectory: process.cwd() });
    const { turnId } = await silent.startTurn({ clientRequestId: 'x', input: [{ type: 'text', text: 'work' }] });
    await until(async () => (await b.storage.getTurn(turnId)) !== null);
    const { rows: [lease] } = await admin.query('SELECT token FROM session_leases WHERE session_id = $1', [silent.sessionId]);
    await expireLease(silent.sessionId);
    const expiredAt = Date.now();
    await until(async () => (await b.storage.getTurn(turnId))?.status === 'interrupted', 2_000);
    expect(Date.now() - expiredAt).toBeLessThan(1_000);
    expect(await b.storage.getTurn(turnId)).toMatchObject({ status: 'interrupted', errorCode: 'process_restart' });
    const { rows: [after] } = await admin.query('SELECT owner_id, token FROM session_leases WHERE session_id = $1', [silent.sessionId]);
    expect(after).toEqual({ owner_id: null, token: Number(lease.token) + 1 });
    expect(b.ownership!.stats()).toMatchObject({ takenOver: 1, correctedTurns: 1 });

    const resumed = await c.loadSession(silent.sessionId);
    const { turnId: next } = await resumed.startTurn({ clientRequestId: 'y', input: [{ type: 'text', text: 'go on' }] });
    expect(await resumed.waitForTurn(next)).toEqual({ status: 'completed', finalText: 'resumed' });
  });

  it('a live owner\'s running turn is never corrected by another core\'s start or scan', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const a = await core([{ gate, step: { text: 'mine' } }], { leaseMs: 600 });
    const session = await a.createSession({ workingDirectory: process.cwd() });
    const { turnId } = await session.startTurn({ clientRequestId: 'z', input: [{ type: 'text', text: 'work' }] });
    await until(async () => (await a.storage.getTurn(turnId)) !== null);
    const b = await core([], { leaseMs: 600, scanIntervalMs: 50 });
    expect(b.startup.correction).toEqual({ turns: 0, spans: 0 });
    await new Promise((r) => setTimeout(r, 1_500)); // Past two lease lengths: a's renewals keep it.
    expect(await b.storage.getTurn(turnId)).toMatchObject({ status: 'running' });
    release();
    expect(await session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'mine' });
  });

  it('bad ownership settings are configuration_invalid', async () => {
    const bad = await rejection(createCore({ storage: postgresStorage({ connectionString: url }), model: scriptedModel([]), ownership: { leaseMs: -1 } }));
    expect(bad.code).toBe('configuration_invalid');
  });
});
