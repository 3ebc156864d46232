/**
 * @module services/context/request-pointers
 * The `request` payload a model call's span stores: the assembled request as pointers into the
 * stored conversation rather than a copy of it.
 */
import type { PreparedModelCall } from './assemble.js';

/**
 * The `request` payload: runs of persisted message sequences in request order (`[first, last]`),
 * with synthetic items in full. Constant size for an ordinary history, whatever its length.
 */
export function requestPointers(prepared: PreparedModelCall): Record<string, unknown> {
  const parts: Array<[number, number] | { synthetic: unknown }> = [];
  prepared.sequences.forEach((sequence, i) => {
    if (sequence === null) {
      parts.push({ synthetic: prepared.request.messages[i] });
      return;
    }
    const last = parts[parts.length - 1];
    if (Array.isArray(last) && last[1] < sequence) last[1] = sequence;
    else parts.push([sequence, sequence]);
  });
  return {
    format: 'openwork.request-pointers/1',
    messages: parts,
    maxOutputTokens: prepared.request.maxOutputTokens ?? null,
    projection: prepared.projection,
  };
}
