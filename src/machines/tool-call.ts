/**
 * @module machines/tool-call
 * The old path of the tool-call machine, kept for tests and branches that still import it: the
 * machine lives in `machines/tool-call/` (machine, ports, outcomes).
 */
export * from './tool-call/machine.js';
export * from './tool-call/ports.js';
export * from './tool-call/outcomes.js';
