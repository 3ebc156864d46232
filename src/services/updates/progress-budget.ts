/**
 * @module services/updates/progress-budget
 * The cap on one tool call's live progress (issue 12 point 9). Every progress item becomes a
 * `tool_call_progress` update that the session keeps in its 512-entry ring, so unbounded progress
 * (a command printing gigabytes) used to become unbounded host memory. Per call, the rule mirrors
 * the one for results: the first 16 KiB of output stream live; past that nothing more is sent live
 * except a short count at most once a second; when the call ends the footer and the last 14 KiB
 * follow. No update carries more than 4 KiB of output, so no large chunk ever sits in the ring.
 */
import type { ToolProgress } from '../../protocol/updates.js';
import { BASH_SPILL_THRESHOLD, BASH_TAIL_BYTES } from '../tools/output.js';

/** Output bytes of one call that stream live before the rest is held back (a whole small result). */
export const PROGRESS_HEAD_BYTES = BASH_SPILL_THRESHOLD;
/** Output bytes of one call sent after it ends, when some were held back (the result's tail). */
export const PROGRESS_TAIL_BYTES = BASH_TAIL_BYTES;
/** No progress update carries more output than this. */
export const PROGRESS_CHUNK_BYTES = 4 * 1024;
/** A `message` progress item is cut to this many bytes. */
export const PROGRESS_MESSAGE_BYTES = 1024;
/** While output is held back, a count of it is sent at most this often. */
export const PROGRESS_NOTICE_INTERVAL_MS = 1_000;

type OutputKind = 'stdout' | 'stderr';

const isHighSurrogate = (code: number) => code >= 0xd800 && code <= 0xdbff;
const isLowSurrogate = (code: number) => code >= 0xdc00 && code <= 0xdfff;

/** The largest prefix of `text` that is at most `bytes` UTF-8 bytes, never splitting a character. */
function prefixWithin(text: string, bytes: number): string {
  // A character is at least one byte, so only the first `bytes` characters can fit: encode just those.
  let candidate = text.length > bytes ? text.slice(0, bytes) : text;
  if (candidate.length < text.length && isHighSurrogate(candidate.charCodeAt(candidate.length - 1))) candidate = candidate.slice(0, -1);
  if (Buffer.byteLength(candidate) <= bytes) return candidate;
  const buf = Buffer.from(candidate, 'utf8');
  let cut = Math.min(bytes, buf.length);
  while (cut > 0 && (buf[cut]! & 0xc0) === 0x80) cut -= 1;
  return buf.subarray(0, cut).toString('utf8');
}

/** The largest suffix of `text` that is at most `bytes` UTF-8 bytes, never splitting a character. */
function suffixWithin(text: string, bytes: number): string {
  let candidate = text.length > bytes ? text.slice(text.length - bytes) : text;
  if (candidate.length < text.length && isLowSurrogate(candidate.charCodeAt(0))) candidate = candidate.slice(1);
  if (Buffer.byteLength(candidate) <= bytes) return candidate;
  const buf = Buffer.from(candidate, 'utf8');
  let start = Math.max(0, buf.length - bytes);
  while (start < buf.length && (buf[start]! & 0xc0) === 0x80) start += 1;
  return buf.subarray(start).toString('utf8');
}

/** The text omitted from live progress, in the words the host shows. */
export function heldBackText(bytes: number): string {
  return `... (${bytes} bytes of output not shown live; the last ${PROGRESS_TAIL_BYTES} bytes follow when the call ends)`;
}

/** The footer before the tail, when the call has ended. */
export function omittedProgressText(bytes: number): string {
  return `... (${bytes} bytes of output were not shown live)`;
}

/**
 * One tool call's progress gate: `push` every item the tool reports, `finish` once when it ends;
 * `send` receives only what fits the budget.
 *
 * @example
 * const budget = new ProgressBudget((p) => sendBack({ type: 'tool.progress', progress: p }), clock.now);
 * budget.push({ kind: 'stdout', chunk });
 * budget.finish();
 */
export class ProgressBudget {
  private headLeft = PROGRESS_HEAD_BYTES;
  private heldBack = 0;
  private lastNotice = Number.NEGATIVE_INFINITY;
  /** The newest held-back output, at most `PROGRESS_TAIL_BYTES`, oldest first. */
  private tail: Array<{ kind: OutputKind; chunk: string; bytes: number }> = [];
  private tailBytes = 0;
  private finished = false;

  constructor(
    private readonly send: (progress: ToolProgress) => void,
    private readonly now: () => number,
  ) {}

  push(progress: ToolProgress): void {
    if (this.finished) return;
    switch (progress.kind) {
      case 'message':
        this.send({ kind: 'message', message: prefixWithin(progress.message, PROGRESS_MESSAGE_BYTES) });
        return;
      case 'stdout':
      case 'stderr':
        this.output(progress.kind, progress.chunk);
        return;
      default: {
        const never: never = progress;
        throw new Error(`unknown progress ${JSON.stringify(never)}`);
      }
    }
  }

  /** Sends the footer and the tail if output was held back; nothing passes after this. */
  finish(): void {
    if (this.finished) return;
    this.finished = true;
    if (this.heldBack === 0) return;
    const tail = this.tail;
    this.tail = [];
    this.send({ kind: 'message', message: omittedProgressText(this.heldBack - this.tailBytes) });
    for (const part of tail) this.sendChunks(part.kind, part.chunk);
  }

  private output(kind: OutputKind, chunk: string): void {
    if (chunk === '') return;
    if (this.headLeft > 0) {
      const live = prefixWithin(chunk, this.headLeft);
      this.headLeft -= Buffer.byteLength(live);
      this.sendChunks(kind, live);
      chunk = chunk.slice(live.length);
      if (chunk === '') return;
      // What is left of a chunk that did not fit is held back whole, even when a character was cut short.
      this.headLeft = 0;
    }
    this.hold(kind, chunk);
  }

  private hold(kind: OutputKind, chunk: string): void {
    const bytes = Buffer.byteLength(chunk);
    this.heldBack += bytes;
    const kept = bytes > PROGRESS_TAIL_BYTES ? suffixWithin(chunk, PROGRESS_TAIL_BYTES) : chunk;
    const keptBytes = kept === chunk ? bytes : Buffer.byteLength(kept);
    this.tail.push({ kind, chunk: kept, bytes: keptBytes });
    this.tailBytes += keptBytes;
    while (this.tailBytes > PROGRESS_TAIL_BYTES) {
      const first = this.tail[0]!;
      const excess = this.tailBytes - PROGRESS_TAIL_BYTES;
      if (first.bytes <= excess) {
        this.tail.shift();
        this.tailBytes -= first.bytes;
        continue;
      }
      // Cutting the oldest piece brings the tail within its cap (a straddling character goes whole).
      const rest = suffixWithin(first.chunk, first.bytes - excess);
      const restBytes = Buffer.byteLength(rest);
      this.tailBytes -= first.bytes - restBytes;
      this.tail[0] = { kind: first.kind, chunk: rest, bytes: restBytes };
    }
    const now = this.now();
    if (now - this.lastNotice >= PROGRESS_NOTICE_INTERVAL_MS) {
      this.lastNotice = now;
      this.send({ kind: 'message', message: heldBackText(this.heldBack) });
    }
  }

  private sendChunks(kind: OutputKind, text: string): void {
    let rest = text;
    while (rest !== '') {
      const part = prefixWithin(rest, PROGRESS_CHUNK_BYTES);
      // prefixWithin only returns '' for a chunk size under one character; never loop forever.
      const piece = part === '' ? rest.slice(0, 1) : part;
      this.send({ kind, chunk: piece });
      rest = rest.slice(piece.length);
    }
  }
}
