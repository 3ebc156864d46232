/**
 * @module services/clock
 * Time and identifiers are injected, never read globally, so tests can pin them.
 */
import { randomFillSync } from 'node:crypto';
import { isoString } from '../protocol/iso-time.js';

/** Formatting lives in protocol/ (storage formats the times it reads back with it too). */
export { isoString };

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/**
 * The last times `isoNow` gave out, text and milliseconds: a span's end passes its start back as
 * `notBefore`, and a start given out a moment ago is read from here instead of `Date.parse` (about
 * 5 µs a call on the step path; branch perf-jit2). `Date.parse(isoString(ms)) === ms` for every
 * time `isoString` formats itself, so the answer is the same.
 */
const GIVEN = 16;
const givenText: string[] = new Array<string>(GIVEN).fill('');
const givenMs: number[] = new Array<number>(GIVEN).fill(0);
let givenNext = 0;

/** `Date.parse(text)`, from the times given out lately when `text` is one of them. */
function parsedTime(text: string): number {
  for (let i = 0; i < GIVEN; i += 1) if (givenText[i] === text) return givenMs[i]!;
  return Date.parse(text);
}

/** The clock's time as ISO-8601 UTC, never before `notBefore` (an end is never before its start). */
export function isoNow(clock: Clock, notBefore?: string): string {
  const now = clock.now();
  if (notBefore) return isoString(Math.max(now, parsedTime(notBefore)));
  const text = isoString(now);
  if (Number.isSafeInteger(now) && now >= 0 && now < 253402300800000) {
    givenText[givenNext] = text;
    givenMs[givenNext] = now;
    givenNext = (givenNext + 1) % GIVEN;
  }
  return text;
}

export interface IdGenerator {
  /** A new unique id with the given prefix, e.g. `turn_…`. */
  next(prefix: string): string;
}

/**
 * A time-ordered UUID (RFC 9562 version 7): 48 bits of Unix milliseconds, then a 12-bit counter
 * that keeps ids of one process increasing within a millisecond (method 1 of the RFC), then 62
 * random bits. The clock that orders them is the process's own (`Date.now()`), never the injected
 * `Clock`: ids only need to be unique and, for the database's sake, roughly increasing.
 *
 * Why not random (version 4) ids: every message, turn and session id is the key of a B-tree
 * (messages_pkey, turns_pkey, the spans' keys, which begin with the turn id). A random key lands on a
 * random leaf page, and the first change to a page after each checkpoint writes the whole 8 kB page
 * to the WAL. In a database of 200,000 messages that made a tool step write 26 kB of WAL right
 * after a checkpoint, half of it full-page images of messages_pkey alone; time-ordered keys go to
 * the rightmost leaf, which stays in the WAL's recent pages (docs/benchmarks.md, "The Postgres side
 * of a step"). 74 random bits remain, and the id reveals no more than the row's `created_at`.
 */
export function timeOrderedUuid(): string {
  let ms = Date.now();
  if (ms <= uuidState.ms) {
    uuidState.counter += 1;
    if (uuidState.counter > 0xfff) {
      // 4096 ids in one millisecond: borrow the next millisecond, as the RFC allows.
      uuidState.ms += 1;
      uuidState.counter = 0;
    }
    ms = uuidState.ms;
  } else {
    uuidState.ms = ms;
    // A random start in the lower half leaves room to count up within the millisecond.
    const start = takeRandom(2);
    uuidState.counter = ((randomPool[start]! << 8) | randomPool[start + 1]!) & 0x7ff;
  }
  // Formatted from the numbers and the pool's bytes directly: Buffer writes and copies of a few
  // bytes cost more than the whole id.
  const msHex = ms.toString(16).padStart(12, '0');
  const counterHex = uuidState.counter.toString(16).padStart(3, '0');
  const r = takeRandom(8);
  const pool = randomPool;
  return (
    `${msHex.slice(0, 8)}-${msHex.slice(8, 12)}-7${counterHex}-${HEX[0x80 | (pool[r]! & 0x3f)]}${HEX[pool[r + 1]!]}-` +
    `${HEX[pool[r + 2]!]}${HEX[pool[r + 3]!]}${HEX[pool[r + 4]!]}${HEX[pool[r + 5]!]}${HEX[pool[r + 6]!]}${HEX[pool[r + 7]!]}`
  );
}

/** Two lowercase hex digits of each byte value. */
const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

/**
 * Random bytes are drawn from a pool filled 4 kB at a time, as Node's own `randomUUID` does: a
 * `randomBytes` call per id entered the system's random source twice for every message a step
 * stores, about 0.1 ms of a step's CPU under load (docs/benchmarks.md, "Perf-node"). The bytes are
 * the same CSPRNG's; each is used once.
 */
const randomPool = Buffer.alloc(4096);
let randomOffset = randomPool.length;

/** The offset of `n` fresh random bytes in `randomPool`, refilling it when it runs out. */
function takeRandom(n: number): number {
  if (randomOffset + n > randomPool.length) {
    randomFillSync(randomPool);
    randomOffset = 0;
  }
  const at = randomOffset;
  randomOffset += n;
  return at;
}

const uuidState = { ms: 0, counter: 0 };

/** The runtime's ids: `prefix_` and a time-ordered UUID (`timeOrderedUuid`). */
export const randomIds: IdGenerator = { next: (prefix) => `${prefix}_${timeOrderedUuid()}` };

/** Deterministic ids for tests: `prefix_1`, `prefix_2`, ... per prefix. */
export function sequentialIds(): IdGenerator {
  const counters = new Map<string, number>();
  return {
    next(prefix) {
      const n = (counters.get(prefix) ?? 0) + 1;
      counters.set(prefix, n);
      return `${prefix}_${n}`;
    },
  };
}
