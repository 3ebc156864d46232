/**
 * @module machines/tool-call/cancel-grace
 * The cancel grace of a running tool as a named `after` delay. A cancelled call enters
 * `executing.stopping` (in the tool-call machine, and in the Turn's own run of a call,
 * `tools.run.executing.stopping`); if the tool has not reported how it ended when this delay
 * elapses, the chart settles the call as `outcome_unknown` (`unconfirmedStop`). The delay is
 * measured on the actor system's clock (`createActor(…, { clock })`; a test passes xstate's
 * `SimulatedClock`), and the composition root provides its length (`CoreOptions.toolCancelGraceMs`)
 * to both machines with `.provide({ delays })`.
 */

/** The name of the delay in both charts' `setup({ delays })`. */
export const TOOL_CANCEL_GRACE = 'toolCancelGrace';

/** How long a cancelled tool may take to confirm its stop when the host sets nothing (10 s). */
export const DEFAULT_TOOL_CANCEL_GRACE_MS = 10_000;

/** The delays both charts take, with the grace the host chose. */
export function cancelGraceDelays(ms: number): { [TOOL_CANCEL_GRACE]: number } {
  return { [TOOL_CANCEL_GRACE]: ms };
}
