/**
 * Issue 13.6: three deviations from the reference that a conformance run found, each checked on
 * PGlite and real Postgres through the public API:
 * - a trace batch the database refuses counts in `droppedSignals` (seed 000 §11), not only in
 *   `writeFailures`;
 * - a model call the runtime stops (shutdown, the actor stopped) ends its span `outcome_unknown`
 *   (reference §11.1); `cancelled` only for a user cancel;
 * - `waitForTurn` of an earlier completed turn answers that turn's `finalText` (its last assistant
 *   message, reference §9.3), not ''.
 */
import { describe, expect, it } from 'vitest';
import { createCore } from '../../src/core.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { backends, useBackend } from '../support/databases.js';
import { harness, type Harness } from '../support/harness.js';

/** Resolves once the scripted model has received `n` requests. */
async function requests(h: Pick<Harness, 'model'>, n: number): Promise<void> {
  for (let i = 0; i < 2_000 && h.model.requests.length < n; i += 1) await new Promise((r) => setTimeout(r, 5));
  expect(h.model.requests).toHaveLength(n);
}

describe.each(backends)('reference deviations (issue 13.6) on $name', (backend) => {
  let storage: SqlSessionStorage;

  useBackend(backend, (s) => (storage = s));

  it('a trace batch the database refuses counts in droppedSignals as well as writeFailures; the loop goes on', async () => {
    // A real refusal by the database: a trigger that rejects every span row.
    await storage.db.query(`CREATE FUNCTION refuse_span() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'spans refused'; END $$`);
    await storage.db.query('CREATE TRIGGER refuse_span BEFORE INSERT OR UPDATE ON trace_spans FOR EACH ROW EXECUTE FUNCTION refuse_span()');
    try {
      const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'x' } }] }, { text: 'went on' }]);
      const { turnId, outcome } = await h.run('trace me');
      expect(outcome).toEqual({ status: 'completed', finalText: 'went on' });
      const stats = await h.core.flushTrace();
      expect(stats.flushed).toBe(true);
      expect(stats.written).toBe(0);
      expect(stats.writeFailures).toBeGreaterThan(0);
      // Nothing overflowed the queue: every dropped signal is one the database refused.
      expect(stats.droppedSignals).toBe(stats.writeFailures);
      expect(h.core.traceStats()).toMatchObject({ droppedSignals: stats.writeFailures, writeFailures: stats.writeFailures });
      expect(await storage.listTraceSpans({ turnId })).toEqual([]);
    } finally {
      await storage.db.query('DROP TRIGGER refuse_span ON trace_spans');
      await storage.db.query('DROP FUNCTION refuse_span()');
    }
  });

  // A model call the user cancels ends its span cancelled (no error code): test/core/session-runtime.test.ts, 'cancelling during a model call aborts it and discards the draft'.

  it('a model call the runtime stops (shutdown) ends its span outcome_unknown, not cancelled', async () => {
    const h = await harness(storage, [{ hang: true }]);
    const turnId = await h.start('stopped by shutdown');
    await requests(h, 1);
    await h.core.shutdown();
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'actor_stopped' });
    const spans = (await storage.listTraceSpans({ turnId })).filter((s) => s.kind === 'model_call');
    expect(spans.map((s) => [s.status, s.errorCode])).toEqual([['outcome_unknown', 'actor_stopped']]);
  });

  it('a model call whose session actor is stopped outright ends its span outcome_unknown', async () => {
    const model = scriptedModel([{ hang: true }]);
    const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, tools: [], closeStorageOnShutdown: false, worldState: false });
    try {
      const session = await core.createSession({ workingDirectory: process.cwd() });
      const { turnId } = await session.startTurn({ clientRequestId: 'outright', input: [{ type: 'text', text: 'stop the actor' }] });
      await requests({ model }, 1);
      // No turn.stop reaches the turn: the actor and its children are simply stopped.
      session.actorRef.stop();
      await core.flushTrace();
      const spans = (await storage.listTraceSpans({ turnId })).filter((s) => s.kind === 'model_call');
      expect(spans.map((s) => s.status)).toEqual(['outcome_unknown']);
    } finally {
      await core.shutdown();
    }
  });

  it('waitForTurn of an earlier completed turn answers its finalText, here and after a reload', async () => {
    const h = await harness(storage, [
      { toolCalls: [{ name: 'echo', arguments: { text: 'x' } }], text: 'looking' },
      { text: 'first answer' },
      { text: 'second answer' },
    ]);
    const first = await h.run('first');
    const second = await h.run('second');
    expect(first.outcome).toEqual({ status: 'completed', finalText: 'first answer' });
    expect(await h.session.waitForTurn(first.turnId)).toEqual({ status: 'completed', finalText: 'first answer' });
    expect(await h.session.waitForTurn(second.turnId)).toEqual({ status: 'completed', finalText: 'second answer' });
    await h.session.shutdown();
    const reloaded = await h.core.loadSession(h.session.sessionId);
    expect(await reloaded.waitForTurn(first.turnId)).toEqual({ status: 'completed', finalText: 'first answer' });
    expect(await reloaded.waitForTurn(second.turnId)).toEqual({ status: 'completed', finalText: 'second answer' });
  });
});
