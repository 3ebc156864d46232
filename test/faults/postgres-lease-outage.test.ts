/**
 * An outage longer than the lease (integrity-outage, point 4). During an outage no renewal reaches
 * the database, so every lease this core holds expires there. Two endings:
 *
 * - nobody else took the session meanwhile: the lease row still names this core under the same
 *   fencing token, the first renewal after the outage pushes its expiry out again, and the session
 *   (idle, or waiting on a card) goes on where it was: ownership recovered, no restart;
 * - another core took the session while this one was cut off (its acquisition of the expired lease
 *   moved the token on and closed the running turn `process_restart`): nothing this core writes
 *   under the old token lands (the fence), its turn ends `ownership_lost`, its commands answer
 *   `ownership_lost`, and the other core's session works.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../src/core.js';
import { OpenworkError } from '../../src/errors.js';
import type { SessionHandle } from '../../src/session-handle.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { z } from 'zod';
import { defineTool } from '../../src/services/tools/define.js';
import { within } from '../support/faults.js';
import { assertStoredInvariants } from '../support/invariants.js';
import { useStoppablePostgres } from '../support/proxied-postgres.js';

const timeouts = { statementMs: 500, answerMs: 800, connectMs: 800 };
const LEASE_MS = 300;
/** Five leases long. */
const OUTAGE_MS = 1_500;
const BOUND_MS = 10_000;

/** Every run of the guarded tool, by its action. */
const ran: string[] = [];

/** A tool that asks for approval and records each run: a side effect the test can count. */
const guardedSpy = defineTool({
  name: 'guarded',
  description: 'Does something that needs approval.',
  parameters: z.object({ action: z.string() }),
  authorize: ({ action }) => ({
    kind: 'card',
    card: { toolName: 'guarded', kind: 'approval', summary: `run ${action}`, command: action, reason: 'always asks', environmentId: 'local', grantKey: 'guarded' },
  }),
  execute: ({ action }) => {
    ran.push(action);
    return `did ${action}`;
  },
});

let counter = 0;
const input = (text: string) => ({ clientRequestId: `lease-${(counter += 1)}`, input: [{ type: 'text' as const, text }] });

async function until(what: string, check: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 1_000; i += 1) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`${what} did not happen`);
}

function pendingCard(session: SessionHandle): string | undefined {
  const runtime = session.snapshot().runtime;
  return runtime.type === 'running' ? runtime.pendingApprovals[0]?.toolCallId : undefined;
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return 'ok';
  } catch (error) {
    if (!(error instanceof OpenworkError)) throw error;
    return error.code;
  }
}

describe('an outage longer than the lease', () => {
  const bed = useStoppablePostgres();
  const cores: Core[] = [];

  afterAll(async () => {
    for (const core of cores) await core.shutdown().catch(() => undefined);
  });

  async function openCore(url: string, steps: Parameters<typeof scriptedModel>[0]): Promise<Core> {
    const storage = bed.open(url, { max: 4, timeouts });
    const core = await createCore({ storage, model: scriptedModel(steps), tools: [guardedSpy], worldState: false, closeStorageOnShutdown: false, ownership: { leaseMs: LEASE_MS } });
    cores.push(core);
    return core;
  }

  async function leaseOf(sessionId: string) {
    const { rows } = await bed.direct.db.query<{ owner_id: string | null; token: number; live: boolean }>(
      'SELECT owner_id, token, expires_at > now() AS live FROM session_leases WHERE session_id = $1',
      [sessionId],
    );
    return rows[0];
  }

  it('nobody took the sessions meanwhile: the next renewal recovers them, an idle session and one waiting on a card go on', async () => {
    const core = await openCore(bed.server.url, [{ toolCalls: [{ name: 'guarded', arguments: { action: 'x' } }] }, { text: 'after the card' }, { text: 'after the outage' }]);
    const waiting = await core.createSession({ workingDirectory: process.cwd() });
    const idle = await core.createSession({ workingDirectory: process.cwd() });
    const { turnId } = await waiting.startTurn(input('card'));
    await until('the card', () => pendingCard(waiting) !== undefined);
    const before = await leaseOf(waiting.sessionId);

    bed.server.halt();
    await new Promise((r) => setTimeout(r, OUTAGE_MS));
    bed.server.restart();
    // Expired on the database while it was down, and renewed (same owner, same token) once it is back.
    await within(BOUND_MS, 'the renewal after the outage', until('the renewal', async () => (await leaseOf(waiting.sessionId))?.live === true));
    expect(await leaseOf(waiting.sessionId)).toEqual({ ...before, live: true });
    expect(waiting.ownedElsewhere).toBe(false);

    await waiting.resolvePermission(turnId, pendingCard(waiting)!, 'allow_once');
    expect(await within(BOUND_MS, 'the turn on the card', waiting.waitForTurn(turnId))).toEqual({ status: 'completed', finalText: 'after the card' });
    const next = await idle.startTurn(input('again'));
    expect(await within(BOUND_MS, 'the idle session', idle.waitForTurn(next.turnId))).toEqual({ status: 'completed', finalText: 'after the outage' });
    for (const s of [waiting, idle]) await assertStoredInvariants(bed.direct, s.sessionId);
  }, 60_000);

  it('another core took the session while this one was cut off: its writes are fenced, its turn ends ownership_lost, the taker works', async () => {
    ran.length = 0;
    const a = await openCore(bed.proxy.urlFor(bed.server.url), [{ toolCalls: [{ name: 'guarded', arguments: { action: 'cut off' } }] }]);
    const b = await openCore(bed.server.url, [{ text: 'the new owner answers' }]);
    const session = await a.createSession({ workingDirectory: process.cwd() });
    const { turnId } = await session.startTurn(input('card'));
    await until('the card', () => pendingCard(session) !== undefined);
    const before = await leaseOf(session.sessionId);

    // Only this core is cut off: its renewals get no answer, and its lease expires on the database.
    bed.proxy.stall();
    await until('the lease expiry', async () => (await leaseOf(session.sessionId))?.live === false);
    const taken = await b.loadSession(session.sessionId);
    const after = await leaseOf(session.sessionId);
    // Taken over with a newer token (b's takeover scan may take it before the load does: one more).
    expect(after).toMatchObject({ owner_id: b.ownership!.ownerId });
    expect(after!.token).toBeGreaterThan(before!.token);
    expect(await bed.direct.getTurn(turnId)).toMatchObject({ status: 'interrupted', errorCode: 'process_restart' });
    // The card is answered while the core is still cut off: the tool runs, its result is fenced.
    const answered = codeOf(session.resolvePermission(turnId, pendingCard(session)!, 'allow_once'));
    await new Promise((r) => setTimeout(r, 200));
    bed.proxy.resume();

    expect(['ok', 'ownership_lost']).toContain(await within(BOUND_MS, 'the answer to the card', answered));
    expect(await within(BOUND_MS, 'the cut-off turn', session.waitForTurn(turnId))).toMatchObject({ status: 'failed', code: 'ownership_lost' });
    await within(BOUND_MS, 'the loss noticed', until('the loss', () => session.ownedElsewhere));
    expect(await codeOf(session.startTurn(input('refused')))).toBe('ownership_lost');
    // Nothing of the cut-off core's turn landed after the takeover: no tool result, the turn as the taker closed it.
    const stored = await assertStoredInvariants(bed.direct, session.sessionId);
    expect(stored.messages.filter((m) => m.role === 'tool')).toEqual([]);
    expect(await bed.direct.getTurn(turnId)).toMatchObject({ status: 'interrupted', errorCode: 'process_restart' });
    expect(ran).toEqual([]);

    const next = await taken.startTurn(input('over to b'));
    expect(await within(BOUND_MS, 'the taker', taken.waitForTurn(next.turnId))).toEqual({ status: 'completed', finalText: 'the new owner answers' });
    expect(await leaseOf(session.sessionId)).toMatchObject({ owner_id: b.ownership!.ownerId, live: true });
  }, 60_000);
});
