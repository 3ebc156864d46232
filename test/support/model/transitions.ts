/**
 * The transition catalogue of a statechart: every transition definition of every state node (each
 * `on` candidate, each `onDone`/`onError` candidate, each `always` candidate), with a stable key, so
 * that coverage can be measured on the real machines and on their `.provide()`d copies alike.
 */
import type { AnyStateMachine } from 'xstate';

/** The few fields of an XState transition definition that identify it. */
export interface TransitionDefinitionLike {
  source: StateNodeLike;
  eventType: string;
  target?: readonly StateNodeLike[] | undefined;
}

interface StateNodeLike {
  id: string;
  states: Record<string, StateNodeLike>;
  transitions: Map<string, TransitionDefinitionLike[]>;
  always?: TransitionDefinitionLike[] | undefined;
}

export interface TransitionInfo {
  /** `<source state id> | <event type or "always"> | <candidate index>` */
  key: string;
  source: string;
  event: string;
  index: number;
  targets: string[];
}

/** The machine name a transition key belongs to: the root state node id. */
export function machineOf(key: string): string {
  return key.split('|')[0]!.split('.')[0]!;
}

/** The key of a transition definition, or undefined for an initial transition. */
export function transitionKey(def: TransitionDefinitionLike): string | undefined {
  const source = def.source;
  const always = source.always?.indexOf(def) ?? -1;
  if (always >= 0) return `${source.id}|always|${always}`;
  const list = source.transitions.get(def.eventType);
  const index = list ? list.indexOf(def) : -1;
  if (index < 0) return undefined;
  return `${source.id}|${def.eventType}|${index}`;
}

/** Every transition definition of `machine`, in document order. */
export function catalogue(machine: AnyStateMachine): TransitionInfo[] {
  const out: TransitionInfo[] = [];
  const visit = (node: StateNodeLike) => {
    for (const [event, defs] of node.transitions) {
      defs.forEach((def, index) => {
        out.push({ key: `${node.id}|${event}|${index}`, source: node.id, event, index, targets: (def.target ?? []).map((t) => t.id) });
      });
    }
    (node.always ?? []).forEach((def, index) => {
      out.push({ key: `${node.id}|always|${index}`, source: node.id, event: 'always', index, targets: (def.target ?? []).map((t) => t.id) });
    });
    for (const child of Object.values(node.states)) visit(child);
  };
  visit(machine.root as unknown as StateNodeLike);
  return out;
}

/** Covered / total per machine, and what is left. */
export interface CoverageReport {
  machine: string;
  total: number;
  covered: number;
  uncovered: TransitionInfo[];
}

export function coverageReport(machine: AnyStateMachine, covered: ReadonlySet<string>): CoverageReport {
  const all = catalogue(machine);
  const uncovered = all.filter((t) => !covered.has(t.key));
  return { machine: machine.id, total: all.length, covered: all.length - uncovered.length, uncovered };
}

export function formatCoverage(report: CoverageReport, reasons: Record<string, string> = {}): string {
  const pct = ((100 * report.covered) / report.total).toFixed(1);
  const lines = [`${report.machine}: ${report.covered}/${report.total} transitions (${pct}%)`];
  for (const t of report.uncovered) {
    lines.push(`  not covered: ${t.key} -> ${t.targets.join(',') || '(no target)'}${reasons[t.key] ? `  [${reasons[t.key]}]` : ''}`);
  }
  return lines.join('\n');
}
