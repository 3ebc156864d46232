/**
 * Issue 16.3: the host API with no ceremony. `session.run` and `session.stream` on a real PGlite store
 * with the scripted model: the updates they deliver are exactly the turn's updates on `updates$`,
 * leaving the loop cancels the turn and drops the subscription, an abort signal cancels, refusals
 * keep their codes, a reader 512 updates behind is told `updates_lagged` and goes on, usage is on
 * `turn_finished` and summed in the snapshot (across a reload), and
 * `outputSchema` asks the model for JSON, types the answer, and fails the turn with `output_invalid`.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore } from '../../src/core.js';
import { BusyError, InputError, UpdatesLaggedError } from '../../src/errors.js';
import type { SessionUpdateEnvelope } from '../../src/protocol/updates.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { harness } from '../support/harness.js';
import { usePglite } from '../support/databases.js';

/** The session's private subject (in its update stream): whether anyone still listens (the leak a broken loop must not leave). */
function observed(session: object): boolean {
  return (session as unknown as { updateStream: { subject: { observed: boolean } } }).updateStream.subject.observed;
}

describe('session.run and session.stream', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  it('run resolves with outcome, final text and the usage of every model call of the turn', async () => {
    const h = await harness(storage, [
      { toolCalls: [{ name: 'echo', arguments: { text: 'a' } }], usage: { inputTokens: 100, outputTokens: 10, cachedInputTokens: 40, reasoningTokens: 3 } },
      { text: 'All done.', usage: { inputTokens: 120, outputTokens: 7, cachedInputTokens: 90, reasoningTokens: 0 } },
      { text: 'Second.', usage: { inputTokens: 5, outputTokens: 1, cachedInputTokens: 0, reasoningTokens: 2 } },
    ]);
    const first = await h.session.run('echo a');
    expect(first.outcome).toEqual({ status: 'completed', finalText: 'All done.' });
    expect(first.text).toBe('All done.');
    expect(first.usage).toEqual({ inputTokens: 220, outputTokens: 17, cachedInputTokens: 130, reasoningTokens: 3 });
    expect(first.output).toBeUndefined();
    const finished = h.updates.find((e) => e.update.type === 'turn_finished')!;
    expect(finished.turnId).toBe(first.turnId);
    expect(finished.update).toEqual({ type: 'turn_finished', outcome: first.outcome, usage: first.usage });

    const second = await h.session.run([{ type: 'text', text: 'again' }], { clientRequestId: 'run-2' });
    expect(second.text).toBe('Second.');
    expect(h.session.acceptedTurn('run-2')).toBe(second.turnId);
    // The snapshot sums every finished turn; the storage's per-turn columns agree, so a reload does too.
    const total = { inputTokens: 225, outputTokens: 18, cachedInputTokens: 130, reasoningTokens: 5 };
    expect(h.session.snapshot().usage).toEqual(total);
    const turns = await h.session.turns();
    expect(turns.map((t) => [t.inputTokens, t.outputTokens, t.cachedInputTokens, t.reasoningTokens])).toEqual([
      [220, 17, 130, 3],
      [5, 1, 0, 2],
    ]);
    const again = await createCore({ storage, model: scriptedModel([]), closeStorageOnShutdown: false, worldState: false });
    try {
      expect((await again.loadSession(h.session.sessionId)).snapshot().usage).toEqual(total);
    } finally {
      await again.shutdown();
    }
  });

  it('stream yields exactly the turn updates of updates$, from turn_started to turn_finished, then ends', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'x' } }] }, { text: 'streamed answer', chunk: 3 }]);
    const seen: SessionUpdateEnvelope[] = [];
    const stream = h.session.stream('go');
    for await (const envelope of stream) seen.push(envelope);
    const turnId = await stream.turnId;
    const all = h.updates.filter((e) => e.turnId === turnId);
    expect(seen).toEqual(all);
    expect(seen[0]!.update.type).toBe('turn_started');
    expect(seen.at(-1)!.update.type).toBe('turn_finished');
    expect(seen.filter((e) => e.update.type === 'text_delta').map((e) => (e.update as { delta: string }).delta).join('')).toBe('streamed answer');
    expect((await stream.result).text).toBe('streamed answer');
    expect(observed(h.session)).toBe(true); // the harness's own subscription only
  });

  it('leaving the loop early cancels the turn and leaves no subscription behind', async () => {
    const h = await harness(storage, [{ hang: true, before: [{ type: 'text_delta', delta: 'partial' }] }]);
    // A session without the harness's own subscriber: whatever listens afterwards was left by the loop.
    const session = await h.core.createSession({ workingDirectory: process.cwd() });
    const stream = session.stream('hang');
    const types: string[] = [];
    for await (const { update } of stream) {
      types.push(update.type);
      if (update.type === 'text_delta') break;
    }
    expect(types[0]).toBe('turn_started');
    expect((await stream.result).outcome).toEqual({ status: 'cancelled' });
    expect((await session.turns()).at(-1)!.status).toBe('cancelled');
    expect(observed(session)).toBe(false);
  });

  it('a stream nobody reads still ends, unsubscribed, when its turn ends (no leak without a loop)', async () => {
    const h = await harness(storage, [{ text: 'unread' }]);
    const session = await h.core.createSession({ workingDirectory: process.cwd() });
    const stream = session.stream('nobody reads this');
    expect(observed(session)).toBe(true);
    expect((await stream.result).text).toBe('unread');
    expect(observed(session)).toBe(false);
  });

  it('detachOnBreak leaves the turn running; its result still settles', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const h = await harness(storage, [{ gate, step: { text: 'finished anyway' } }]);
    const stream = h.session.stream('detach', { detachOnBreak: true });
    for await (const { update } of stream) if (update.type === 'turn_started') break;
    release();
    expect((await stream.result).outcome).toEqual({ status: 'completed', finalText: 'finished anyway' });
  });

  it('an abort signal cancels the running turn; an already aborted one cancels it at once', async () => {
    const h = await harness(storage, [{ hang: true }, { hang: true }]);
    const controller = new AbortController();
    const running = h.session.run('hang', { signal: controller.signal });
    await h.waitFor((e) => e.update.type === 'phase_changed' && e.update.phase === 'running_model');
    controller.abort();
    expect((await running).outcome).toEqual({ status: 'cancelled' });
    const late = await h.session.run('hang again', { signal: AbortSignal.abort() });
    expect(late.outcome).toEqual({ status: 'cancelled' });
    expect((await h.session.turns()).map((t) => t.status)).toEqual(['cancelled', 'cancelled']);
    h.model.assertDone = () => undefined; // The second hang may be cancelled before its model call.
  });

  it('a reader more than 512 updates behind gets one updates_lagged, then the last 512; the turn goes on and replay or the snapshot recovers', async () => {
    const text = 'abcd'.repeat(1_000);
    const h = await harness(storage, [{ text, chunk: 4 }]);
    const stream = h.session.stream('flood');
    // The reader is busy elsewhere until the turn has ended: 1,000 text deltas go by unread.
    expect((await stream.result).text).toBe(text);
    const turnId = await stream.turnId;
    const all = h.updates.filter((e) => e.turnId === turnId);
    expect(all.length).toBeGreaterThan(1_000);
    const seen: SessionUpdateEnvelope[] = [];
    let lag: unknown = null;
    try {
      for await (const envelope of stream) seen.push(envelope);
    } catch (error) {
      lag = error;
    }
    expect(seen).toEqual([]);
    const skipped = all.length - 512;
    expect(lag).toBeInstanceOf(UpdatesLaggedError);
    expect(lag).toMatchObject({
      code: 'updates_lagged',
      details: { skipped, resumeAfterSequence: all[0]!.sequence - 1, nextSequence: all[skipped]!.sequence },
    });
    // Iterating the same stream again goes on from the oldest update still held.
    for await (const envelope of stream) seen.push(envelope);
    expect(seen).toEqual(all.slice(skipped));
    // Recovery per reference §8.5: the ring holds the same last 512, so replay answers snapshot_required.
    expect(() => h.session.replayUpdates((lag as UpdatesLaggedError).resumeAfterSequence)).toThrow(expect.objectContaining({ code: 'snapshot_required' }));
    expect(h.session.snapshot().lastUpdateSequence).toBe(all.at(-1)!.sequence);
    expect(observed(h.session)).toBe(true); // the harness's own subscription only
  });

  it('a reader that keeps up is never told it lagged, however long the turn', async () => {
    const text = 'wxyz'.repeat(1_000);
    const h = await harness(storage, [{ text, chunk: 4 }]);
    const seen: SessionUpdateEnvelope[] = [];
    const stream = h.session.stream('flood');
    for await (const envelope of stream) seen.push(envelope);
    expect(seen).toEqual(h.updates.filter((e) => e.turnId === seen[0]!.turnId));
    expect(seen.length).toBeGreaterThan(1_000);
  });

  it('refusals keep their typed codes: busy rejects run, the stream loop and turnId alike', async () => {
    const h = await harness(storage, [{ hang: true }]);
    const first = h.session.stream('first');
    await first.turnId;
    await h.waitFor((e) => e.update.type === 'phase_changed' && e.update.phase === 'running_model');
    await expect(h.session.run('second')).rejects.toBeInstanceOf(BusyError);
    const refused = h.session.stream('third');
    await expect(refused.turnId).rejects.toMatchObject({ code: 'busy' });
    await expect(refused.result).rejects.toMatchObject({ code: 'busy' });
    await expect((async () => {
      for await (const _ of refused) void _;
    })()).rejects.toMatchObject({ code: 'busy' });
    await expect(h.session.run('   ')).rejects.toMatchObject({ code: 'empty_input' });
    await h.session.cancelTurn(await first.turnId);
    expect((await first.result).outcome.status).toBe('cancelled');
  });
});

describe('structured output (outputSchema)', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  const Verdict = z.object({ verdict: z.enum(['pass', 'fail']), reasons: z.array(z.string()), score: z.number().optional() });

  it('asks the model for the JSON schema on every model call of the turn and returns the typed value', async () => {
    const h = await harness(storage, [
      { toolCalls: [{ name: 'echo', arguments: { text: 'look' } }] },
      { text: '{"verdict":"pass","reasons":["tests are green"]}' },
      { text: 'plain text again' },
    ]);
    const result = await h.session.run('judge it', { outputSchema: Verdict });
    expect(result.outcome.status).toBe('completed');
    const verdict: { verdict: 'pass' | 'fail'; reasons: string[]; score?: number } | undefined = result.output;
    expect(verdict).toEqual({ verdict: 'pass', reasons: ['tests are green'] });
    const [call1, call2] = h.model.requests;
    for (const request of [call1!, call2!]) {
      expect(request.responseFormat?.name).toBe('final_answer');
      expect(request.responseFormat?.schema).toMatchObject({
        type: 'object',
        properties: { verdict: { enum: ['pass', 'fail'] }, reasons: { type: 'array' } },
        required: ['verdict', 'reasons'],
      });
    }
    // The schema belongs to that turn only.
    expect((await h.session.run('free text')).text).toBe('plain text again');
    expect(h.model.requests[2]!.responseFormat).toBeUndefined();
  });

  it('an answer that does not fit fails the turn with output_invalid; the answer itself is stored', async () => {
    const h = await harness(storage, [{ text: '{"verdict":"maybe","reasons":[]}' }, { text: 'not json at all' }]);
    const wrong = await h.session.run('judge', { outputSchema: Verdict });
    expect(wrong.outcome).toMatchObject({ status: 'failed', code: 'output_invalid' });
    expect((wrong.outcome as { message: string }).message).toMatch(/verdict/);
    expect(wrong.output).toBeUndefined();
    const notJson = await h.session.run('judge again', { outputSchema: Verdict });
    expect(notJson.outcome).toMatchObject({ status: 'failed', code: 'output_invalid', message: expect.stringMatching(/not JSON/) });
    const turns = await h.session.turns();
    expect(turns.map((t) => [t.status, t.errorCode])).toEqual([
      ['failed', 'output_invalid'],
      ['failed', 'output_invalid'],
    ]);
    const assistant = (await h.session.messages()).filter((m) => m.role === 'assistant').map((m) => m.content);
    expect(JSON.stringify(assistant)).toContain('not json at all');
  });

  it('a fenced JSON answer is accepted', async () => {
    const h = await harness(storage, [{ text: '```json\n{"verdict":"fail","reasons":["x"],"score":2}\n```' }]);
    expect((await h.session.run('judge', { outputSchema: Verdict })).output).toEqual({ verdict: 'fail', reasons: ['x'], score: 2 });
  });

  it('a schema that is not an object, not zod, or not expressible is refused before any turn exists', async () => {
    const h = await harness(storage, []);
    for (const bad of [z.string(), { parse: () => 1 }, z.object({ at: z.date() })]) {
      const error = await h.session.run('x', { outputSchema: bad as z.ZodType }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InputError);
      expect(error).toMatchObject({ code: 'invalid_request' });
    }
    expect(await h.session.turns()).toEqual([]);
  });
});
