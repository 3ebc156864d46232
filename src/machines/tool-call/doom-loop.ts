/**
 * @module machines/tool-call/doom-loop
 * The doom-loop rule (seed 000 §4) as pure functions: the same tool called with the same
 * arguments (compared as canonical JSON, so key order does not matter) consecutively, until the
 * turn's threshold, ends the turn. Any other call starts the count again at one.
 */
import { canonicalJson } from '../../protocol/canonical-json.js';
import type { DoomState } from '../types.js';

/** The count after one more call of `name` with `args`. */
export function countCall(doom: DoomState, name: string, args: unknown): DoomState {
  const signature = `${name}\u0000${canonicalJson(args)}`;
  return { signature, count: doom.signature === signature ? doom.count + 1 : 1 };
}

/** Whether the count reached the threshold: this call is refused and the turn ends `doom_loop`. */
export function isDoomLoop(doom: DoomState, threshold: number): boolean {
  return doom.count >= threshold;
}
