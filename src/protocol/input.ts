/**
 * @module protocol/input
 * What a host hands to `startTurn` and `steerTurn`.
 */
import { z } from 'zod';
import { MAX_ID_LENGTH } from './command-input.js';
import { isStorableText, STORABLE_MESSAGE, storableString } from './storable-text.js';

// Issue 13.4: user text and ids Postgres cannot store (NUL, unpaired surrogates) are refused with
// `invalid_request` before a turn id exists; nothing is repaired on the host's behalf.
export const textInputSchema = z.object({ type: z.literal('text'), text: storableString() });
/** An explicitly selected skill (reference §7.4); its body is materialised when the turn is accepted. */
export const skillInputSchema = z.object({ type: z.literal('skill'), name: storableString(), path: storableString() });
export const userInputSchema = z.discriminatedUnion('type', [textInputSchema, skillInputSchema]);
export type UserInput = z.infer<typeof userInputSchema>;

export const startTurnParamsSchema = z.object({
  clientRequestId: z.string().trim().min(1).max(MAX_ID_LENGTH).refine(isStorableText, STORABLE_MESSAGE),
  input: z.array(userInputSchema),
  disabledSkillNames: z.array(storableString()).optional(),
});
export type StartTurnParams = z.infer<typeof startTurnParamsSchema>;

export const permissionDecisionSchema = z.enum(['allow_once', 'deny', 'allow_for_turn', 'allow_for_session']);
export type PermissionDecision = z.infer<typeof permissionDecisionSchema>;

export const permissionModeSchema = z.enum(['auto', 'accept_edits']);
export type PermissionMode = z.infer<typeof permissionModeSchema>;

/**
 * Where the session's current mode came from (reference §4.14 `sessionModeOrigin`): the mode the
 * session was created or loaded with, a `setPermissionMode` since it was loaded, or a sub-agent's
 * snapshot of its parent's mode.
 */
export type PermissionModeOrigin = 'session_default' | 'user_toggle' | 'inherited';
