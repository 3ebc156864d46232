/**
 * @module inspection/charts
 * `machineChart`: the drawable statechart of a machine, read from the machine definition itself:
 * the state tree from `machine.root`, the transitions from `xstate/graph`'s `toDirectedGraph`, plus
 * the eventless (`always`) transitions that `toDirectedGraph` leaves out. Nothing here is drawn by
 * hand, so a change to a machine changes its picture.
 */
import type { AnyStateMachine } from 'xstate';
import { toDirectedGraph, type DirectedGraphNode } from 'xstate/graph';

type AnyStateNode = DirectedGraphNode['stateNode'];
type AnyTransition = DirectedGraphNode['edges'][number]['transition'];

export interface ChartNode {
  /** The state node's id (`turn.running_model.streaming`, or its own `id` such as `tools`). */
  id: string;
  key: string;
  /** Keys from the root; the path a state value names. */
  path: string[];
  type: 'atomic' | 'compound' | 'parallel' | 'final' | 'history';
  /** The key of the initial child of a compound state. */
  initial: string | null;
  /** Invoked actors: the id their done/error events carry and the implementation name. */
  invoke: Array<{ id: string; src: string }>;
  entry: string[];
  exit: string[];
  children: ChartNode[];
}

export type ChartEdgeKind = 'event' | 'always' | 'done' | 'error' | 'after';

export interface ChartEdge {
  id: string;
  source: string;
  target: string;
  /** The event type; `''` for an eventless transition. */
  event: string;
  kind: ChartEdgeKind;
  guard: string | null;
  actions: string[];
  /** A transition without a target only runs actions; it does not leave its state. */
  targetless: boolean;
}

export interface MachineChart {
  id: string;
  root: ChartNode;
  edges: ChartEdge[];
}

function nameOf(item: unknown): string {
  if (typeof item === 'string') return item;
  if (typeof item === 'function') {
    const typed = (item as { type?: unknown }).type;
    if (typeof typed === 'string') return typed;
    // An inline function takes its name from the config key it was written under (`guard`, `actions`).
    return item.name && !['anonymous', 'guard', 'actions', 'entry', 'exit'].includes(item.name) ? item.name : 'inline';
  }
  if (item && typeof item === 'object') {
    const typed = (item as { type?: unknown }).type;
    if (typeof typed === 'string') return typed;
    if (typeof typed === 'function') return nameOf(typed);
  }
  return 'inline';
}

function kindOf(eventType: string): ChartEdgeKind {
  if (eventType === '') return 'always';
  if (eventType.startsWith('xstate.done.actor.')) return 'done';
  if (eventType.startsWith('xstate.error.actor.')) return 'error';
  if (eventType.startsWith('xstate.after.')) return 'after';
  return 'event';
}

function nodeOf(stateNode: AnyStateNode): ChartNode {
  const initialTarget = stateNode.type === 'compound' ? stateNode.initial?.target?.[0] : undefined;
  return {
    id: stateNode.id,
    key: stateNode.key,
    path: [...stateNode.path],
    type: stateNode.type,
    initial: initialTarget ? initialTarget.key : null,
    invoke: stateNode.invoke.map((inv) => ({ id: inv.id, src: typeof inv.src === 'string' ? inv.src : nameOf(inv.src) })),
    entry: stateNode.entry.map(nameOf),
    exit: stateNode.exit.map(nameOf),
    children: Object.values(stateNode.states).map((child) => nodeOf(child as AnyStateNode)),
  };
}

function edgeOf(id: string, source: AnyStateNode, target: AnyStateNode, transition: AnyTransition): ChartEdge {
  const event = String(transition.eventType ?? '');
  return {
    id,
    source: source.id,
    target: target.id,
    event,
    kind: kindOf(event),
    guard: transition.guard === undefined ? null : nameOf(transition.guard),
    actions: transition.actions.map(nameOf),
    targetless: transition.target === undefined,
  };
}

function collectEdges(graphNode: DirectedGraphNode, edges: ChartEdge[]): void {
  for (const edge of graphNode.edges) edges.push(edgeOf(edge.id, edge.source, edge.target, edge.transition));
  const always = graphNode.stateNode.always ?? [];
  always.forEach((transition, index) => {
    const targets = transition.target ?? [graphNode.stateNode];
    targets.forEach((target, targetIndex) => {
      edges.push(edgeOf(`${graphNode.stateNode.id}:always:${index}:${targetIndex}`, graphNode.stateNode, target, transition));
    });
  });
  for (const child of graphNode.children) collectEdges(child, edges);
}

/**
 * The statechart of `machine`, ready to be drawn.
 *
 * @example
 * const chart = machineChart(turnMachine);
 * chart.edges.filter((e) => e.kind === 'always'); // the eventless transitions too
 */
export function machineChart(machine: AnyStateMachine): MachineChart {
  const graph = toDirectedGraph(machine);
  const edges: ChartEdge[] = [];
  collectEdges(graph, edges);
  return { id: machine.id, root: nodeOf(machine.root as AnyStateNode), edges };
}
