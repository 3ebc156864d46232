/**
 * A tool-call machine that fails ends its turn honestly (integrity-paths point 1). The machine of a
 * call that waits for a card is spawned by the Turn; when its chart throws, nothing of it runs any
 * more. Before, the Turn ended `persistence_error` ("tool call actor failed"), stored no result for
 * the call, left its span `running` until the next start's correction, and a card the machine was
 * waiting on never got its `permission_resolved`. Now the call ends as a stopped actor's (seed 000
 * §5): an `outcome_unknown` result is stored and read by no later model call of this turn, the span
 * ends `outcome_unknown` with `actor_stopped`, an open card is resolved `cancelled`, and the turn
 * ends `failed` with `actor_stopped`.
 *
 * The fault: the tool boundary (services/tools/returned-result) now stops every host-made value that
 * threw in the chart before, so the chart's own pure helpers are made to throw, once, for this
 * file's calls only (`vi.mock`, as a bug in them would): `terminalAfterRun` when the approved tool's
 * result comes back (the machine's `tool.finished` assign), `deniedResult` for the user's denial
 * (the machine's `toolcall.decide` transition, while the card waits). Everything else is real: the
 * core, the storage (both backends), the spans, the tool. Also the Turn's own `tool.finished` assign
 * for a call that needs no card (the Turn crashes: the Session's `ending_crashed_turn`). The file runs
 * in a process of its own (vitest.config.ts ISOLATED_FILES): a shared worker's module cache would
 * ignore `vi.mock`.
 */
import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { defineTool, type Authorization } from '../../src/services/tools/define.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { harness } from '../support/harness.js';
import { backends, useBackend } from '../support/databases.js';
import { within } from '../support/faults.js';
import { assertStoredInvariants } from '../support/invariants.js';

const fault = vi.hoisted(() => ({ onFinished: false, onDeny: false, onProgress: false, onCallProgress: false }));

vi.mock('../../src/machines/publish.js', async (original) => {
  const actual = await original<typeof import('../../src/machines/publish.js')>();
  return {
    ...actual,
    announceToParent: (...args: Parameters<typeof actual.announceToParent>) => {
      if (fault.onProgress && args[3].type === 'tool_call_progress') throw new Error('the progress could not be announced');
      return actual.announceToParent(...args);
    },
    // The tool-call machine publishes a call's progress itself, with `batchUpdate`.
    batchUpdate: (...args: Parameters<typeof actual.batchUpdate>) => {
      if (fault.onCallProgress && args[2].type === 'tool_call_progress') throw new Error('the progress could not be published');
      return actual.batchUpdate(...args);
    },
  };
});

vi.mock('../../src/machines/tool-call/outcomes.js', async (original) => {
  const actual = await original<typeof import('../../src/machines/tool-call/outcomes.js')>();
  return {
    ...actual,
    terminalAfterRun: (...args: Parameters<typeof actual.terminalAfterRun>) => {
      if (fault.onFinished && args[1].text === 'explode') throw new Error('the chart read the result wrong');
      return actual.terminalAfterRun(...args);
    },
  };
});

vi.mock('../../src/protocol/tool-result.js', async (original) => {
  const actual = await original<typeof import('../../src/protocol/tool-result.js')>();
  return {
    ...actual,
    deniedResult: (...args: Parameters<typeof actual.deniedResult>) => {
      if (fault.onDeny) throw new Error('the chart could not take the denial');
      return actual.deniedResult(...args);
    },
  };
});

/** Asks first, so the call runs in a tool-call machine; returns the text the fault waits for. */
const askingTool = defineTool({
  name: 'asking',
  description: 'Needs approval, then answers.',
  parameters: z.object({ text: z.string() }),
  authorize: () => ({
    kind: 'card',
    card: { kind: 'approval', summary: 'run asking', reason: 'it always asks', environmentId: 'local', grantKey: 'asking' },
  }),
  execute: () => 'explode',
});

for (const backend of backends) {
  describe(`a tool-call machine that fails (${backend.name})`, () => {
    let storage: SqlSessionStorage;
    useBackend(backend, (s) => (storage = s));

    for (const when of ['after its approved tool ran', 'while its card waits (the denial throws)'] as const) {
      it(`${when}: the turn ends failed actor_stopped, the call's result is stored outcome_unknown, its span is closed, the card is resolved, a later call is recorded not executed`, async () => {
        fault.onFinished = when === 'after its approved tool ran';
        fault.onDeny = !fault.onFinished;
        try {
          const actorErrors: unknown[] = [];
          const h = await harness(
            storage,
            [{ toolCalls: [{ name: 'asking', arguments: { text: 'a' } }, { name: 'echo', arguments: { text: 'never' } }] }, { text: 'the next turn' }],
            { tools: [askingTool], onActorError: (_sessionId, error) => actorErrors.push(error) },
          );
          void h.waitFor((e) => e.update.type === 'permission_requested').then((e) =>
            h.session.resolvePermission(e.turnId!, (e.update as { toolCallId: string }).toolCallId, fault.onDeny ? 'deny' : 'allow_once'),
          );
          const turnId = await h.start('go');
          const outcome = await within(5_000, 'the end of the turn', h.session.waitForTurn(turnId));
          expect(outcome).toMatchObject({ status: 'failed', code: 'actor_stopped' });
          expect(outcome.status === 'failed' && outcome.message).toMatch(/tool call actor failed: the chart (read the result wrong|could not take the denial)/);
          expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'actor_stopped' });

          const own = h.updates.filter((e) => e.turnId === turnId).map((e) => e.update);
          const asked = own.find((u) => u.type === 'permission_requested') as { toolCallId: string };
          // The card is closed once, whichever way the machine failed.
          const resolved = own.filter((u) => u.type === 'permission_resolved');
          expect(resolved).toEqual([{ type: 'permission_resolved', toolCallId: asked.toolCallId, decision: fault.onDeny ? 'cancelled' : 'allow_once' }]);
          // The call's result as the host and the store see it; the later call was not executed.
          const finished = own.filter((u) => u.type === 'tool_call_finished') as Array<{ toolCallId: string; status: string; text: string }>;
          expect(finished.map((f) => [f.toolCallId === asked.toolCallId, f.status])).toEqual([
            [true, 'outcome_unknown'],
            [false, 'cancelled'],
          ]);
          expect(finished[0]!.text).toBe('the runtime stopped while this tool call was pending; its outcome is unknown');
          expect(finished[1]!.text).toBe('tool was not executed because the turn already terminated');
          const messages = await storage.listMessages(h.session.sessionId);
          const results = messages.flatMap((m) => m.content.filter((b) => b.type === 'tool_result')) as Array<{ status: string; text: string }>;
          expect(results.map((r) => r.status)).toEqual(['outcome_unknown', 'cancelled']);

          await h.core.flushTrace();
          const spans = (await storage.listTraceSpans({ turnId })).filter((s) => s.kind === 'tool_call');
          expect(spans.filter((s) => s.status === 'running')).toEqual([]);
          const span = spans.find((s) => s.id === `span.${asked.toolCallId}`)!;
          expect(span).toMatchObject({ status: 'outcome_unknown', errorCode: 'actor_stopped' });
          expect(span.endedAt).not.toBeNull();

          // Out of waiting_permission once the card is closed (the deny case was still in it).
          const phases = own.filter((u) => u.type === 'phase_changed').map((u) => (u as { phase: string }).phase);
          expect(phases.slice(phases.lastIndexOf('waiting_permission'))).toEqual(['waiting_permission', 'running_tools', 'failed']);
          // The host heard the end once, last; the session takes the next turn.
          expect(own.filter((u) => u.type === 'turn_finished')).toHaveLength(1);
          expect(own.at(-1)!.type).toBe('turn_finished');
          fault.onFinished = fault.onDeny = false;
          expect((await h.run('again')).outcome).toMatchObject({ status: 'completed' });
          expect(actorErrors).toEqual([]);
          await assertStoredInvariants(storage, h.session.sessionId);
        } finally {
          fault.onFinished = fault.onDeny = false;
        }
      });
    }
  });
}

/** Runs without asking: the Turn's own chart handles `tool.finished`, and fails on this result. */
/**
 * A tool that reports progress, then runs until it is aborted or 5 s pass (asking first when given
 * a card): `stopped` settles at its abort, `finished()` says whether it ran to its end.
 */
function longTool(name: string, card?: Authorization) {
  let aborted: (() => void) | null = null;
  const stopped = new Promise<void>((resolve) => (aborted = resolve));
  let finished = false;
  const tool = defineTool({
    name,
    description: `${card ? 'Asks, reports' : 'Reports'} progress, then runs until it is aborted or 5 s pass.`,
    parameters: z.object({}),
    ...(card ? { authorize: () => card } : {}),
    execute: async (_args, ctx) => {
      ctx.signal.addEventListener('abort', () => aborted!());
      ctx.progress({ kind: 'message', message: 'working' });
      await new Promise((resolve) => setTimeout(resolve, 5_000));
      finished = true;
      return 'ran to the end';
    },
  });
  return { tool, stopped, finished: () => finished };
}

const directTool = defineTool({
  name: 'direct',
  description: 'Answers the text the fault waits for.',
  parameters: z.object({}),
  execute: () => 'explode',
});

describe('an assign of the Turn that throws on tool.finished (the Turn itself fails)', () => {
  let storage: SqlSessionStorage;
  useBackend(backends[0]!, (s) => (storage = s));

  it('ends the turn failed actor_stopped, once, with its row and the tool span closed; the session takes the next turn', async () => {
    fault.onFinished = true;
    try {
      const actorErrors: unknown[] = [];
      const h = await harness(storage, [{ toolCalls: [{ name: 'direct', arguments: {} }] }, { text: 'the next turn' }], {
        tools: [directTool],
        onActorError: (_sessionId, error) => actorErrors.push(error),
      });
      const turnId = await h.start('go');
      const outcome = await within(5_000, 'the end of the turn', h.session.waitForTurn(turnId));
      expect(outcome).toMatchObject({ status: 'failed', code: 'actor_stopped' });
      expect(outcome.status === 'failed' && outcome.message).toMatch(/the chart read the result wrong/);
      expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'actor_stopped' });
      expect(h.updates.filter((e) => e.turnId === turnId && e.update.type === 'turn_finished')).toHaveLength(1);
      await h.core.flushTrace();
      const spans = await storage.listTraceSpans({ turnId });
      expect(spans.filter((s) => s.status === 'running')).toEqual([]);
      expect(spans.find((s) => s.kind === 'tool_call')).toMatchObject({ status: 'outcome_unknown', errorCode: 'actor_stopped' });
      fault.onFinished = false;
      expect((await h.run('again')).outcome).toMatchObject({ status: 'completed' });
      expect(actorErrors).toEqual([]);
    } finally {
      fault.onFinished = false;
    }
  });
});

describe('a Turn that fails while its tool runs', () => {
  let storage: SqlSessionStorage;
  useBackend(backends[0]!, (s) => (storage = s));

  it('stops the tool (xstate leaves a failed machine\'s children running; the crashed turn\'s end stops them)', async () => {
    const long = longTool('long');
    fault.onProgress = true;
    try {
      const h = await harness(storage, [{ toolCalls: [{ name: 'long', arguments: {} }] }, { text: 'the next turn' }], { tools: [long.tool] });
      const turnId = await h.start('go');
      const outcome = await within(5_000, 'the end of the turn', h.session.waitForTurn(turnId));
      expect(outcome).toMatchObject({ status: 'failed', code: 'actor_stopped' });
      // The tool was told to stop at the crash, not left to run to its end.
      await within(2_000, 'the abort of the tool the failed Turn left running', long.stopped);
      expect(long.finished()).toBe(false);
      fault.onProgress = false;
      expect((await h.run('again')).outcome).toMatchObject({ status: 'completed' });
    } finally {
      fault.onProgress = false;
    }
  });
});

describe('a tool-call machine that fails while its approved tool runs', () => {
  let storage: SqlSessionStorage;
  useBackend(backends[0]!, (s) => (storage = s));

  it('stops the tool the failed machine left running, and ends the call outcome_unknown', async () => {
    const long = longTool('long_asking', { kind: 'card', card: { kind: 'approval', summary: 'run long_asking', environmentId: 'local', grantKey: 'long' } });
    fault.onCallProgress = true;
    try {
      const h = await harness(storage, [{ toolCalls: [{ name: 'long_asking', arguments: {} }] }, { text: 'the next turn' }], { tools: [long.tool] });
      void h.waitFor((e) => e.update.type === 'permission_requested').then((e) =>
        h.session.resolvePermission(e.turnId!, (e.update as { toolCallId: string }).toolCallId, 'allow_once'),
      );
      const turnId = await h.start('go');
      const outcome = await within(5_000, 'the end of the turn', h.session.waitForTurn(turnId));
      expect(outcome).toMatchObject({ status: 'failed', code: 'actor_stopped' });
      expect(outcome.status === 'failed' && outcome.message).toMatch(/tool call actor failed: the progress could not be published/);
      await within(2_000, 'the abort of the tool the failed machine left running', long.stopped);
      expect(long.finished()).toBe(false);
      const own = h.updates.filter((e) => e.turnId === turnId).map((e) => e.update);
      expect(own.find((u) => u.type === 'tool_call_finished')).toMatchObject({ status: 'outcome_unknown' });
      fault.onCallProgress = false;
      expect((await h.run('again')).outcome).toMatchObject({ status: 'completed' });
    } finally {
      fault.onCallProgress = false;
    }
  });
});
