/**
 * @module protocol/command-input
 * Checks at the door for the arguments of core commands (issue 13, point 4): an id or a working
 * directory that could only fail later, in the database or in a turn, is refused now with a typed
 * `invalid_request` and nothing is stored.
 */
import { stat } from 'node:fs/promises';
import { isAbsolute } from 'node:path';
import { InputError } from '../errors.js';
import { isStorableText } from './storable-text.js';

/**
 * The longest id accepted (session ids, `clientRequestId`). Ids sit in indexed columns, whose
 * btree entries cannot exceed about 2.7 KB; 256 characters is room for any UUID or composite key.
 */
export const MAX_ID_LENGTH = 256;

/** The problem with `value` as an id, or null: a non-empty string of storable text, at most 256 characters. */
export function idProblem(value: unknown): string | null {
  if (typeof value !== 'string' || value.trim() === '') return 'must be a non-empty string';
  if (value.length > MAX_ID_LENGTH) return `is ${value.length} characters long; the limit is ${MAX_ID_LENGTH}`;
  if (!isStorableText(value)) return 'must not contain NUL (U+0000) or an unpaired UTF-16 surrogate';
  return null;
}

/** Throws `invalid_request` unless `value` is a usable id; `what` names it in the message. */
export function requireId(what: string, value: unknown): string {
  const problem = idProblem(value);
  if (problem) throw new InputError('invalid_request', `${what} ${problem}`, { details: { field: what } });
  return value as string;
}

/**
 * Throws `invalid_request` unless `value` is an absolute path of an existing directory: every turn
 * reads the project layout there, so a relative or missing one would fail every turn later.
 */
export async function requireWorkingDirectory(value: unknown): Promise<string> {
  if (typeof value !== 'string' || value.trim() === '') throw new InputError('invalid_request', 'workingDirectory is required', { details: { field: 'workingDirectory' } });
  if (!isStorableText(value)) {
    throw new InputError('invalid_request', 'workingDirectory must not contain NUL (U+0000) or an unpaired UTF-16 surrogate', { details: { field: 'workingDirectory' } });
  }
  if (!isAbsolute(value)) {
    throw new InputError('invalid_request', `workingDirectory must be an absolute path, not ${JSON.stringify(value)}`, { details: { field: 'workingDirectory' } });
  }
  const found = await stat(value).catch(() => null);
  if (!found?.isDirectory()) {
    throw new InputError('invalid_request', `workingDirectory ${value} is not an existing directory`, { details: { field: 'workingDirectory' } });
  }
  return value;
}
