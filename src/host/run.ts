/**
 * @module host/run
 * The short way to drive a turn: `session.run(input)` resolves with the outcome, the final text and
 * the usage; `session.stream(input)` is an async iterable of the turn's updates that ends with its
 * `turn_finished`. Both are built on `updates$` and the ordinary commands (`startTurn`,
 * `cancelTurn`), so they add no behaviour of their own to the session: everything they report is
 * also on `updates$`, in the same order.
 */
import { randomUUID } from 'node:crypto';
import type { Observable, Subscription } from 'rxjs';
import type { z } from 'zod';
import { CommandError, UpdatesLaggedError } from '../errors.js';
import type { StartTurnParams, UserInput } from '../protocol/input.js';
import type { SessionUpdateEnvelope, TurnOutcome } from '../protocol/updates.js';
import type { TokenUsage } from '../storage/storage.js';
import { parseOutput } from '../services/model/output-schema.js';
import { SESSION_READER_CAPACITY, UpdateReaderQueue } from '../services/updates/reader-queue.js';

/** What `run` and `stream` accept as input: plain text, or the parts `startTurn` takes. */
export type TurnInput = string | UserInput[];

export interface RunOptions<Output = never> {
  /** Aborting cancels the turn (its outcome is then `cancelled`); an already aborted signal cancels it at once. */
  signal?: AbortSignal;
  /** Idempotency key of the turn (default: a random UUID). Sending the same key again answers the same turn. */
  clientRequestId?: string;
  /** Structured output: the final answer must be JSON of this (object) schema; `output` holds it parsed. */
  outputSchema?: z.ZodType<Output>;
}

export interface StreamOptions<Output = never> extends RunOptions<Output> {
  /**
   * Leaving the `for await` loop before the turn ends cancels the turn (default): a turn nobody
   * watches could wait for a permission card forever. `true` leaves it running; `result` still settles.
   */
  detachOnBreak?: boolean;
}

export interface RunResult<Output = never> {
  turnId: string;
  outcome: TurnOutcome;
  /** The final answer (empty unless the outcome is `completed`). */
  text: string;
  /** Tokens of this turn's model calls, as on its `turn_finished`. */
  usage: TokenUsage;
  /** The final answer parsed by `outputSchema` (only when one was given and the turn completed). */
  output: Output | undefined;
}

/**
 * The turn's updates (the last one is its `turn_finished`), plus promises of its id and result.
 *
 * At most 512 updates wait for the reader (seed 000 §7). A reader that falls further behind gets,
 * from its next `next()`, one `UpdatesLaggedError` (`updates_lagged`: how many were dropped and the
 * sequences to recover by) and then the oldest update still held; iterating the stream again (a
 * new `for await` over the same object) goes on from there. The turn is not cancelled by a lag.
 */
export interface TurnStream<Output = never> extends AsyncIterable<SessionUpdateEnvelope> {
  /** The accepted turn's id; rejects with the `startTurn` error when it was refused. */
  readonly turnId: Promise<string>;
  /** Settles once the turn has ended, whether or not the updates were read. */
  readonly result: Promise<RunResult<Output>>;
}

/** The part of a `SessionHandle` this module drives. */
export interface TurnHost {
  readonly updates$: Observable<SessionUpdateEnvelope>;
  startTurn(params: StartTurnParams & { outputSchema?: z.ZodType }): Promise<{ turnId: string }>;
  cancelTurn(turnId: string): Promise<void>;
}

function inputParts(input: TurnInput): UserInput[] {
  return typeof input === 'string' ? [{ type: 'text', text: input }] : input;
}

const ignore = () => undefined;

/**
 * Starts a turn and follows it. The subscription to `updates$` is made before the turn is started,
 * so no update of the turn can be missed; updates of other turns are never delivered. It ends when
 * the turn finishes or the session closes (then `result` rejects with `actor_stopped`).
 */
export function streamTurn<Output = never>(host: TurnHost, input: TurnInput, options: StreamOptions<Output> = {}): TurnStream<Output> {
  // Bounded like the session's broadcast: a reader that stalls holds at most 512 updates, the same
  // envelopes as the session's replay ring, so its cost does not grow with the turn.
  const queue = new UpdateReaderQueue(SESSION_READER_CAPACITY);
  /** Updates that arrived before the turn id was known (the turn_started of our turn among them). */
  let early: SessionUpdateEnvelope[] | null = [];
  let knownTurnId: string | null = null;
  let finished = false;
  let detached = false;
  let failure: unknown = null;
  let wake: (() => void) | null = null;
  let settle!: { resolve: (r: RunResult<Output>) => void; reject: (e: unknown) => void };
  const result = new Promise<RunResult<Output>>((resolve, reject) => (settle = { resolve, reject }));
  // The promises are the caller's to await; one nobody awaits must not become an unhandled rejection.
  result.catch(ignore);

  const notify = () => {
    const w = wake;
    wake = null;
    w?.();
  };

  let subscription: Subscription | null = null;
  const stop = () => {
    subscription?.unsubscribe();
    subscription = null;
    options.signal?.removeEventListener('abort', onAbort);
  };

  const finish = (envelope: SessionUpdateEnvelope) => {
    if (envelope.update.type !== 'turn_finished') return;
    finished = true;
    stop();
    const { outcome, usage } = envelope.update;
    const text = outcome.status === 'completed' ? outcome.finalText : '';
    let output: Output | undefined;
    try {
      // The turn machine has already checked the answer against the schema; this only types it.
      output = options.outputSchema && outcome.status === 'completed' ? parseOutput(options.outputSchema, text) : undefined;
    } catch (error) {
      settle.reject(error);
      return;
    }
    settle.resolve({ turnId: envelope.turnId!, outcome, text, usage, output });
  };

  const accept = (envelope: SessionUpdateEnvelope) => {
    if (!detached) queue.push(envelope);
    finish(envelope);
    notify();
  };

  const fail = (error: unknown) => {
    if (finished) return;
    finished = true;
    failure = error;
    stop();
    settle.reject(error);
    notify();
  };

  const cancel = () => {
    if (knownTurnId === null || finished) return;
    // A turn that has just ended answers turn_not_active: there is nothing left to cancel.
    host.cancelTurn(knownTurnId).catch(ignore);
  };
  const onAbort = () => cancel();

  subscription = host.updates$.subscribe({
    next(envelope) {
      if (finished) return;
      if (knownTurnId === null) {
        early?.push(envelope);
        // Bounded too, by dropping the oldest: while `startTurn` awaits (skills, the ownership
        // check) another turn may still be publishing, and those are the updates dropped. Ours
        // start only once the session took the command, a few updates before its reply is read.
        if (early !== null && early.length > SESSION_READER_CAPACITY) early.shift();
      }
      else if (envelope.turnId === knownTurnId) accept(envelope);
    },
    complete() {
      fail(new CommandError('actor_stopped', 'the session closed before the turn finished'));
    },
  });

  const turnId = host
    .startTurn({
      clientRequestId: options.clientRequestId ?? randomUUID(),
      input: inputParts(input),
      ...(options.outputSchema ? { outputSchema: options.outputSchema } : {}),
    })
    .then(({ turnId: id }) => {
      knownTurnId = id;
      const before = early ?? [];
      early = null;
      for (const envelope of before) if (envelope.turnId === id && !finished) accept(envelope);
      if (!finished) {
        if (options.signal?.aborted) cancel();
        else options.signal?.addEventListener('abort', onAbort, { once: true });
      }
      return id;
    });
  turnId.catch(fail);

  return {
    turnId,
    result,
    [Symbol.asyncIterator](): AsyncIterator<SessionUpdateEnvelope> {
      return {
        async next(): Promise<IteratorResult<SessionUpdateEnvelope>> {
          for (;;) {
            const lag = queue.takeLag();
            if (lag !== null) throw new UpdatesLaggedError(lag);
            const envelope = queue.take();
            if (envelope !== undefined) return { value: envelope, done: false };
            if (failure !== null) throw failure;
            if (finished || detached) return { value: undefined, done: true };
            await new Promise<void>((resolve) => (wake = resolve));
          }
        },
        async return(): Promise<IteratorResult<SessionUpdateEnvelope>> {
          // Leaving the loop: stop buffering; cancel the turn unless the caller detaches.
          detached = true;
          queue.clear();
          notify(); // A `next` still waiting (another consumer of this iterator) ends now.
          if (!finished && !options.detachOnBreak) {
            if (knownTurnId !== null) cancel();
            else turnId.then(cancel, ignore);
          }
          return { value: undefined, done: true };
        },
      };
    },
  };
}

/** Starts a turn and resolves once it has ended (see `SessionHandle.run`). */
export function runTurn<Output = never>(host: TurnHost, input: TurnInput, options: RunOptions<Output> = {}): Promise<RunResult<Output>> {
  const stream = streamTurn(host, input, { ...options, detachOnBreak: true });
  // Nobody reads the updates of a run: leave the loop at once so that none are buffered.
  void stream[Symbol.asyncIterator]().return?.();
  return stream.result;
}
