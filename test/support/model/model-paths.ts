/**
 * Path generation: xstate/graph builds the adjacency map of the composed real machines under a world
 * configuration, `getShortestPaths` gives the shortest way to every state, and a greedy cover picks,
 * for every chart transition not yet fired, the shortest path that fires it and returns the session
 * to rest. Every chosen path is re-simulated from the start, so its expected states are exact.
 */
import { getAdjacencyMap, getShortestPaths } from 'xstate/graph';

type Edge = { event: unknown; state: unknown };
const edgesOf = (node: { transitions: Record<string, unknown> }): Edge[] => Object.values(node.transitions) as Edge[];
import { applyStimulus, atRest, initialState, modelLogic, serialize, stimuliFor, type ModelState, type SimReply, type Stimulus, type WorldConfig } from './stimuli.js';

export interface PathStep {
  stimulus: Stimulus;
  state: ModelState;
  reply: SimReply;
}

export interface ModelPath {
  config: WorldConfig;
  steps: PathStep[];
  /** Transition keys the path fires, in order. */
  fired: string[];
  /** The transition this path was chosen for. */
  target: string;
}

export interface Traversal {
  config: WorldConfig;
  states: number;
  edges: number;
  /** Every transition key some edge of the graph fires. */
  reachable: Set<string>;
  adjacency: ReturnType<typeof getAdjacencyMap>;
}

export function traverse(config: WorldConfig, limit = 200_000): Traversal {
  const logic = modelLogic(config);
  const adjacency = getAdjacencyMap(logic, {
    events: (state: unknown) => stimuliFor(state as ModelState, config),
    serializeState: (state: unknown) => serialize(state as ModelState),
    serializeEvent: (event: { type: string }) => event.type,
    limit,
  } as never);
  const reachable = new Set<string>();
  let edges = 0;
  for (const node of Object.values(adjacency)) {
    for (const t of edgesOf(node)) {
      edges += 1;
      for (const key of (t.state as ModelState).last.fired) reachable.add(key);
    }
  }
  return { config, states: Object.keys(adjacency).length, edges, reachable, adjacency };
}

/** Replays stimuli from the initial state; throws if one is not offered where the path uses it. */
export function simulate(config: WorldConfig, stimuli: readonly Stimulus[]): { steps: PathStep[]; fired: string[] } {
  let state = initialState(config);
  const steps: PathStep[] = [];
  const fired: string[] = [...state.last.fired];
  for (const stimulus of stimuli) {
    if (!stimuliFor(state, config).some((s) => s.type === stimulus.type)) {
      throw new Error(`stimulus ${stimulus.type} is not possible in ${serialize(state)}`);
    }
    const next = applyStimulus(state, stimulus, config);
    steps.push({ stimulus, state: next, reply: next.reply });
    fired.push(...next.last.fired);
    state = next;
  }
  return { steps, fired };
}

/**
 * A set of paths that together fire every reachable transition of `traversal`, each ending at rest.
 * `covered` (shared across configurations) is updated in place.
 */
export function coveringPaths(traversal: Traversal, covered: Set<string>): ModelPath[] {
  const { adjacency, config } = traversal;
  // Shortest prefixes (xstate/graph).
  const shortest = getShortestPaths(modelLogic(config), {
    events: (state: unknown) => stimuliFor(state as ModelState, config),
    serializeState: (state: unknown) => serialize(state as ModelState),
    serializeEvent: (event: { type: string }) => event.type,
  } as never);
  const prefix = new Map<string, Stimulus[]>();
  for (const path of shortest) prefix.set(serialize(path.state as ModelState), path.steps.slice(1).map((s) => s.event as Stimulus));
  prefix.set(serialize(initialState(config)), []);

  // Shortest suffix from every state to a state at rest (reverse BFS).
  const reverse = new Map<string, Array<{ from: string; event: Stimulus }>>();
  for (const [from, node] of Object.entries(adjacency)) {
    for (const t of edgesOf(node)) {
      const to = serialize(t.state as ModelState);
      const list = reverse.get(to) ?? [];
      list.push({ from, event: t.event as Stimulus });
      reverse.set(to, list);
    }
  }
  const suffix = new Map<string, Stimulus[]>();
  const queue: string[] = [];
  for (const [key, node] of Object.entries(adjacency)) {
    if (atRest(node.state as ModelState)) {
      suffix.set(key, []);
      queue.push(key);
    }
  }
  while (queue.length > 0) {
    const to = queue.shift()!;
    for (const { from, event } of reverse.get(to) ?? []) {
      if (suffix.has(from)) continue;
      suffix.set(from, [event, ...suffix.get(to)!]);
      queue.push(from);
    }
  }

  // Candidate edges per transition key, cheapest first.
  const candidates = new Map<string, Array<{ cost: number; stimuli: Stimulus[] }>>();
  for (const [from, node] of Object.entries(adjacency)) {
    const head = prefix.get(from);
    if (!head) continue;
    for (const t of edgesOf(node)) {
      const to = serialize(t.state as ModelState);
      const tail = suffix.get(to);
      if (!tail) continue;
      const stimuli = [...head, t.event as Stimulus, ...tail];
      for (const key of new Set((t.state as ModelState).last.fired)) {
        const list = candidates.get(key) ?? [];
        list.push({ cost: stimuli.length, stimuli });
        candidates.set(key, list);
      }
    }
  }
  const paths: ModelPath[] = [];
  const keys = [...candidates.keys()].sort();
  for (const key of keys) {
    if (covered.has(key)) continue;
    const options = candidates.get(key)!.sort((a, b) => a.cost - b.cost);
    for (const option of options) {
      let simulated: ReturnType<typeof simulate>;
      try {
        simulated = simulate(config, option.stimuli);
      } catch {
        continue;
      }
      if (!simulated.fired.includes(key) || !atRest(simulated.steps[simulated.steps.length - 1]?.state ?? initialState(config))) continue;
      for (const k of simulated.fired) covered.add(k);
      paths.push({ config, steps: simulated.steps, fired: simulated.fired, target: key });
      break;
    }
  }
  return paths;
}
