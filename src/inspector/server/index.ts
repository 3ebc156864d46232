/**
 * @module openwork-core/inspector
 * Watching sessions while debugging: the actor tracker (an XState inspection observer), the
 * statecharts drawn from the machine definitions, the local inspector server and page, and the
 * optional bridge to Stately's inspector relay.
 */
export { createActorTracker } from './actor-tracker.js';
export type { ActorTracker, ActorTrackerOptions, TrackedActor, TrackedTransition, TrackerChange, StateValueJson, ActorStatus } from './actor-tracker.js';
export { machineChart } from './charts.js';
export type { MachineChart, ChartNode, ChartEdge, ChartEdgeKind } from './charts.js';
export { combineInspectors } from './combine.js';
export type { InspectionObserver } from './combine.js';
export { connectStatelyInspector } from './stately.js';
export type { StatelyInspectorOptions, StatelyInspectorConnection } from './stately.js';
export { startInspectorServer } from './server.js';
export type { InspectorServer, InspectorServerOptions } from './server.js';
export { safeStringify } from './safe-json.js';
