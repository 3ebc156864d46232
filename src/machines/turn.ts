/**
 * @module machines/turn
 * The old path of the Turn machine, kept so importers and branches that use it go on working: the
 * machine lives in `machines/turn/` (machine, setup, states, context, ports, outcomes).
 */
export * from './turn/machine.js';
export * from './turn/ports.js';
export * from './turn/outcomes.js';
export { directCallStatusOf, toolCallIdFor, type TurnContext } from './turn/context.js';
