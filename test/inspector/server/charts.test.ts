/**
 * The drawn statecharts come from the machine definitions: every state node, every transition of
 * `toDirectedGraph`, and the eventless (`always`) transitions it leaves out.
 */
import { describe, expect, it } from 'vitest';
import type { AnyStateMachine } from 'xstate';
import { getStateNodes, toDirectedGraph } from 'xstate/graph';
import { machineChart, type ChartNode } from '../../../src/inspector/server/charts.js';
import { sessionMachine } from '../../../src/machines/session/machine.js';
import { toolCallMachine } from '../../../src/machines/tool-call.js';
import { turnMachine } from '../../../src/machines/turn.js';

function flatten(node: ChartNode): ChartNode[] {
  return [node, ...node.children.flatMap(flatten)];
}

function graphEdgeCount(machine: AnyStateMachine): number {
  const count = (node: ReturnType<typeof toDirectedGraph>): number => node.edges.length + node.children.reduce((n, c) => n + count(c), 0);
  return count(toDirectedGraph(machine));
}

describe('machineChart', () => {
  it.each([
    ['session', sessionMachine],
    ['turn', turnMachine],
    ['toolCall', toolCallMachine],
  ] as const)('%s: every state node of the definition, and every transition including the eventless ones', (id, machine) => {
    const chart = machineChart(machine);
    expect(chart.id).toBe(id);
    const nodes = flatten(chart.root);
    expect(nodes.map((n) => n.id).sort()).toEqual([machine.root, ...getStateNodes(machine)].map((n) => n.id).sort());
    const always = getStateNodes(machine).flatMap((n) => (n.always ?? []).flatMap((t) => t.target ?? [n]));
    expect(chart.edges.filter((e) => e.kind === 'always')).toHaveLength(always.length);
    expect(chart.edges).toHaveLength(graphEdgeCount(machine) + always.length);
    expect(new Set(chart.edges.map((e) => e.id)).size).toBe(chart.edges.length);
    const ids = new Set(nodes.map((n) => n.id));
    for (const edge of chart.edges) {
      expect(ids.has(edge.source)).toBe(true);
      expect(ids.has(edge.target)).toBe(true);
    }
    expect(JSON.parse(JSON.stringify(chart))).toEqual(chart);
  });

  it('the turn chart has its phases, invokes, guards, the always transitions of running_model.checking and tools.next, and a call run by the Turn', () => {
    const chart = machineChart(turnMachine);
    const nodes = new Map(flatten(chart.root).map((n) => [n.path.join('.'), n]));
    expect([...nodes.keys()]).toEqual(
      expect.arrayContaining(['', 'starting', 'running_model', 'running_model.streaming', 'compacting', 'tools.call.waiting_permission', 'completed', 'failed', 'cancelled']),
    );
    expect(nodes.get('running_model')).toMatchObject({ type: 'compound', initial: 'checking' });
    // The model call and a direct call's run are slots of one effects actor invoked for the turn
    // (machines/turn/effects.ts): `streaming` and `tools.run` start and stop them, invoking nothing.
    expect(nodes.get('')!.invoke).toEqual([{ id: 'effects', src: 'turnEffects' }]);
    expect(nodes.get('running_model.streaming')!.invoke).toEqual([]);
    expect(nodes.get('completed')!.type).toBe('final');
    const checking = chart.edges.filter((e) => e.source === 'turn.running_model.checking');
    expect(checking.map((e) => [e.kind, e.guard, e.target])).toEqual([
      ['always', 'stopRequested', 'turn.ending'],
      ['always', 'maxModelCallsReached', 'turn.ending'],
      ['always', 'inline', 'turn.running_model.streaming'],
      ['always', null, 'turn.running_model.draining'],
    ]);
    const next = chart.edges.filter((e) => e.source === 'turn.tools.next').map((e) => [e.guard, e.target]);
    expect(next).toEqual([
      ['batchDone', 'turn.running_model'],
      ['stopRequested', 'turn.tools.cancelling_remaining'],
      [null, 'turn.tools.run'],
    ]);
    // A call runs as the Turn's own actors; only a card to ask or a control tool spawns the tool-call machine.
    // The effects actor's tool slot validates, and authorises, runs and records when the chart,
    // entering the state that shows it, sends `tool.authorize`, `tool.execute` or `tool.record`.
    expect(nodes.get('tools.run')!.invoke).toEqual([]);
    expect(['validating', 'authorizing', 'executing', 'recording'].map((s) => nodes.get(`tools.run.${s}`)!.invoke)).toEqual([[], [], [], []]);
    const recorded = chart.edges.filter((e) => e.source === 'turn.tools.run.recording').map((e) => [e.event, e.guard, e.target]);
    // The batch's last call goes on to the model itself (perf-steps: no `tools.next` hop a step).
    expect(recorded).toEqual([
      ['tool.recorded', 'directTerminal', 'turn.tools.cancelling_remaining'],
      ['tool.recorded', 'lastOfBatch', 'turn.running_model'],
      ['tool.recorded', null, 'turn.tools.next'],
      ['tool.record_failed', null, 'turn.tools.cancelling_remaining'],
    ]);
    // A stored answer with tool calls starts the first call itself unless a stop was noted.
    const persisted = chart.edges.filter((e) => e.source === 'turn.running_model.streaming.persisting' && e.event === 'model.persisted').map((e) => [e.guard, e.target]);
    expect(persisted.slice(-2)).toEqual([
      ['stopRequested', 'tools'],
      [null, 'turn.tools.run'],
    ]);
    expect(nodes.get('tools.call')!.invoke).toEqual([{ id: 'toolCall', src: 'toolCall' }]);
    // The cancel grace is an `after` edge of the stop the Turn and the tool-call machine wait for.
    const graces = [machineChart(turnMachine), machineChart(toolCallMachine)].flatMap((c) =>
      c.edges.filter((e) => e.kind === 'after').map((e) => [e.source, e.event.split('.')[2], e.target]),
    );
    expect(graces).toEqual([
      ['turn.tools.run.executing.stopping', 'toolCancelGrace', 'turn.tools.run.recording'],
      ['toolCall.executing.stopping', 'toolCancelGrace', 'toolCall.recording'],
    ]);
    const toMachine = chart.edges.filter((e) => e.target === 'turn.tools.call' && e.source.startsWith('turn.tools.run')).map((e) => [e.source, e.event, e.guard]);
    expect(toMachine).toEqual([
      ['turn.tools.run.validating', 'tool.validated', 'isControl'],
      ['turn.tools.run.authorizing', 'tool.authorized', null],
    ]);
    const streaming = chart.edges.filter((e) => e.source === 'turn.running_model.streaming');
    // One model actor spans the call's states and the commit: `persisting` is a state of
    // `streaming`, which invokes it; the actor reports its failure as an event (no done or error
    // event: a stream that ends without a completion is its own `model_protocol_error`).
    expect(['sampling', 'requesting', 'receiving', 'persisting'].map((s) => nodes.get(`running_model.streaming.${s}`)!.invoke)).toEqual([[], [], [], []]);
    expect(streaming.filter((e) => e.kind === 'done' || e.kind === 'error')).toEqual([]);
    const receiving = chart.edges.filter((e) => e.source === 'turn.running_model.streaming.receiving');
    expect(receiving).toContainEqual(expect.objectContaining({ event: 'model.completed', kind: 'event', target: 'turn.running_model.streaming.persisting', targetless: false }));
    expect(receiving).toContainEqual(expect.objectContaining({ event: 'model.text_delta', kind: 'event', targetless: true }));
    expect(streaming).toContainEqual(expect.objectContaining({ event: 'model.failed', kind: 'event', target: 'turn.compacting' }));
    const persisting = chart.edges.filter((e) => e.source === 'turn.running_model.streaming.persisting');
    expect(persisting.map((e) => [e.event, e.target])).toEqual([
      ['model.persisted', 'turn.ending'],
      ['model.persisted', 'turn.ending'],
      ['model.persisted', 'turn.ending'],
      ['model.persisted', 'turn.running_model.checking'],
      ['model.persisted', 'tools'],
      ['model.persisted', 'turn.tools.run'],
      ['model.persist_failed', 'turn.ending'],
    ]);
  });
});
