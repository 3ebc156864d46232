/**
 * Issue 14 point 3: a tool call that needs nobody (the policy allows it without a card, no control
 * tool) runs in the Turn's own effects actor (one run for the whole call, no actor of its own), without a tool-call machine; a call that has to wait
 * (a card) gets the machine, started at its wait. Every phase stays visible: the Turn's state and
 * the snapshot show the running call, its updates go out, and a cancel mid-call stops the tool and
 * records it.
 */
import type { AnyActorRef, InspectionEvent } from 'xstate';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool } from '../../../src/services/tools/define.js';
import type { PermissionMode } from '../../../src/protocol/input.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { UNCONFIRMED_STOP_TEXT } from '../../../src/protocol/model-texts.js';
import { usePglite } from '../../support/databases.js';
import { harness, updateTypes } from '../../support/harness.js';

/**
 * Records every actor the runtime creates, by machine id (`turn`, `toolCall`) or invoke id, and
 * each run the Turn starts in its effects actor's tool slot (`effects.tool.start`, branch perf-turn).
 */
function actorLog() {
  const actors: Array<{ name: string; ref: AnyActorRef }> = [];
  const toolRuns: AnyActorRef[] = [];
  const inspect = (event: InspectionEvent) => {
    if (event.type === '@xstate.event' && event.event.type === 'effects.tool.start') toolRuns.push(event.actorRef as AnyActorRef);
    if (event.type !== '@xstate.actor') return;
    const ref = event.actorRef as AnyActorRef;
    const logic = (ref as unknown as { logic?: { id?: unknown; states?: unknown } }).logic;
    const name = typeof logic?.id === 'string' && logic.states ? `machine ${logic.id}` : ref.id;
    actors.push({ name, ref });
  };
  return { actors, toolRuns, inspect, named: (name: string) => actors.filter((a) => a.name === name) };
}

describe('a tool call run by the Turn itself', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  it('runs without a tool-call machine, shows as executing in the Turn and the snapshot, and a cancel mid-call stops and records it', async () => {
    const log = actorLog();
    const h = await harness(storage, [{ toolCalls: [{ name: 'slow', arguments: { ms: 60_000 }, callId: 's' }] }], { inspect: log.inspect });
    const turnId = await h.start('wait');
    await h.waitFor((e) => e.update.type === 'tool_call_progress');

    expect(log.named('machine toolCall')).toEqual([]);
    const turn = log.named('machine turn').at(-1)!.ref;
    expect(turn.getSnapshot().value).toEqual({ tools: { run: { executing: 'running' } } });
    expect(h.session.snapshot().runtime).toMatchObject({ type: 'running', phase: 'running_tools', toolCalls: [{ providerCallId: 's', toolName: 'slow', status: 'executing' }] });
    // The Turn's one effects actor validates, authorises and runs the call, in its tool slot: no
    // actor of the call's own (issue 14 point 3).
    const effects = log.named('effects').map((a) => a.ref);
    expect(effects.map((ref) => ref._parent)).toEqual([turn]);
    expect(log.toolRuns).toEqual(effects);
    expect(log.named('run')).toEqual([]);
    expect(log.named('execute')).toEqual([]);

    await h.session.cancelTurn(turnId);
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
    const finished = h.updates.find((e) => e.update.type === 'tool_call_finished')!.update;
    expect(finished).toMatchObject({ providerCallId: 's', status: 'cancelled' });
    expect(updateTypes(h.updates)).toEqual(expect.arrayContaining(['tool_call_started', 'tool_call_progress', 'tool_call_finished', 'turn_finished']));
    // The cancelled result is stored as the call's answer (a tool never ends without one).
    const stored = await storage.listMessages(h.session.sessionId);
    expect(stored.filter((m) => m.role === 'tool').map((m) => m.providerCallId)).toEqual(['s']);
    expect(log.named('machine toolCall')).toEqual([]);
    // The same run recorded it: no actor of its own for the write.
    expect(log.toolRuns).toHaveLength(1);
    expect(log.named('record')).toEqual([]);
  });

  it('a tool that ignores its abort: the cancel grace is an after transition of executing.stopping, on the Turn and on the tool-call machine alike, and the call is stored outcome_unknown', async () => {
    // Never settles and never looks at its signal: a stop it cannot confirm.
    const stubborn = defineTool({
      name: 'stubborn',
      description: 'Ignores its abort.',
      parameters: z.object({ ask: z.boolean().default(false) }),
      authorize: ({ ask }) =>
        ask
          ? { kind: 'card', card: { toolName: 'stubborn', kind: 'approval', summary: 'run stubborn', environmentId: 'local', grantKey: 'stubborn' } }
          : { kind: 'execute' },
      execute: () => new Promise<string>(() => undefined),
    });
    for (const ask of [false, true]) {
      const moves: string[] = [];
      const inspect = (event: InspectionEvent) => {
        if (event.type !== '@xstate.snapshot') return;
        const value = (event.snapshot as { value?: unknown }).value;
        if (value !== undefined) moves.push(JSON.stringify(value));
      };
      const h = await harness(storage, [{ toolCalls: [{ name: 'stubborn', arguments: { ask }, callId: 'u' }] }], { tools: [stubborn], toolCancelGraceMs: 150, inspect });
      const turnId = await h.start('stop it');
      if (ask) {
        const requested = await h.waitFor((e) => e.update.type === 'permission_requested');
        await h.session.resolvePermission(turnId, (requested.update as { toolCallId: string }).toolCallId, 'allow_once');
      }
      await h.waitFor((e) => e.update.type === 'tool_call_started');
      const stopping = ask ? JSON.stringify({ executing: 'stopping' }) : JSON.stringify({ tools: { run: { executing: 'stopping' } } });
      while (!moves.includes(stopping.replace('stopping', 'running'))) await new Promise((r) => setTimeout(r, 5));
      const cancelledAt = Date.now();
      await h.session.cancelTurn(turnId);
      expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
      expect(Date.now() - cancelledAt).toBeGreaterThanOrEqual(140);
      // The chart showed the stop it waited for: the Turn's own run, or the tool-call machine's.
      expect(moves).toContain(stopping);
      const finished = h.updates.find((e) => e.update.type === 'tool_call_finished')!.update;
      expect(finished).toMatchObject({ providerCallId: 'u', status: 'outcome_unknown', text: UNCONFIRMED_STOP_TEXT });
      const stored = await storage.listMessages(h.session.sessionId);
      expect(stored.filter((m) => m.role === 'tool').map((m) => (m.content[0] as { status: string }).status)).toEqual(['outcome_unknown']);
    }
  });

  it('a mode switch while the call is being authorised does not reach its run: it runs and is recorded under the mode it was authorised in', async () => {
    let release!: () => void;
    const authorizing = new Promise<void>((r) => (release = r));
    let asked!: () => void;
    const askedP = new Promise<void>((r) => (asked = r));
    const seen: Array<{ authorizedIn: PermissionMode; ranIn: PermissionMode }> = [];
    let authorizedIn: PermissionMode | null = null;
    const probe = defineTool({
      name: 'probe',
      description: 'Reports the mode it was authorised and run in.',
      parameters: z.object({}),
      authorize: async (_args, ctx) => {
        authorizedIn = ctx.permissionMode;
        asked();
        await authorizing;
        return { kind: 'execute' };
      },
      execute: (_args, ctx) => {
        seen.push({ authorizedIn: authorizedIn!, ranIn: ctx.permissionMode });
        return 'probed';
      },
    });
    const h = await harness(storage, [{ toolCalls: [{ name: 'probe', arguments: {}, callId: 'p' }] }, { text: 'done' }], { tools: [probe] });
    const turnId = await h.start('probe');
    await askedP;
    await h.session.setPermissionMode(authorizedIn === 'auto' ? 'accept_edits' : 'auto');
    release();
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'done' });
    expect(seen).toHaveLength(1);
    expect(seen[0]!.ranIn).toBe(seen[0]!.authorizedIn);
  });

  it('a call that needs a card gets the tool-call machine, started at its wait; an auto-allowed call in the same turn does not', async () => {
    const log = actorLog();
    const h = await harness(
      storage,
      [
        { toolCalls: [{ name: 'echo', arguments: { text: 'a' }, callId: 'e' }] },
        { toolCalls: [{ name: 'guarded', arguments: { action: 'x' }, callId: 'g' }] },
        { text: 'done' },
      ],
      { inspect: log.inspect },
    );
    const turnId = await h.start('go');
    const asked = await h.waitFor((e) => e.update.type === 'permission_requested');
    const machines = log.named('machine toolCall');
    expect(machines).toHaveLength(1);
    expect(machines[0]!.ref.getSnapshot().value).toBe('waiting_permission');
    // The machine did not validate or authorise again: the Turn did, once per call.
    expect(log.toolRuns).toHaveLength(2);
    expect(h.session.snapshot().runtime).toMatchObject({ phase: 'waiting_permission', toolCalls: [{ providerCallId: 'g', status: 'waiting_permission' }] });

    await h.session.resolvePermission(turnId, (asked.update as { toolCallId: string }).toolCallId, 'allow_once');
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'done' });
    expect(h.updates.filter((e) => e.update.type === 'tool_call_started')).toHaveLength(2);
    expect(h.updates.filter((e) => e.update.type === 'tool_call_finished').map((e) => (e.update as { status: string }).status)).toEqual(['succeeded', 'succeeded']);
    expect(log.named('machine toolCall')).toHaveLength(1);
  });
});
