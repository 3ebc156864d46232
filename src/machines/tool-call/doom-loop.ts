/**
 * @module machines/tool-call/doom-loop
 * The doom-loop rule (seed 000 §4) as pure functions: the same tool called with the same
 * arguments (compared as canonical JSON, so key order does not matter) consecutively, until the
 * turn's threshold, ends the turn. Any other call starts the count again at one. `wait_agent` is
 * outside identical-call counting; its timeouts have a streak of their own (reference §5.5). The
 * Turn's chart applies the rule as guards (`isDoomLoop`, `waitTimeoutsReachedThreshold`) over these
 * functions once the `run` actor has validated a call; the actor does not apply the rule.
 */
import { canonicalJson } from '../../protocol/canonical-json.js';
import type { DoomState } from '../types.js';

/**
 * The signature of each arguments object seen, remembered with the name it was counted under: the
 * chart's guard and its count ask for the same call's signature in one step, and arguments of
 * 4 Mi characters made each ask cost a full serialisation (and a copy to join it to the name) on
 * the host's main thread (branch trust-stall). A validated call's arguments are never changed after
 * validation, so the text stays true for the object.
 */
const signatures = new WeakMap<object, { name: string; signature: string }>();

function signatureOf(name: string, args: unknown): string {
  if (args === null || typeof args !== 'object') return `${name}\u0000${canonicalJson(args)}`;
  const known = signatures.get(args);
  if (known?.name === name) return known.signature;
  const signature = `${name}\u0000${canonicalJson(args)}`;
  signatures.set(args, { name, signature });
  return signature;
}

/** The count after one more call of `name` with `args`. */
export function countCall(doom: DoomState, name: string, args: unknown): DoomState {
  const signature = signatureOf(name, args);
  return { signature, count: doom.signature === signature ? doom.count + 1 : 1 };
}

/** Whether the count reached the threshold: this call is refused and the turn ends `doom_loop`. */
export function isDoomLoop(doom: DoomState, threshold: number): boolean {
  return doom.count >= threshold;
}

/** The count after a validated call of `name`: `wait_agent` leaves it as it was. */
export function countValidatedCall(doom: DoomState, name: string, args: unknown): DoomState {
  return name === 'wait_agent' ? doom : countCall(doom, name, args);
}

/** Whether a validated call of `name` with `args` is refused as a doom loop (`wait_agent` never is). */
export function isDoomLoopCall(doom: DoomState, name: string, args: unknown, threshold: number): boolean {
  return name !== 'wait_agent' && isDoomLoop(countCall(doom, name, args), threshold);
}

/** Whether one more `wait_agent` timeout in a row reaches the threshold: the turn ends `doom_loop`. */
export function waitTimeoutsReachThreshold(timeoutsInARow: number, threshold: number): boolean {
  return timeoutsInARow + 1 >= threshold;
}
