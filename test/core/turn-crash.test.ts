/**
 * A Turn that crashes ends, durably and visibly (attack round 3: an exception in a Turn chart guard
 * left the turn waiting forever with no outcome). Each fault is injected through the public API
 * where the chart itself evaluates host-shaped data: a tool whose schema transform yields arguments
 * the doom-loop guard cannot serialise (a throwing `toJSON`, or nesting deep enough to overflow the
 * stack), and a storage whose write throws a plain bug. (A result whose `status` getter threw was a
 * fourth; host-made results no longer reach the chart uncopied, so that case, and the tool-call
 * machine's, are test/core/tool-call-crash.test.ts with a helper made to throw.) What must hold for each: the turn ends `failed` with a stable code, its row is
 * no longer `running` before the host hears the end, the host hears `turn_finished` exactly once
 * (sequenced, last), the session takes the next turn, and nothing reaches `onActorError`. Also: a
 * refused end, a shutdown during the end write, an explorer whose turn crashes, and a tool that
 * returns nothing (an unhandled rejection before).
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { SessionHandle } from '../../src/session-handle.js';
import { defineTool, type AnyTool } from '../../src/services/tools/define.js';
import type { ScriptedStep } from '../../src/services/model/scripted.js';
import type { SessionStorage } from '../../src/storage/storage.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { harness, type Harness } from '../support/harness.js';
import { assertStoredInvariants } from '../support/invariants.js';
import { backends, useBackend, usePglite } from '../support/databases.js';
import { faultyStorage, within } from '../support/faults.js';
import { createCore } from '../../src/core.js';
import { agentMessages, router } from '../services/agents/support.js';

/** Arguments whose serialisation throws: the doom-loop guard compares calls by canonical JSON. */
const throwingArgsTool = defineTool({
  name: 'hostile_args',
  description: 'Its parsed arguments cannot be serialised.',
  parameters: z.object({ text: z.string() }).transform((value) => ({
    ...value,
    toJSON(): never {
      throw new Error('the arguments refuse to be serialised');
    },
  })),
  execute: () => 'ran',
});

/** Arguments nested past any stack: the input passes the depth bound, the transform deepens it. */
const deepArgsTool = defineTool({
  name: 'deep_args',
  description: 'Its parsed arguments nest 200,000 levels deep.',
  parameters: z.object({ text: z.string() }).transform(() => {
    let value: unknown = 1;
    for (let i = 0; i < 200_000; i++) value = [value];
    return value;
  }),
  execute: () => 'ran',
});

/** A storage whose first `commitAssistantMessage` throws a plain TypeError (a bug, not a StorageError). */
function buggyAssistantWrites(inner: SessionStorage): SessionStorage {
  let broken = true;
  return new Proxy(inner, {
    get(target, key, receiver) {
      if (key === 'commitAssistantMessage' && broken) {
        broken = false;
        return () => Promise.reject(new TypeError('commitAssistantMessage is broken'));
      }
      const value = Reflect.get(target, key, receiver) as unknown;
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/** The turn's outcome; a turn that never ends fails the test instead of hanging it. */
function outcomeWithin(session: SessionHandle, turnId: string) {
  return within(5_000, `the end of turn ${turnId}`, session.waitForTurn(turnId));
}

interface Case {
  name: string;
  tools: AnyTool[];
  steps: ScriptedStep[];
  storage?: (inner: SessionStorage) => SessionStorage;
  /** Answers the card when the case asks for one. */
  approve?: boolean;
  code: string;
  message: RegExp;
}

const cases: Case[] = [
  {
    name: '(a) a guard of the Turn throws on tool.validated from its run actor',
    tools: [throwingArgsTool],
    steps: [{ toolCalls: [{ name: 'hostile_args', arguments: { text: 'a' } }] }],
    code: 'actor_stopped',
    message: /guard 'isDoomLoop'[\s\S]*the arguments refuse to be serialised/,
  },
  // (a) an assign of the Turn throws on tool.finished: test/core/tool-call-crash.test.ts (a helper made to throw).
  {
    name: '(b) an invoked promise actor rejects with a plain bug',
    tools: [],
    steps: [{ text: 'an answer that cannot be stored' }],
    storage: buggyAssistantWrites,
    code: 'persistence_error',
    message: /commitAssistantMessage is broken/,
  },
  {
    name: '(c) a guard overflows the stack (RangeError: Maximum call stack size exceeded)',
    tools: [deepArgsTool],
    steps: [{ toolCalls: [{ name: 'deep_args', arguments: { text: 'a' } }] }],
    code: 'actor_stopped',
    message: /Maximum call stack size exceeded/,
  },
  // (d) the tool-call machine of an approved call throws: test/core/tool-call-crash.test.ts.
];

for (const backend of backends) {
  describe(`a turn that crashes ends, durably and visibly (${backend.name})`, () => {
    let storage: SqlSessionStorage;
    useBackend(backend, (s) => (storage = s));

    for (const c of cases) {
      it(c.name, async () => {
        const actorErrors: unknown[] = [];
        const h: Harness = await harness(storage, [...c.steps, { text: 'the next turn' }], {
          tools: c.tools,
          ...(c.storage ? { storage: c.storage(storage) } : {}),
          onActorError: (_sessionId, error) => actorErrors.push(error),
        });
        // The row as it stood when the host heard the end: written before, not by a later correction.
        const rowAtEnd = new Promise<string | undefined>((resolve) => {
          h.session.updates$.subscribe((e) => {
            if (e.update.type === 'turn_finished') void storage.getTurn(e.turnId!).then((t) => resolve(t?.status));
          });
        });
        if (c.approve) {
          void h.waitFor((e) => e.update.type === 'permission_requested').then((e) =>
            h.session.resolvePermission(e.turnId!, (e.update as { toolCallId: string }).toolCallId, 'allow_once'),
          );
        }
        const turnId = await h.start('crash');
        const outcome = await outcomeWithin(h.session, turnId);

        expect(outcome).toMatchObject({ status: 'failed', code: c.code });
        expect(outcome.status === 'failed' && outcome.message).toMatch(c.message);
        const stored = await storage.getTurn(turnId);
        expect(stored).toMatchObject({ status: 'failed', errorCode: c.code });
        expect(await rowAtEnd).toBe('failed');

        const own = h.updates.filter((e) => e.turnId === turnId);
        const finished = own.filter((e) => e.update.type === 'turn_finished');
        expect(finished).toHaveLength(1);
        expect(own.at(-1)).toBe(finished[0]);
        const sequences = h.updates.map((e) => e.sequence);
        expect(sequences).toEqual(sequences.map((_, i) => i + 1));

        // The session is free again: the next turn runs to its answer on the same session.
        const next = await h.run('again');
        expect(next.outcome).toMatchObject({ status: 'completed' });
        expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: c.code });
        expect(actorErrors).toEqual([]);
        await assertStoredInvariants(storage, h.session.sessionId);
        if (c.code === 'actor_stopped') {
          // No actor of the crashed turn is left to end its calls' spans: the crash's end did.
          // The trace is written behind the turn (the turn's end only starts a flush): wait for it
          // rather than assume that the next turn took longer than the trace write.
          expect((await h.core.flushTrace(10_000)).flushed).toBe(true);
          const spans = await storage.listTraceSpans({ turnId });
          expect(spans.filter((span) => span.status === 'running')).toEqual([]);
          expect(spans.find((span) => span.kind === 'tool_call')).toMatchObject({ status: 'outcome_unknown', errorCode: 'actor_stopped' });
        }
      });
    }
  });
}

describe('the end of a crashed turn when the database refuses it, or the session shuts down meanwhile', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  it('an explorer whose turn crashes reports failed to its parent, which carries on', async () => {
    // The explorer's read tool parses its arguments into something the doom-loop guard cannot serialise.
    const hostileRead = defineTool({ ...throwingArgsTool, name: 'read', description: 'Reads a file.' });
    const model = router(
      (_request, i) =>
        i === 0
          ? { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'kid', message: 'read it' } }, { name: 'wait_agent', arguments: { timeout_ms: 30_000 } }] }
          : { text: 'the parent carried on' },
      () => ({ toolCalls: [{ name: 'read', arguments: { text: 'a' } }] }),
    );
    const core = await createCore({ agents: true, storage, model, tools: [hostileRead], closeStorageOnShutdown: false, worldState: false });
    try {
      const root = await core.createSession({ workingDirectory: process.cwd() });
      const { turnId } = await root.startTurn({ clientRequestId: 'explore', input: [{ type: 'text', text: 'delegate' }] });
      expect(await outcomeWithin(root, turnId)).toMatchObject({ status: 'completed', finalText: 'the parent carried on' });
      const delivered = agentMessages(model.requests.at(-1)!).join('\n');
      expect(delivered).toMatch(/the turn actor failed/);
      const [child] = await storage.listChildSessions(root.sessionId);
      const [childTurn] = await storage.listTurns(child!.id);
      expect(childTurn).toMatchObject({ status: 'failed', errorCode: 'actor_stopped' });
    } finally {
      await core.shutdown();
    }
  });

  it('a tool that returns nothing fails its call as a throw would (no unhandled rejection, no turn left waiting)', async () => {
    const nothingTool = defineTool({
      name: 'returns_nothing',
      description: 'A JavaScript tool that forgot its return.',
      parameters: z.object({}),
      execute: () => undefined as unknown as string,
    });
    const h = await harness(storage, [{ toolCalls: [{ name: 'returns_nothing', arguments: {} }] }, { text: 'carried on' }], { tools: [nothingTool] });
    const turnId = await h.start('call it');
    expect(await outcomeWithin(h.session, turnId)).toMatchObject({ status: 'completed', finalText: 'carried on' });
    const finished = h.updates.find((e) => e.update.type === 'tool_call_finished')!.update;
    expect(finished).toMatchObject({ status: 'failed', error: { code: 'execution_failed' } });
    expect((finished as { text: string }).text).toMatch(/not a tool result \(nothing instead of a string or a result\)/);
  });

  it('a refused end still announces turn_finished once; the next start writes the kept end and the next turn runs', async () => {
    const faulty = faultyStorage(storage);
    const h = await harness(faulty, [{ toolCalls: [{ name: 'hostile_args', arguments: { text: 'a' } }] }, { text: 'the next turn' }], {
      tools: [throwingArgsTool],
    });
    faulty.failOn('finishTurn', 1);
    const turnId = await h.start('crash');
    const outcome = await outcomeWithin(h.session, turnId);
    expect(outcome).toMatchObject({ status: 'failed', code: 'actor_stopped' });
    expect(h.updates.filter((e) => e.turnId === turnId && e.update.type === 'turn_finished')).toHaveLength(1);
    // The database refused the end: the row still runs, and the session says so.
    expect((await storage.getTurn(turnId))!.status).toBe('running');
    expect(h.session.status()).toMatchObject({ type: 'system_error', message: expect.stringMatching(/could not be recorded/) });

    const next = await h.run('again');
    expect(next.outcome).toMatchObject({ status: 'completed' });
    // The next start wrote the end the crash decided, not an `interrupted` of its own.
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'actor_stopped' });
  });

  it('a shutdown asked for while the crashed turn\'s end is being written waits for it, then stops', async () => {
    const faulty = faultyStorage(storage);
    const h = await harness(faulty, [{ toolCalls: [{ name: 'hostile_args', arguments: { text: 'a' } }] }], { tools: [throwingArgsTool] });
    const held = faulty.hold('finishTurn');
    const turnId = await h.start('crash');
    await within(5_000, 'the end write', held.reached);
    // Meanwhile the turn is still the session's: a new one is refused as busy, a cancel has nothing to stop.
    await expect(h.session.startTurn({ clientRequestId: 'other', input: [{ type: 'text', text: 'x' }] })).rejects.toMatchObject({ code: 'busy' });
    await h.session.cancelTurn(turnId);
    const stopping = h.session.shutdown();
    held.release();
    await within(5_000, 'the shutdown', stopping);
    expect(h.session.actorRef.getSnapshot().status).toBe('done');
    expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: 'actor_stopped' });
    expect(h.updates.filter((e) => e.turnId === turnId && e.update.type === 'turn_finished')).toHaveLength(1);
  });
});
