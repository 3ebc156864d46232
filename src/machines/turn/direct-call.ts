/**
 * @module machines/turn/direct-call
 * What the `run` actor's validation and authorisation answers do to the call the Turn runs itself
 * (`tools.run`), as pure functions over the answer unions (`ValidatedCall`, `AuthorizationOutput`). The chart's guards
 * pick the branch; each function is called only on the branch of its kind, and its check of the
 * kind narrows the union (instead of a cast) and changes nothing for any other kind.
 */
import { NON_INTERACTIVE_REFUSAL_TEXT, doomLoopText } from '../../protocol/model-texts.js';
import { deniedResult, failedResult } from '../../protocol/tool-result.js';
import { countValidatedCall } from '../tool-call/doom-loop.js';
import type { AuthorizationOutput, DoomState, ValidatedCall } from '../types.js';
import type { DirectCall } from './ports.js';

/** A call that failed validation: its failed result, and the tool name it resolved to (if any). */
export function invalidCall(output: ValidatedCall): Partial<DirectCall> {
  return output.kind === 'invalid' ? { result: output.result, resolvedName: output.resolvedName } : {};
}

/** The parsed arguments of a valid call and the doom-loop count after it (`wait_agent` is not counted). */
export function countedCall(d: DirectCall, output: ValidatedCall): { args: unknown; doom: DoomState } {
  const args = output.kind === 'invalid' ? undefined : output.args;
  return { args, doom: countValidatedCall(d.doom, d.call.name, args) };
}

/** A call the doom-loop rule refuses: a failed result the model sees, and the turn ends `doom_loop`. */
export function doomLoopCall(d: DirectCall, output: ValidatedCall): Partial<DirectCall> {
  const text = doomLoopText(d.call.name);
  return {
    result: failedResult('execution_failed', text),
    doom: countedCall(d, output).doom,
    resolvedName: d.call.name,
    terminal: { code: 'doom_loop', message: text },
    approval: { ...d.approval, source: 'system' },
  };
}

/** A rule's denial; bash without a sandbox is not run and answers `sandbox_unavailable` (reference §4.6). */
export function ruleDenial(d: DirectCall, output: AuthorizationOutput): Partial<DirectCall> {
  if (output.kind !== 'deny') return {};
  const code = output.source === 'sandbox_unavailable' ? 'sandbox_unavailable' : 'permission_denied';
  return { result: deniedResult(output.text, code), approval: { ...d.approval, source: output.source } };
}

/** A card an earlier "allow for turn/session" covers: the call runs as granted. */
export function grantedCard(d: DirectCall, output: AuthorizationOutput): Partial<DirectCall> {
  if (output.kind !== 'card') return {};
  return { approval: { ...d.approval, decision: 'grant', source: 'user', card: output.card } };
}

/** A card nobody can answer (a non-interactive session): the call is refused. */
export function nonInteractiveRefusal(d: DirectCall, output: AuthorizationOutput): Partial<DirectCall> {
  if (output.kind !== 'card') return {};
  return { result: deniedResult(NON_INTERACTIVE_REFUSAL_TEXT), approval: { ...d.approval, source: 'non_interactive', card: output.card } };
}

/** A card to ask: where the tool-call machine the Turn spawns for the call starts. */
export function cardToAsk(d: DirectCall, output: AuthorizationOutput): Partial<DirectCall> {
  if (output.kind !== 'card') return {};
  return { start: { kind: 'card', card: output.card, at: output.at, args: d.args, doom: d.doom } };
}
