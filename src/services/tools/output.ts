/**
 * @module services/tools/output
 * Tool-result bounds (reference §10.2 tool-result-bounds, §11.2): a result's text is at most
 * 32,000 bytes including its footer; bash keeps the first 2 KiB and the last 14 KiB and saves the
 * whole output to a spill file once it passes 16 KiB; other results past the limit keep their head
 * and spill the rest. Spill files live in `~/.openwork/spill/<session-id>/<tool-call-id>.txt`, hold at
 * most 64 MiB each (`SpillOptions.maxSpillBytes` lowers or raises that cap), and directories older
 * than 7 days are deleted at start-up.
 */
import { closeSync, mkdirSync, openSync, readdirSync, rmSync, statSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { InputError } from '../../errors.js';

export const MAX_RESULT_BYTES = 32_000;
export const FOOTER_RESERVE_BYTES = 512;
export const MAX_SPILL_BYTES = 64 * 1024 * 1024;
export const BASH_HEAD_BYTES = 2 * 1024;
export const BASH_TAIL_BYTES = 14 * 1024;
export const BASH_SPILL_THRESHOLD = BASH_HEAD_BYTES + BASH_TAIL_BYTES;
export const SPILL_MAX_AGE_MS = 7 * 24 * 60 * 60 * 1000;

/** How much of one call's output a spill file may hold. */
export interface SpillOptions {
  /** Bytes at most per spill file (default `MAX_SPILL_BYTES`, 64 MiB); past it the file is cut and the footer says so. */
  maxSpillBytes?: number;
}

/** The cap in force (the default when none is given); anything but a positive integer is `invalid_request`. */
export function spillCap(options: SpillOptions = {}): number {
  const cap = options.maxSpillBytes;
  if (cap === undefined) return MAX_SPILL_BYTES;
  if (!Number.isSafeInteger(cap) || cap <= 0) throw new InputError('invalid_request', `maxSpillBytes must be a positive integer, got ${JSON.stringify(cap)}`);
  return cap;
}

function safeName(id: string): string {
  return id.replace(/[^A-Za-z0-9_-]/g, '_');
}

/** Where a call's full output is saved. */
export function spillPath(spillRoot: string, sessionId: string, toolCallId: string): string {
  return join(spillRoot, safeName(sessionId), `${safeName(toolCallId)}.txt`);
}

/** The footer that replaces omitted output; `capped` is the spill cap the saved file was cut at. */
export function omittedText(omitted: number, savedAt: string | null, capped: number | null = null): string {
  if (savedAt === null) return `... (${omitted} bytes omitted.)`;
  const saved = capped !== null ? `The first ${capped} bytes are saved at ${savedAt}` : `Full output saved at ${savedAt}`;
  return `... (${omitted} bytes omitted. ${saved} — use read with offset/limit, or grep, to look at it.)`;
}

/** Largest `n <= at` that does not split a UTF-8 sequence of `buf`. */
function charStart(buf: Buffer, at: number): number {
  let n = Math.min(at, buf.length);
  while (n > 0 && n < buf.length && (buf[n]! & 0xc0) === 0x80) n -= 1;
  return n;
}

/** A spill file written as output arrives; never more than its cap (64 MiB by default). */
class SpillFile {
  private fd: number | null = null;
  private written = 0;
  failed = false;
  capped = false;

  constructor(
    readonly path: string,
    readonly cap: number,
  ) {}

  write(chunk: Buffer): void {
    if (this.failed) return;
    try {
      if (this.fd === null) {
        mkdirSync(join(this.path, '..'), { recursive: true });
        this.fd = openSync(this.path, 'w', 0o600);
      }
      const room = this.cap - this.written;
      if (room <= 0) {
        this.capped = true;
        return;
      }
      const part = chunk.length > room ? chunk.subarray(0, room) : chunk;
      if (part.length < chunk.length) this.capped = true;
      writeSync(this.fd, part);
      this.written += part.length;
    } catch {
      // A spill failure only loses the path in the footer (reference §11.2).
      this.failed = true;
    }
  }

  close(): void {
    if (this.fd !== null) {
      try {
        closeSync(this.fd);
      } catch {
        this.failed = true;
      }
      this.fd = null;
    }
  }
}

/**
 * Collects bash output: everything up to 16 KiB in memory; beyond that the head, a 14 KiB tail
 * ring and the spill file.
 */
export class OutputCollector {
  private readonly chunks: Buffer[] = [];
  private buffered = 0;
  private head: Buffer | null = null;
  private tail: Buffer = Buffer.alloc(0);
  private spill: SpillFile | null = null;
  private readonly cap: number;
  total = 0;

  constructor(
    private readonly spillTo: string,
    options: SpillOptions = {},
  ) {
    this.cap = spillCap(options);
  }

  push(chunk: Buffer): void {
    this.total += chunk.length;
    if (this.spill === null) {
      this.chunks.push(chunk);
      this.buffered += chunk.length;
      if (this.buffered <= BASH_SPILL_THRESHOLD) return;
      const all = Buffer.concat(this.chunks);
      this.chunks.length = 0;
      this.spill = new SpillFile(this.spillTo, this.cap);
      this.spill.write(all);
      this.head = all.subarray(0, charStart(all, BASH_HEAD_BYTES));
      this.tail = all.subarray(Math.max(0, all.length - BASH_TAIL_BYTES));
      return;
    }
    this.spill.write(chunk);
    const joined = Buffer.concat([this.tail, chunk]);
    this.tail = joined.subarray(Math.max(0, joined.length - BASH_TAIL_BYTES));
  }

  /** The kept text: all of it, or head + footer + tail. */
  finish(): { text: string; spilled: string | null } {
    if (this.spill === null) return { text: Buffer.concat(this.chunks).toString('utf8'), spilled: null };
    this.spill.close();
    let tail = this.tail;
    let skip = 0;
    while (skip < tail.length && (tail[skip]! & 0xc0) === 0x80) skip += 1;
    tail = tail.subarray(skip);
    const head = this.head ?? Buffer.alloc(0);
    const omitted = this.total - head.length - tail.length;
    const savedAt = this.spill.failed ? null : this.spill.path;
    return {
      text: `${head.toString('utf8')}\n${omittedText(omitted, savedAt, this.spill.capped ? this.cap : null)}\n${tail.toString('utf8')}`,
      spilled: savedAt,
    };
  }
}

/** Saves a full result text to its spill file; null when that fails. `capped`: the cap it was cut at. */
export function writeSpill(path: string, text: string, options: SpillOptions = {}): { path: string | null; capped: number | null } {
  const file = new SpillFile(path, spillCap(options));
  file.write(Buffer.from(text, 'utf8'));
  file.close();
  return { path: file.failed ? null : path, capped: file.capped ? file.cap : null };
}

/**
 * The fallback cut for any result over 32,000 bytes: keep the head (cut at a newline in the
 * second half of the budget, else at a character boundary), spill the whole text, add the footer.
 */
export function boundResultText(text: string, spillTo: string | null, options: SpillOptions = {}): string {
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.length <= MAX_RESULT_BYTES) return text;
  const saved = spillTo === null ? { path: null, capped: null } : writeSpill(spillTo, text, options);
  // The footer's longest form (the omitted count can only shrink) bounds the budget, so the result fits.
  const longest = Buffer.byteLength(omittedText(bytes.length, saved.path, saved.capped)) + 1;
  const budget = MAX_RESULT_BYTES - Math.max(FOOTER_RESERVE_BYTES, longest);
  let cut = charStart(bytes, budget);
  const newline = bytes.lastIndexOf(0x0a, cut - 1);
  if (newline >= budget / 2) cut = newline + 1;
  const footer = omittedText(bytes.length - cut, saved.path, saved.capped);
  return `${bytes.subarray(0, cut).toString('utf8')}${cut > 0 && bytes[cut - 1] === 0x0a ? '' : '\n'}${footer}`;
}

/** The fallback cut without a spill file: the footer only says how much was omitted. */
export function cutResultText(text: string): string {
  return boundResultText(text, null);
}

/** Deletes spill directories not modified for `maxAgeMs` (run at start-up). Returns how many. */
export function purgeSpill(spillRoot: string, now: number, maxAgeMs: number = SPILL_MAX_AGE_MS): number {
  let removed = 0;
  let entries: string[];
  try {
    entries = readdirSync(spillRoot);
  } catch {
    return 0;
  }
  for (const name of entries) {
    const dir = join(spillRoot, name);
    try {
      if (now - statSync(dir).mtimeMs > maxAgeMs) {
        rmSync(dir, { recursive: true, force: true });
        removed += 1;
      }
    } catch {
      // Raced with another process: nothing to do.
    }
  }
  return removed;
}
