/**
 * Issue 14 (perf-delta): a streamed text delta costs the runtime the same whatever the length of the
 * text streamed before it. A cost per delta proportional to the draft so far (the draft copied or
 * flattened per delta, a storable check or a byte count over all of it) makes a long answer
 * quadratic: 2,000 deltas of 3,000 characters would cost seconds each at the end. Not a timed test:
 * it compares the runtime's own handling time of the deltas of a short draft with that of the
 * deltas at the end of a 6 MB draft, in the same turn, with a generous ratio, and checks that every
 * guarantee of the stream held (updates in order, the snapshot's draft, the stored message whole).
 */
import { describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../../src/core.js';
import type { ModelPort, ModelStreamEvent } from '../../../src/services/model/port.js';
import type { SessionUpdateEnvelope } from '../../../src/protocol/updates.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { usePglite } from '../../support/databases.js';

let storage: SqlSessionStorage;
const cores: Core[] = usePglite((s) => {
  storage = s;
});

const USAGE = { inputTokens: 5, outputTokens: 3, cachedInputTokens: 0, reasoningTokens: 0 };
const COUNT = 2_000;
const SIZE = 3_000;
/** The deltas compared: the first ones after warm-up, and the last ones. */
const WINDOW = 200;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/**
 * A port that streams `COUNT` deltas of `SIZE` characters and records, for each, how long the
 * runtime kept it before asking for the next one: the time between the `yield` and the resumption
 * is the runtime's handling of that delta (the check, the Turn's step, the update).
 */
function timingPort(handled: number[], onDelta?: (i: number) => void): ModelPort {
  return {
    id: 'timing/test',
    providerId: 'timing',
    model: 'test',
    contextWindow: 100_000_000,
    async *stream() {
      for (let i = 0; i < COUNT; i++) {
        const delta = String.fromCharCode(97 + (i % 26)).repeat(SIZE);
        const t0 = performance.now();
        yield { type: 'text_delta', delta } as ModelStreamEvent;
        handled.push(performance.now() - t0);
        onDelta?.(i);
      }
      yield { type: 'completed', usage: USAGE } as ModelStreamEvent;
    },
  };
}

describe('a streamed text delta', () => {
  it('costs no more at the end of a 6 MB draft than at its start, and every delta is shown, kept and stored', async () => {
    const handled: number[] = [];
    let session: Awaited<ReturnType<Core['createSession']>> | undefined;
    const draftLengths: number[] = [];
    const model = timingPort(handled, (i) => {
      // The live draft is in the snapshot as it grows (read now and then: reading it is the host's cost).
      if (i % 500 === 499) {
        const runtime = session!.snapshot().runtime;
        draftLengths.push(runtime.type === 'running' ? runtime.draft.text.length : -1);
      }
    });
    const core = await createCore({ storage, model, worldState: false });
    cores.push(core);
    session = await core.createSession({ workingDirectory: process.cwd() });
    const updates: SessionUpdateEnvelope[] = [];
    const sub = session.updates$.subscribe((u) => updates.push(u));
    const { turnId } = await session.startTurn({ clientRequestId: 'delta-cost', input: [{ type: 'text', text: 'go' }] });
    const outcome = await session.waitForTurn(turnId);
    sub.unsubscribe();
    expect(outcome.status).toBe('completed');

    const early = median(handled.slice(WINDOW, 2 * WINDOW));
    const late = median(handled.slice(-WINDOW));
    // Linear handling keeps these within noise of each other; a copy of the draft per delta puts
    // the late ones at milliseconds (6 MB copied), tens of times the early ones.
    expect(late, `median handling of a delta: ${early.toFixed(3)} ms early, ${late.toFixed(3)} ms at 6 MB`).toBeLessThan(Math.max(early * 6, 0.5));

    const expected = Array.from({ length: COUNT }, (_, i) => String.fromCharCode(97 + (i % 26)).repeat(SIZE)).join('');
    const deltas = updates.filter((u) => u.update.type === 'text_delta');
    expect(deltas.map((u) => (u.update as { delta: string }).delta).join('')).toBe(expected);
    const sequences = updates.map((u) => u.sequence);
    expect(sequences).toEqual([...sequences].sort((a, b) => a - b));
    expect(new Set(sequences).size).toBe(sequences.length);
    expect(draftLengths).toEqual([500, 1000, 1500, 2000].map((n) => n * SIZE));
    const stored = await session.messages();
    const answer = stored.find((m) => m.role === 'assistant')!;
    expect(answer.content.map((b) => ('text' in b ? b.text : '')).join('')).toBe(expected);
  }, 60_000);
});
