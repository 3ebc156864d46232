/**
 * A real Postgres server killed (`pg_ctl stop -m immediate`) at each point of a step (faults-review).
 * A turn with an approval card and a tool with a visible side effect is run once to learn the order
 * of its storage writes; then, for each write k, a fresh session runs the same turn while the server
 * is killed right before write k reaches it (the commit of k-1 was answered, k is refused), and
 * started again after the turn settles. Each time: the outcome is typed and comes within a bound,
 * the tool never runs twice, what the turn acknowledged (a completed outcome) is stored, no row is
 * left `running`, and the same session completes its next turn without a new core. Two more points:
 * the server killed and back while the card waits (the approved tool then runs and the turn
 * completes on the fresh server), and killed for good while the card waits (the approved tool's
 * result cannot be written: `persistence_error`, and the tool ran once).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore, type Core } from '../../src/core.js';
import type { SessionUpdateEnvelope } from '../../src/protocol/updates.js';
import { scriptedModel, type ScriptedStep } from '../../src/services/model/scripted.js';
import { defineTool } from '../../src/services/tools/define.js';
import { postgresStorage } from '../../src/storage/postgres.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import type { SessionStorage } from '../../src/storage/storage.js';
import { assertNoRunningAfterTerminal, assertStoredInvariants } from '../support/invariants.js';
import { startPostgres, type PostgresServer } from '../support/postgres-server.js';
import { within } from '../support/faults.js';

/** The fact writes of a turn; trace batches run off the turn's path and are not a point of the step. */
const STEP_WRITES = new Set<string>(['beginTurn', 'recordModelCallStart', 'commitAssistantMessage', 'commitToolResult', 'appendTurnMessages', 'finishTurn']);

/** `inner` with a hook run before each step write reaches it (the hook may kill the server). */
function beforeWrites(inner: SessionStorage, hook: (method: string) => void): SessionStorage {
  return new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown;
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        if (STEP_WRITES.has(String(prop))) hook(String(prop));
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
}

function guardedSpy(ran: string[]) {
  return defineTool({
    name: 'guarded_spy',
    description: 'Records its run; asks first.',
    parameters: z.object({ tag: z.string() }),
    authorize: ({ tag }) => ({
      kind: 'card',
      card: { toolName: 'guarded_spy', kind: 'approval', summary: `run ${tag}`, command: tag, reason: 'asks', environmentId: 'local', grantKey: `spy:${tag}` },
    }),
    execute: ({ tag }) => {
      ran.push(tag);
      return `ran ${tag}`;
    },
  });
}

const BOUNDED_MS = 15_000;

describe('Postgres killed at each point of a step', () => {
  let server: PostgresServer;
  let storage: SqlSessionStorage;
  let down = false;
  let kill: { at: number; seen: number; method?: string } | null = null;
  const ran: string[] = [];
  let core: Core;
  /** The model's next answers, taken one per request (a turn killed early leaves some unused). */
  const steps: ScriptedStep[] = [];
  const model = scriptedModel(() => steps.shift() ?? { text: 'unscripted' });

  beforeAll(async () => {
    // Default durability: what a killed server keeps is exactly what it acknowledged.
    server = await startPostgres({ durable: true });
    storage = postgresStorage({ connectionString: server.url, max: 4, timeouts: { statementMs: 2_000, answerMs: 4_000, connectMs: 5_000 } });
    await storage.migrate();
    const hooked = beforeWrites(storage, (method) => {
      if (!kill || down) return;
      kill.seen += 1;
      if (kill.seen === kill.at) {
        kill.method = method;
        server.crash();
        down = true;
      }
    });
    core = await createCore({ storage: hooked, model, tools: [guardedSpy(ran)], closeStorageOnShutdown: false, worldState: false, ownership: false });
  }, 120_000);

  afterAll(async () => {
    await core?.shutdown().catch(() => undefined);
    await storage?.close().catch(() => undefined);
    server?.stop();
  });

  /** One turn: the model asks for the tool, the card is approved, the tool runs, the model answers. */
  async function toolTurn(tag: string) {
    steps.push({ toolCalls: [{ name: 'guarded_spy', arguments: { tag }, callId: `call_${tag}` }] }, { text: `done ${tag}` });
    const session = await core.createSession({ workingDirectory: process.cwd() });
    session.updates$.subscribe((e: SessionUpdateEnvelope) => {
      if (e.update.type === 'permission_requested') {
        void session.resolvePermission(e.turnId!, e.update.toolCallId, 'allow_once').catch(() => undefined);
      }
    });
    const { turnId } = await session.startTurn({ clientRequestId: `crash-${tag}`, input: [{ type: 'text', text: `go ${tag}` }] });
    const outcome = await within(BOUNDED_MS, `the turn killed at ${tag}`, session.waitForTurn(turnId));
    return { session, turnId, outcome };
  }

  /** Drops the script steps a failed turn never used, so the next turn starts on its own. */
  function dropUnused(): void {
    steps.length = 0;
  }

  it('killed before each write of the step, then back: typed outcome, the tool at most once, the session goes on', { timeout: 240_000 }, async () => {
    // A clean run first: how many step writes the turn makes.
    kill = { at: Infinity, seen: 0 };
    const clean = await toolTurn('clean');
    expect(clean.outcome).toEqual({ status: 'completed', finalText: 'done clean' });
    const writes = kill.seen;
    // begin, model call, answer with its call, tool result, final answer (which carries the turn's
    // end in its own statement: docs/decisions.md, "The end of a turn in its final answer's statement").
    expect(writes).toBeGreaterThanOrEqual(5);

    const seenMethods: string[] = [];
    for (let k = 1; k <= writes; k += 1) {
      const tag = `k${k}`;
      kill = { at: k, seen: 0 };
      down = false;
      const { session, turnId, outcome } = await toolTurn(tag);
      seenMethods.push(kill.method ?? '?');
      expect(down, `the server was killed before write ${k}`).toBe(true);
      const method = kill.method;
      // No write of this turn comes after its final answer, which ends the turn in the same
      // statement: every kill point fails the turn, none leaves an acknowledged answer on a running turn.
      expect(outcome, `write ${k} (${method})`).toMatchObject({ status: 'failed', code: 'persistence_error' });
      expect(ran.filter((t) => t === tag).length, `the tool of write ${k} ran at most once`).toBeLessThanOrEqual(1);
      const toolRan = ran.includes(tag);
      dropUnused();

      server.restart();
      down = false;
      kill = null;
      steps.push({ text: `back ${tag}` });
      const next = await session.startTurn({ clientRequestId: `again-${tag}`, input: [{ type: 'text', text: 'again' }] });
      expect(await within(BOUNDED_MS, `the turn after write ${k}`, session.waitForTurn(next.turnId))).toEqual({ status: 'completed', finalText: `back ${tag}` });
      expect(ran.filter((t) => t === tag).length).toBe(toolRan ? 1 : 0);
      const stored = await assertStoredInvariants(storage, session.sessionId);
      assertNoRunningAfterTerminal(stored.turns, session.status());
      if (method === 'beginTurn') {
        // Never begun: no row, no message of it.
        expect(stored.turns.find((t) => t.id === turnId)).toBeUndefined();
        expect(stored.messages.filter((m) => m.turnId === turnId)).toEqual([]);
      } else {
        expect(stored.turns.find((t) => t.id === turnId)).toMatchObject({ status: 'failed', errorCode: 'persistence_error' });
      }
      // A tool that ran before its result could be written has no stored result: the next request
      // carried the synthesized `interrupted` one, never a second run.
      const last = model.requests.at(-1)!;
      const results = last.messages.filter((m) => m.role === 'tool');
      expect(results.length).toBeLessThanOrEqual(1);
    }
    expect(new Set(seenMethods)).toEqual(new Set(['beginTurn', 'recordModelCallStart', 'commitAssistantMessage', 'commitToolResult']));
  });
  /** Starts a tool turn on a new session and resolves when its card is waiting. */
  async function atCard(tag: string) {
    steps.length = 0;
    steps.push({ toolCalls: [{ name: 'guarded_spy', arguments: { tag }, callId: `call_${tag}` }] });
    const session = await core.createSession({ workingDirectory: process.cwd() });
    const card = new Promise<SessionUpdateEnvelope>((resolve) => {
      session.updates$.subscribe((e: SessionUpdateEnvelope) => {
        if (e.update.type === 'permission_requested') resolve(e);
      });
    });
    const { turnId } = await session.startTurn({ clientRequestId: `card-${tag}`, input: [{ type: 'text', text: `go ${tag}` }] });
    const e = await within(BOUNDED_MS, 'the card', card);
    if (e.update.type !== 'permission_requested') throw new Error('unreachable');
    return { session, turnId, toolCallId: e.update.toolCallId };
  }

  async function nextTurnCompletes(session: Awaited<ReturnType<typeof atCard>>['session'], tag: string): Promise<void> {
    steps.length = 0;
    steps.push({ text: `back ${tag}` });
    const next = await session.startTurn({ clientRequestId: `after-${tag}`, input: [{ type: 'text', text: 'again' }] });
    expect(await within(BOUNDED_MS, `the turn after ${tag}`, session.waitForTurn(next.turnId))).toEqual({ status: 'completed', finalText: `back ${tag}` });
    const stored = await assertStoredInvariants(storage, session.sessionId);
    assertNoRunningAfterTerminal(stored.turns, session.status());
    expect(session.status()).toEqual({ type: 'idle' });
  }

  it('killed and back while the card waits: the approved tool runs once and the turn completes on the fresh server', async () => {
    kill = null;
    const { session, turnId, toolCallId } = await atCard('card-back');
    server.crash();
    server.restart();
    // pg_ctl ran synchronously, so this process has not yet read the closes of its pooled
    // connections; a real restart does not block the host, which hears them as they come.
    await new Promise((r) => setTimeout(r, 200));
    steps.push({ text: 'done card-back' });
    await session.resolvePermission(turnId, toolCallId, 'allow_once');
    expect(await within(BOUNDED_MS, 'the approved turn', session.waitForTurn(turnId))).toEqual({ status: 'completed', finalText: 'done card-back' });
    expect(ran.filter((t) => t === 'card-back')).toEqual(['card-back']);
    await nextTurnCompletes(session, 'card-back');
  });

  it('killed for good while the card waits: approved, the tool runs once, its result cannot be written (persistence_error); fine once back', async () => {
    kill = null;
    const { session, turnId, toolCallId } = await atCard('card-down');
    server.crash();
    try {
      await session.resolvePermission(turnId, toolCallId, 'allow_once');
      expect(await within(BOUNDED_MS, 'the approved turn', session.waitForTurn(turnId))).toMatchObject({ status: 'failed', code: 'persistence_error' });
      expect(ran.filter((t) => t === 'card-down')).toEqual(['card-down']);
    } finally {
      server.restart();
    }
    await nextTurnCompletes(session, 'card-down');
    expect(ran.filter((t) => t === 'card-down')).toEqual(['card-down']);
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'persistence_error' });
  });

  it('killed while the card waits, then cancelled: the cancel is answered, the tool never runs; fine once back', async () => {
    kill = null;
    const { session, turnId } = await atCard('card-cancel');
    server.crash();
    try {
      await within(BOUNDED_MS, 'cancelTurn during the outage', session.cancelTurn(turnId));
      const outcome = await within(BOUNDED_MS, 'the cancelled turn', session.waitForTurn(turnId));
      // The cancelled result cannot be written: cancelled as the user asked, or failed for the write.
      expect(['cancelled', 'failed']).toContain(outcome.status);
      if (outcome.status === 'failed') expect(outcome).toMatchObject({ code: 'persistence_error' });
    } finally {
      server.restart();
    }
    await nextTurnCompletes(session, 'card-cancel');
    expect(ran.filter((t) => t === 'card-cancel')).toEqual([]);
  });
});
