/**
 * @module inspection/chart-layout
 * `layoutChart`: places a statechart with ELK's layered algorithm (`elkjs`), so the page only
 * draws: compound states contain their children, every transition that leaves its state is an
 * edge routed by the layout, and each edge's label is a box the layout keeps clear of the states
 * and of the other labels. Text is measured for the monospace font the page draws with
 * (`CHART_FONT`), so the boxes the layout reserves fit the text the page writes in them.
 * Transitions without a target (they run actions and stay) are listed inside their state instead.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type { ElkExtendedEdge, ElkNode } from 'elkjs/lib/elk-api.js';
import { InspectionError } from '../../errors.js';
import type { ChartEdge, ChartNode, MachineChart } from './charts.js';

/** What the page draws text with; `CHAR_WIDTH` is that font's advance (0.602 em for DejaVu Sans Mono). */
export const CHART_FONT = { family: 'DejaVu Sans Mono, Menlo, Consolas, monospace', size: 11, lineHeight: 15 } as const;
const CHAR_WIDTH = 0.61 * CHART_FONT.size;
const PAD = 8;
const LABEL_MAX = 44;

export interface LaidOutState {
  id: string;
  x: number;
  y: number;
  width: number;
  height: number;
  /** The lines written at the top of the box: the key, then `invoke <src>` lines, then internal transitions. */
  lines: Array<{ text: string; kind: 'key' | 'invoke' | 'internal' }>;
}

export interface LaidOutEdge {
  id: string;
  /** The route, start to end, in chart coordinates. */
  points: Array<{ x: number; y: number }>;
  label: { text: string; guard: string | null; x: number; y: number; width: number; height: number } | null;
}

export interface ChartLayout {
  width: number;
  height: number;
  font: typeof CHART_FONT;
  states: LaidOutState[];
  edges: LaidOutEdge[];
}

/** `xstate.done.actor.callModel` → `done: callModel`, `''` → `always`. */
export function edgeLabel(edge: ChartEdge): string {
  switch (edge.kind) {
    case 'always':
      return 'always';
    case 'done':
      return `done: ${edge.event.slice('xstate.done.actor.'.length)}`;
    case 'error':
      return `error: ${edge.event.slice('xstate.error.actor.'.length)}`;
    case 'after':
      return `after ${edge.event.split('.')[2] ?? ''}`;
    case 'event':
      return edge.event;
    default: {
      const never: never = edge.kind;
      return String(never);
    }
  }
}

/**
 * ELK runs synchronously for seconds on a large chart; in a worker thread it cannot stall the
 * server's event streams. The worker is this source (CommonJS, as elkjs is), so it runs the same
 * from `src/` under a TypeScript loader and from the built `dist/`.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const ELK = require(workerData.elkPath);
new ELK().layout(workerData.graph).then(
  (out) => parentPort.postMessage({ out }),
  (error) => parentPort.postMessage({ error: String(error && error.message || error) }),
);
`;

function runElk(graph: ElkNode): Promise<ElkNode> {
  const elkPath = createRequire(import.meta.url).resolve('elkjs/lib/elk.bundled.js');
  return new Promise((resolve, reject) => {
    const worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { elkPath, graph } });
    worker.once('message', (message: { out?: ElkNode; error?: string }) => {
      void worker.terminate();
      if (message.out) resolve(message.out);
      else reject(new InspectionError('inspector_unavailable', `the chart layout failed: ${message.error ?? 'no result'}`));
    });
    worker.once('error', (error) => reject(new InspectionError('inspector_unavailable', `the chart layout failed: ${error.message}`, { cause: error })));
  });
}

/** Layouts by chart content: the machines do not change while a process runs. */
const cache = new Map<string, Promise<ChartLayout>>();

function clip(text: string): string {
  return text.length > LABEL_MAX ? `${text.slice(0, LABEL_MAX - 1)}…` : text;
}

function textWidth(text: string): number {
  return Math.ceil(text.length * CHAR_WIDTH);
}

function headerLines(node: ChartNode, internal: ChartEdge[], isRoot: boolean): LaidOutState['lines'] {
  const lines: LaidOutState['lines'] = [{ text: isRoot ? `${node.key} (machine)` : node.type === 'final' ? `${node.key} (final)` : node.key, kind: 'key' }];
  for (const inv of node.invoke) lines.push({ text: clip(`invoke ${inv.src}`), kind: 'invoke' });
  for (const edge of internal) lines.push({ text: clip(`${edgeLabel(edge)}${edge.guard ? ` [${edge.guard}]` : ''} ⟲`), kind: 'internal' });
  return lines;
}

/**
 * Lays out `chart`. Deterministic: the same chart always gets the same picture.
 *
 * @example
 * const layout = await layoutChart(machineChart(turnMachine));
 * layout.states.find((s) => s.id === 'turn.running_model');
 */
export function layoutChart(chart: MachineChart): Promise<ChartLayout> {
  const key = JSON.stringify(chart);
  let layout = cache.get(key);
  if (!layout) {
    layout = computeLayout(chart);
    cache.set(key, layout);
    // A failed layout is tried again on the next request.
    layout.catch(() => cache.delete(key));
  }
  return layout;
}

async function computeLayout(chart: MachineChart): Promise<ChartLayout> {
  const internal = new Map<string, ChartEdge[]>();
  const routed: ChartEdge[] = [];
  for (const edge of chart.edges) {
    if (edge.targetless || edge.target === edge.source) {
      if (!internal.has(edge.source)) internal.set(edge.source, []);
      internal.get(edge.source)!.push(edge);
    } else {
      routed.push(edge);
    }
  }
  const lines = new Map<string, LaidOutState['lines']>();
  const ancestors = new Map<string, string[]>();

  function toElk(node: ChartNode, isRoot: boolean, path: string[]): ElkNode {
    const own = headerLines(node, internal.get(node.id) ?? [], isRoot);
    lines.set(node.id, own);
    ancestors.set(node.id, path);
    const headerHeight = own.length * CHART_FONT.lineHeight + PAD;
    const headerWidth = Math.max(...own.map((l) => textWidth(l.text))) + 2 * PAD;
    if (node.children.length === 0) {
      return { id: node.id, width: Math.max(headerWidth, 60), height: headerHeight + PAD / 2 };
    }
    return {
      id: node.id,
      layoutOptions: {
        'elk.padding': `[top=${headerHeight + PAD},left=${PAD * 2},bottom=${PAD * 2},right=${PAD * 2}]`,
        'elk.nodeSize.constraints': 'MINIMUM_SIZE',
        'elk.nodeSize.minimum': `(${headerWidth},${headerHeight + 20})`,
      },
      children: node.children.map((child) => toElk(child, false, [...path, node.id])),
    };
  }

  const root = toElk(chart.root, true, []);
  const edges: ElkExtendedEdge[] = routed.map((edge) => {
    const text = clip(edgeLabel(edge));
    const guard = edge.guard ? clip(`[${edge.guard}]`) : null;
    const width = Math.max(textWidth(text), guard ? textWidth(guard) : 0) + 6;
    const height = (guard ? 2 : 1) * CHART_FONT.lineHeight + 2;
    return { id: edge.id, sources: [edge.source], targets: [edge.target], labels: [{ id: `${edge.id}:label`, text, width, height }] };
  });
  const graph: ElkNode = {
    id: '__chart__',
    layoutOptions: {
      'elk.algorithm': 'layered',
      'elk.direction': 'DOWN',
      'elk.hierarchyHandling': 'INCLUDE_CHILDREN',
      'elk.edgeRouting': 'ORTHOGONAL',
      'elk.edgeLabels.inline': 'false',
      'elk.layered.edgeLabels.sideSelection': 'SMART_DOWN',
      'elk.spacing.nodeNode': '28',
      'elk.spacing.edgeNode': '14',
      'elk.spacing.edgeEdge': '10',
      'elk.spacing.edgeLabel': '4',
      'elk.spacing.labelLabel': '6',
      'elk.layered.spacing.nodeNodeBetweenLayers': '34',
      'elk.layered.spacing.edgeNodeBetweenLayers': '14',
      'elk.layered.spacing.edgeEdgeBetweenLayers': '10',
      'elk.layered.nodePlacement.strategy': 'BRANDES_KOEPF',
      'elk.layered.considerModelOrder.strategy': 'NODES_AND_EDGES',
      'elk.padding': '[top=12,left=12,bottom=12,right=12]',
    },
    children: [root],
    edges,
  };
  const out = await runElk(graph);

  // ELK gives positions relative to the parent node; edges relative to their container.
  const absolute = new Map<string, { x: number; y: number }>();
  const states: LaidOutState[] = [];
  const visit = (node: ElkNode, ox: number, oy: number) => {
    const x = ox + (node.x ?? 0);
    const y = oy + (node.y ?? 0);
    absolute.set(node.id, { x, y });
    if (node.id !== '__chart__') states.push({ id: node.id, x, y, width: node.width ?? 0, height: node.height ?? 0, lines: lines.get(node.id) ?? [] });
    for (const child of node.children ?? []) visit(child, x, y);
  };
  visit(out, 0, 0);

  const byId = new Map(routed.map((e) => [e.id, e]));
  const laidEdges: LaidOutEdge[] = [];
  const collect = (node: ElkNode) => {
    for (const edge of (node.edges ?? []) as Array<ElkExtendedEdge & { container?: string }>) {
      const origin = absolute.get(edge.container ?? node.id) ?? { x: 0, y: 0 };
      const points: LaidOutEdge['points'] = [];
      for (const section of edge.sections ?? []) {
        points.push({ x: origin.x + section.startPoint.x, y: origin.y + section.startPoint.y });
        for (const bend of section.bendPoints ?? []) points.push({ x: origin.x + bend.x, y: origin.y + bend.y });
        points.push({ x: origin.x + section.endPoint.x, y: origin.y + section.endPoint.y });
      }
      const label = edge.labels?.[0];
      const source = byId.get(edge.id);
      laidEdges.push({
        id: edge.id,
        points,
        label:
          label && source
            ? {
                text: clip(edgeLabel(source)),
                guard: source.guard ? clip(`[${source.guard}]`) : null,
                x: origin.x + (label.x ?? 0),
                y: origin.y + (label.y ?? 0),
                width: label.width ?? 0,
                height: label.height ?? 0,
              }
            : null,
      });
    }
    for (const child of node.children ?? []) collect(child);
  };
  collect(out);
  return { width: Math.ceil(out.width ?? 0), height: Math.ceil(out.height ?? 0), font: CHART_FONT, states, edges: laidEdges };
}
