/**
 * A host tool that misbehaves in the ways JavaScript allows (integrity-paths point 3): it throws
 * synchronously, it returns what is not a result (a BigInt, a function, a symbol, a result whose text
 * is not a string, a result with a cycle or a BigInt among its artifacts), or it rejects with what is
 * not an Error (undefined, null, a number, a symbol, an object without a prototype, a cycle). Each
 * must end that one call `failed` with `execution_failed` and a text the model reads (a string), store
 * that result, end the call's span, and let the turn go on to the model's next answer; nothing may
 * crash the Turn or reach `onActorError`. Both backends: the result and the span are stored facts.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool } from '../../src/services/tools/define.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { harness } from '../support/harness.js';
import { backends, useBackend } from '../support/databases.js';
import { within } from '../support/faults.js';
import { assertStoredInvariants } from '../support/invariants.js';

interface Case {
  name: string;
  execute: () => unknown;
  /** What the model must be told (the failure's text). */
  text: RegExp;
}

const cycle: Record<string, unknown> = { name: 'loop' };
cycle.self = cycle;

const cases: Case[] = [
  {
    name: 'throws synchronously (not from an async function)',
    execute: () => {
      throw new Error('sync boom');
    },
    text: /sync boom/,
  },
  { name: 'returns a BigInt', execute: () => 10n, text: /not a tool result/ },
  { name: 'returns a function', execute: () => () => 'x', text: /not a tool result/ },
  { name: 'returns a symbol', execute: () => Symbol('s'), text: /not a tool result/ },
  { name: 'returns a result whose text is a BigInt', execute: () => ({ status: 'succeeded', text: 5n }), text: /not a tool result/ },
  { name: 'returns a result whose status is made up', execute: () => ({ status: 'maybe', text: 'x' }), text: /not a tool result/ },
  { name: 'returns a result whose artifacts hold a cycle', execute: () => ({ status: 'succeeded', text: 'x', artifacts: [cycle] }), text: /not a tool result/ },
  { name: 'returns a result whose artifacts hold a BigInt', execute: () => ({ status: 'succeeded', text: 'x', artifacts: [{ n: 1n }] }), text: /not a tool result/ },
  { name: 'rejects with undefined', execute: () => Promise.reject(undefined), text: /undefined/ },
  { name: 'rejects with null', execute: () => Promise.reject(null), text: /null/ },
  { name: 'rejects with a number', execute: () => Promise.reject(42), text: /42/ },
  { name: 'rejects with a symbol', execute: () => Promise.reject(Symbol('why')), text: /Symbol\(why\)/ },
  { name: 'rejects with an object without a prototype', execute: () => Promise.reject(Object.create(null) as object), text: /\{\}|object/ },
  { name: 'rejects with a cycle', execute: () => Promise.reject(cycle), text: /object/i },
  { name: 'throws an object whose message getter throws', execute: () => { throw { get message(): never { throw new Error('getter'); } }; }, text: /.+/ },
];

for (const backend of backends) {
  describe(`a host tool that throws or returns what is not a result (${backend.name})`, () => {
    let storage: SqlSessionStorage;
    useBackend(backend, (s) => (storage = s));

    for (const c of cases) {
      it(`${c.name}: the call fails execution_failed, the model reads why, the turn goes on`, async () => {
        const actorErrors: unknown[] = [];
        const tool = defineTool({
          name: 'hostile',
          description: 'Misbehaves.',
          parameters: z.object({}),
          execute: c.execute as never,
        });
        const h = await harness(storage, [{ toolCalls: [{ name: 'hostile', arguments: {} }] }, { text: 'carried on' }], {
          tools: [tool],
          onActorError: (_sessionId, error) => actorErrors.push(error),
        });
        const turnId = await h.start('call it');
        const outcome = await within(5_000, 'the end of the turn', h.session.waitForTurn(turnId));
        expect(outcome).toMatchObject({ status: 'completed', finalText: 'carried on' });

        const finished = h.updates.find((e) => e.update.type === 'tool_call_finished')!.update as { status: string; text: unknown; error?: { code: string } };
        expect(finished).toMatchObject({ status: 'failed', error: { code: 'execution_failed' } });
        expect(typeof finished.text).toBe('string');
        expect(finished.text).toMatch(c.text);
        // What the model read in its next request is that text.
        const second = JSON.stringify(h.model.requests[1]);
        expect(second).toContain(JSON.stringify(finished.text).slice(1, -1));

        await h.core.flushTrace();
        const spans = await storage.listTraceSpans({ turnId });
        expect(spans.find((s) => s.kind === 'tool_call')).toMatchObject({ status: 'failed', errorCode: 'execution_failed' });
        expect(spans.filter((s) => s.status === 'running')).toEqual([]);
        expect(actorErrors).toEqual([]);
        await assertStoredInvariants(storage, h.session.sessionId);
      });
    }
  });
}
