/**
 * The model port's boundary check has a fast path for the plain events a port sends every step
 * (issue 14 point 2): `fitsPlainly` must accept nothing the schema refuses and return exactly what
 * the schema returns. Every event here is tried on both; an event the fast path leaves to the schema
 * is fine, a disagreement is not.
 */
import { describe, expect, it } from 'vitest';
import { fitsPlainly, modelStreamEventSchema } from '../../../src/services/model/stream-events.js';

const WEIRD: unknown[] = [undefined, null, '', '   ', ' x ', 'x', 0, -0, -1, 1.5, NaN, Infinity, 2 ** 60, true, false, [], {}, 'stop', 'bogus'];

const BASES: Array<Record<string, unknown>> = [
  { type: 'text_delta', delta: 'hello' },
  { type: 'text_delta', delta: '', newBlock: true, phase: 'final_answer' },
  { type: 'reasoning_delta', delta: 'hmm' },
  { type: 'tool_call', callId: 'call_1', name: 'echo', arguments: '{"text":"a"}' },
  { type: 'tool_call', callId: '  call_2 ', name: ' echo\n', arguments: '' },
  { type: 'completed', usage: { inputTokens: 10, outputTokens: 2, cachedInputTokens: 0, reasoningTokens: 0 } },
  {
    type: 'completed',
    usage: { inputTokens: 1, outputTokens: 1, cachedInputTokens: 1, reasoningTokens: 1 },
    responseId: 'resp_1',
    finishReason: 'tool_use',
    actualModel: 'm',
  },
  { type: 'provider_opaque', provider: 'openai', data: { a: 1 } },
  { type: 'retry', attempt: 1, reason: 'rate limited', delayMs: 10 },
];

/** Every base event, and each with one key removed, replaced by each odd value, or added. */
function variants(): unknown[] {
  const out: unknown[] = [null, undefined, 'text_delta', 42, [], [{ type: 'text_delta', delta: 'a' }], new Date(), Object.create(null)];
  for (const base of BASES) {
    out.push(base, { ...base, extra: 'ignored' });
    for (const key of [...Object.keys(base), 'newBlock', 'phase', 'responseId', 'finishReason', 'actualModel', 'usage']) {
      const { [key]: _dropped, ...without } = base;
      out.push(without);
      for (const value of WEIRD) out.push({ ...base, [key]: value });
    }
    if (base.usage) {
      for (const key of Object.keys(base.usage as object)) {
        for (const value of WEIRD) out.push({ ...base, usage: { ...(base.usage as object), [key]: value } });
      }
      out.push({ ...base, usage: { ...(base.usage as object), extra: 1 } });
    }
    class Event {
      constructor() {
        Object.assign(this, base);
      }
    }
    out.push(new Event(), Object.assign(Object.create(null), base));
  }
  return out;
}

describe('the model stream boundary fast path', () => {
  it('accepts only what the schema accepts, and returns exactly what the schema returns', () => {
    const cases = variants();
    const disagreements: Array<{ event: unknown; fast: unknown; schema: unknown }> = [];
    let fastTaken = 0;
    for (const event of cases) {
      const fast = fitsPlainly(event);
      if (fast === undefined) continue;
      fastTaken += 1;
      const schema = modelStreamEventSchema.safeParse(event);
      if (!schema.success) disagreements.push({ event, fast, schema: 'refused' });
      else {
        try {
          expect(fast).toStrictEqual(schema.data);
          // The same keys in the same order: what is stored and hashed from it does not change.
          expect(Object.keys(fast)).toEqual(Object.keys(schema.data));
        } catch {
          disagreements.push({ event, fast, schema: schema.data });
        }
      }
    }
    expect(disagreements).toEqual([]);
    // The fast path is taken for a good share of them (it is not a path that never runs).
    expect(fastTaken).toBeGreaterThan(50);
  });

  it('takes every plain event of the hot types, so a step does not reach zod', () => {
    for (const base of BASES.filter((b) => b.type !== 'provider_opaque' && b.type !== 'retry')) {
      expect(fitsPlainly(base), JSON.stringify(base)).toStrictEqual(modelStreamEventSchema.parse(base));
    }
  });
});
