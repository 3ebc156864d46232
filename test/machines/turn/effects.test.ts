/**
 * The Turn's effects actor (src/machines/turn/effects.ts, branch perf-turn): its two slots keep the
 * guarantees an invoked callback actor gave the model call and a direct call's run. Nothing a run
 * reports reaches the Turn once it was stopped; its teardown runs once, on a stop, on its last event
 * or when the effects actor itself stops; a start stops the run still in its slot; commands reach
 * only the run in progress. A parent machine that records what reaches it stands in for the Turn.
 */
import { describe, expect, it } from 'vitest';
import { assign, createActor, setup, type AnyEventObject } from 'xstate';
import { hostTurnEffects, SLOT_LAST_EVENTS, type ModelCallEffect, type ToolRunEffect } from '../../../src/machines/turn/effects.js';

interface Probe {
  /** Each run's input, `sendBack`, the commands it received and how often its teardown ran. */
  runs: Array<{ input: any; send: (event: AnyEventObject) => void; received: AnyEventObject[]; teardowns: number }>;
}

function probe(): Probe & { effect: ModelCallEffect & ToolRunEffect } {
  const runs: Probe['runs'] = [];
  const effect = (({ input, sendBack, receive }: any) => {
    const run = { input, send: sendBack as (event: AnyEventObject) => void, received: [] as AnyEventObject[], teardowns: 0 };
    runs.push(run);
    receive((event: AnyEventObject) => void run.received.push(event));
    return () => {
      run.teardowns += 1;
    };
  }) as ModelCallEffect & ToolRunEffect;
  return { runs, effect };
}

function host() {
  const model = probe();
  const tool = probe();
  const parent = setup({
    types: { context: {} as { got: string[] } },
    actors: { turnEffects: hostTurnEffects({ callModel: model.effect, runToolCall: tool.effect }) },
  }).createMachine({
    context: { got: [] },
    invoke: { id: 'effects', src: 'turnEffects' },
    on: { '*': { actions: assign({ got: ({ context, event }) => [...context.got, event.type] }) } },
  });
  const actor = createActor(parent).start();
  const effects = actor.getSnapshot().children.effects!;
  return { actor, model, tool, send: (event: any) => effects.send(event), got: () => actor.getSnapshot().context.got };
}

describe('the Turn effects actor', () => {
  it('a stopped run reaches the Turn no more, its teardown runs once, and commands stop reaching it', () => {
    const h = host();
    h.send({ type: 'effects.model.start', input: { n: 1 } });
    const run = h.model.runs[0]!;
    expect(run.input).toEqual({ n: 1 });
    run.send({ type: 'model.sampled' });
    h.send({ type: 'model.persist', draft: {}, end: null });
    expect(run.received.map((e) => e.type)).toEqual(['model.persist']);
    h.send({ type: 'effects.model.stop' });
    h.send({ type: 'effects.model.stop' });
    run.send({ type: 'model.call_recorded' });
    run.send({ type: 'model.failed' });
    h.send({ type: 'model.persist', draft: {}, end: null });
    expect(h.got()).toEqual(['model.sampled']);
    expect(run.teardowns).toBe(1);
    expect(run.received).toHaveLength(1);
  });

  it('a last event ends the run after the Turn took it: later events are dropped, the teardown runs once, no stop is needed', () => {
    const h = host();
    for (const [slot, last] of [['model', 'model.persisted'], ['tool', 'tool.recorded']] as const) {
      expect(SLOT_LAST_EVENTS[slot].has(last)).toBe(true);
      h.send({ type: `effects.${slot}.start`, input: {} });
      const run = (slot === 'model' ? h.model : h.tool).runs.at(-1)!;
      run.send({ type: last });
      run.send({ type: last });
      expect(run.teardowns).toBe(1);
      h.send({ type: `effects.${slot}.stop` });
      expect(run.teardowns).toBe(1);
    }
    expect(h.got()).toEqual(['model.persisted', 'tool.recorded']);
  });

  it('a start stops the run still in its slot; commands reach only the new one; the other slot is untouched', () => {
    const h = host();
    h.send({ type: 'effects.tool.start', input: { call: 1 } });
    h.send({ type: 'effects.model.start', input: {} });
    h.send({ type: 'effects.tool.start', input: { call: 2 } });
    const [first, second] = h.tool.runs;
    expect(first!.teardowns).toBe(1);
    first!.send({ type: 'tool.finished' });
    h.send({ type: 'tool.authorize', args: {} });
    h.send({ type: 'toolcall.cancel' });
    expect(first!.received).toEqual([]);
    expect(second!.received.map((e) => e.type)).toEqual(['tool.authorize', 'toolcall.cancel']);
    second!.send({ type: 'tool.finished' });
    expect(h.got()).toEqual(['tool.finished']);
    expect(h.model.runs[0]!.teardowns).toBe(0);
  });

  it('stopping the effects actor (the Turn ends or is stopped) tears down both live runs', () => {
    const h = host();
    h.send({ type: 'effects.model.start', input: {} });
    h.send({ type: 'effects.tool.start', input: {} });
    h.actor.stop();
    expect([h.model.runs[0]!.teardowns, h.tool.runs[0]!.teardowns]).toEqual([1, 1]);
  });

  it('a run that reports its last event as it starts is ended once it returned', () => {
    const runs: number[] = [];
    const immediate = (({ sendBack }: any) => {
      sendBack({ type: 'model.failed' });
      return () => void runs.push(1);
    }) as ModelCallEffect;
    const parent = setup({ actors: { turnEffects: hostTurnEffects({ callModel: immediate, runToolCall: immediate as never }) } }).createMachine({
      invoke: { id: 'effects', src: 'turnEffects' },
    });
    const actor = createActor(parent).start();
    actor.getSnapshot().children.effects!.send({ type: 'effects.model.start', input: {} as never });
    expect(runs).toEqual([1]);
  });
});
