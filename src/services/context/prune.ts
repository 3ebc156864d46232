/**
 * @module services/context/prune
 * Pruning old tool results in the request copy (reference §3.2): results at or below the persisted
 * watermark longer than 8,192 characters keep their head and tail around a marker. The stored
 * message is never changed; the full text stays readable in the spill file the marker names.
 */
import { join } from 'node:path';

export const PRUNE_THRESHOLD_CHARS = 8_192;
export const PRUNE_HEAD_CHARS = 4_096;
export const PRUNE_TAIL_CHARS = 1_024;

/** File name of a result's spill file: characters outside [A-Za-z0-9_-] become `_`. */
export function spillFileName(callId: string): string {
  return `${callId.replace(/[^A-Za-z0-9_-]/g, '_')}.txt`;
}

export function spillPath(spillDir: string, sessionId: string, callId: string): string {
  return join(spillDir, sessionId.replace(/[^A-Za-z0-9_-]/g, '_'), spillFileName(callId));
}

/** Whether a result text is long enough to prune (Unicode scalar characters). */
export function isPrunable(text: string): boolean {
  if (text.length <= PRUNE_THRESHOLD_CHARS) return false;
  return [...text].length > PRUNE_THRESHOLD_CHARS;
}

/** The pruned form: head 4,096 + newline + marker + newline + tail 1,024 characters. */
export function prunedText(text: string, fullResultPath: string | null): string {
  const chars = [...text];
  if (chars.length <= PRUNE_THRESHOLD_CHARS) return text;
  const omitted = chars.length - PRUNE_HEAD_CHARS - PRUNE_TAIL_CHARS;
  const marker = fullResultPath
    ? `... [tool result pruned: ${omitted} characters omitted. Full result at ${fullResultPath} — read it if you still need it]`
    : `... [tool result pruned: ${omitted} characters omitted]`;
  return `${chars.slice(0, PRUNE_HEAD_CHARS).join('')}\n${marker}\n${chars.slice(chars.length - PRUNE_TAIL_CHARS).join('')}`;
}
