/**
 * Trace completeness (reference §4.14, §4.15 acc 46, §11.1 `TraceCompleteness`; acceptance audit,
 * branch audit-a): the inspector's turn trace says whether the stored trace holds every model
 * submission and tool call the turn's own counters expect. A full trace is `complete`; a trace with a
 * span left `outcome_unknown` by a restart is `partial`; a turn whose trace was never written is
 * `none`. On both backends, since the counters and the spans are read back from storage.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore } from '../../src/core.js';
import { turnTrace } from '../../src/inspector/server/trace.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { defineTool } from '../../src/services/tools/define.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { echoTool } from '../../src/testing/tools.js';
import { backends, useBackend } from '../support/databases.js';
import { faultyStorage } from '../support/faults.js';
import { harness } from '../support/harness.js';

const noTrace = { record: () => undefined, flush: async () => ({ drained: true }), stats: () => ({ droppedSignals: 0 }), close: async () => undefined };

describe.each(backends)('trace completeness on $name', (backend) => {
  let storage: SqlSessionStorage;
  useBackend(backend, (s) => (storage = s));

  it('a turn whose model calls and tool calls are all stored is complete [reference §4.15 acc 46]', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'a' } }, { name: 'echo', arguments: { text: 'b' } }] }, { text: 'done' }]);
    const { turnId } = await h.run('trace me');
    await h.core.flushTrace();
    const trace = await turnTrace(storage, h.session.sessionId, turnId);
    expect(trace.completeness).toEqual({
      state: 'complete',
      expectedModelCalls: 2,
      capturedModelCalls: 2,
      expectedToolCalls: 2,
      capturedToolCalls: 2,
      orphanToolSpans: 0,
      runningSpans: 0,
      outcomeUnknownSpans: 0,
    });
  });

  it('a turn with no stored span is none; a tool span left outcome_unknown by a restart is partial [reference §4.15 acc 46]', async () => {
    const silent = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'a' } }] }, { text: 'done' }], { trace: noTrace as never });
    const { turnId: untraced } = await silent.run('no trace');
    expect((await turnTrace(storage, silent.session.sessionId, untraced)).completeness).toMatchObject({ state: 'none', expectedModelCalls: 2, capturedModelCalls: 0, expectedToolCalls: 1, capturedToolCalls: 0 });

    // The process dies while its tool runs; the next start marks the span outcome_unknown.
    const faulty = faultyStorage(storage);
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    const hang = defineTool({ name: 'hang', description: 'Never returns.', parameters: z.object({}), execute: () => (started(), new Promise<string>(() => undefined)) });
    const ownership = { ownerId: `completeness-${backend.name}` };
    const first = await createCore({ storage: faulty, model: scriptedModel([{ toolCalls: [{ name: 'hang', arguments: {} }] }]), tools: [hang], closeStorageOnShutdown: false, worldState: false, ownership });
    const session = await first.createSession({ workingDirectory: process.cwd() });
    const { turnId } = await session.startTurn({ clientRequestId: 'crash', input: [{ type: 'text', text: 'run it' }] });
    await running;
    await first.flushTrace();
    faulty.freeze();
    const second = await createCore({ storage, model: scriptedModel([]), tools: [echoTool], closeStorageOnShutdown: false, worldState: false, ownership });
    try {
      expect((await turnTrace(storage, session.sessionId, turnId)).completeness).toMatchObject({
        state: 'partial',
        expectedModelCalls: 1,
        capturedModelCalls: 1,
        outcomeUnknownSpans: 1,
      });
    } finally {
      await second.shutdown();
    }
  });
});
