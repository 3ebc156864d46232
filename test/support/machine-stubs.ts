/**
 * Stub actors and recording parents for the machine unit tests (test/machines/session, turn and
 * tool-call): a machine under test gets its effects from `provide()` as stubs that resolve, reject
 * or emit when the test says, and runs under parents that only record what it sends them. No
 * storage, model or tool runs: these tests check the charts' decisions alone, in milliseconds.
 */
import { assign, createActor, fromCallback, fromPromise, sendParent, setup, type AnyActorLogic, type AnyActorRef, type AnyEventObject, type SimulatedClock } from 'xstate';
import type { PermissionCard } from '../../src/protocol/updates.js';

/** A promise the test settles by hand, for an actor that should stay busy until told. */
export interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

export function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/**
 * A promise actor that records each input it was invoked with and answers from `answer` (a value,
 * or a function of the input that may throw or return a promise): the stub of one storage or model
 * effect.
 */
export function stubPromise<T, I = any>(answer: T | ((input: I) => T | Promise<T>)) {
  const inputs: I[] = [];
  const logic = fromPromise<T, I>(async ({ input }) => {
    inputs.push(input);
    return typeof answer === 'function' ? await (answer as (input: I) => T | Promise<T>)(input) : answer;
  });
  return Object.assign(logic, { inputs });
}

/**
 * A promise actor that fails with `error`: an `errors.ts` class where the machine classifies by
 * class (a tool result's write), or an object with a `code` where it reads only the code.
 */
export function rejecting(error: unknown) {
  return stubPromise<never>(() => {
    throw error;
  });
}

/**
 * A stub of the callback actor that runs a tool (`executeTool`): it records its inputs and every
 * event its machine sends it (`toolcall.cancel`), and the test reports progress and the result
 * through `send`, as the real actor does with `sendBack`. `fail` makes the next start throw.
 */
export function stubExecute() {
  const inputs: unknown[] = [];
  const received: AnyEventObject[] = [];
  let sendBack: ((event: AnyEventObject) => void) | null = null;
  const state = { fail: null as Error | null };
  const logic = fromCallback<AnyEventObject, any>(({ input, sendBack: back, receive }) => {
    inputs.push(input);
    if (state.fail) throw state.fail;
    sendBack = back as (event: AnyEventObject) => void;
    receive((event) => void received.push(event));
  });
  return Object.assign(logic, {
    inputs,
    received,
    state,
    /** Sends `event` from the running tool to its machine (`tool.progress`, `tool.finished`). */
    send(event: AnyEventObject) {
      if (!sendBack) throw new Error('the execute stub is not running');
      sendBack(event);
    },
  });
}

/**
 * A stub of the Turn's `runToolCall` callback actor (the whole of a call the Turn runs itself): like
 * the real one it validates just after it starts, not inside the step that starts it, and reports
 * `tool.validated`; then it does only what the chart sends it. `tool.authorize` (with the parsed
 * arguments) → `tool.authorized`, an answer that throws or rejects being `tool.check_failed`;
 * `tool.execute` starts the tool, whose progress and result the test reports through `send`
 * (`failExecute` makes it answer `tool.execute_failed` instead, as when the session is gone);
 * `tool.record` → `tool.recorded` with `record`'s answer (the result as given by default), or
 * `tool.record_failed`. `inputs` holds each start's input, `authorized` the arguments of each
 * `tool.authorize`, `executed` and `recorded` the inputs of each `tool.execute` and `tool.record`,
 * `received` every `toolcall.cancel`. Nothing is reported once it was stopped or, for the tool,
 * once the chart asked for the record.
 */
export function stubRunToolCall<V, A>(answers: {
  validate: V | ((input: any) => V | Promise<V>);
  authorize: A | ((args: unknown) => A | Promise<A>);
  record?: (input: any) => unknown;
}) {
  const inputs: any[] = [];
  const authorized: unknown[] = [];
  const executed: any[] = [];
  const recorded: any[] = [];
  const received: AnyEventObject[] = [];
  const state = { failExecute: null as Error | null };
  let tool: ((event: AnyEventObject) => void) | null = null;
  const answer = <T>(a: T | ((x: any) => T | Promise<T>), x: unknown): Promise<T> =>
    Promise.resolve().then(() => (typeof a === 'function' ? (a as (x: unknown) => T | Promise<T>)(x) : a));
  const logic = fromCallback<AnyEventObject, any>(({ input, sendBack, receive }) => {
    inputs.push(input);
    let stopped = false;
    const report = (event: AnyEventObject) => {
      if (!stopped) sendBack(event);
    };
    receive((event) => {
      switch (event.type) {
        case 'tool.authorize':
          authorized.push(event.args);
          answer(answers.authorize, event.args).then(
            (output) => report({ type: 'tool.authorized', output }),
            (error: unknown) => report({ type: 'tool.check_failed', error }),
          );
          return;
        case 'tool.execute':
          executed.push(event.input);
          if (state.failExecute) {
            const error = state.failExecute;
            queueMicrotask(() => report({ type: 'tool.execute_failed', error }));
            return;
          }
          tool = report;
          return;
        case 'toolcall.cancel':
          received.push(event);
          return;
        case 'tool.record':
          tool = null;
          recorded.push(event.input);
          answer(answers.record ?? ((i: { result: unknown }) => i.result), event.input).then(
            (result) => report({ type: 'tool.recorded', result }),
            (error: unknown) => report({ type: 'tool.record_failed', error }),
          );
          return;
      }
    });
    answer(answers.validate, input).then(
      (output) => report({ type: 'tool.validated', output }),
      (error: unknown) => report({ type: 'tool.check_failed', error }),
    );
    return () => {
      stopped = true;
    };
  });
  return Object.assign(logic, {
    inputs,
    authorized,
    executed,
    recorded,
    received,
    state,
    /** Sends `event` from the running tool to the Turn (`tool.progress`, `tool.finished`). */
    send(event: AnyEventObject) {
      if (!tool) throw new Error('no tool of the run stub is running');
      tool(event);
    },
  });
}

/** Lets every settled stub's continuation and the actors' mailboxes run. */
export async function flush(rounds = 5): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** What a machine running under `underParents` sent up, with whom it reached. */
export interface Received {
  to: 'parent' | 'grandparent';
  event: AnyEventObject;
}

export interface Running {
  /** Every event the machine sent to its parent or grandparent, in order (xstate's own events left out). */
  received: Received[];
  /** The machine under test (its snapshot, and where to `send` events). */
  child(): AnyActorRef;
  /** The machine's output once it reached a final state, else undefined. */
  output(): unknown;
  /** The events of type `type` that reached `to`. */
  sent(to: Received['to'], type: string): AnyEventObject[];
  stop(): void;
}

/**
 * Runs `logic` (with `input`) two parents deep, as the runtime does: the tool-call machine sends
 * to its Turn (`sendParent`) and to its Session (the Turn's parent); the Turn sends to its Session.
 * Both parents only record; the child's output is kept when it finishes.
 */
export function underParents(logic: AnyActorLogic, input: unknown, clock?: SimulatedClock): Running {
  const received: Received[] = [];
  let output: unknown;
  const record = (to: Received['to']) => ({ event }: { event: AnyEventObject }) => {
    if (!event.type.startsWith('xstate.')) received.push({ to, event });
  };
  const parent = setup({ actors: { child: logic } }).createMachine({
    invoke: {
      id: 'child',
      src: 'child',
      input: () => input,
      onDone: { actions: ({ event }) => void (output = event.output) },
      onError: { actions: ({ event }) => void (output = { error: event.error }) },
    },
    on: { '*': { actions: record('parent') } },
  });
  const grandparent = setup({ actors: { parent } }).createMachine({
    context: {},
    invoke: { id: 'parent', src: 'parent' },
    on: { '*': { actions: [record('grandparent'), assign({})] } },
  });
  // The system's clock measures every `after` delay of the machine under test (`SimulatedClock`).
  const actor = createActor(grandparent, clock ? { clock } : {});
  actor.start();
  // Kept from the start: a child that reached its final state is no longer among its parent's children.
  const parentRef = actor.getSnapshot().children.parent as AnyActorRef;
  const childRef = parentRef.getSnapshot().children.child as AnyActorRef;
  return {
    received,
    child: () => childRef,
    output: () => output,
    sent: (to, type) => received.filter((r) => r.to === to && r.event.type === type).map((r) => r.event),
    stop: () => actor.stop(),
  };
}

/** The card the machine tests ask for: one bash command, every decision offered. */
export const CARD: PermissionCard = {
  toolName: 'bash',
  kind: 'approval',
  summary: 'run ls',
  environmentId: 'env_1',
  grantKey: 'bash:ls',
  decisions: ['allow_once', 'allow_for_turn', 'allow_for_session', 'deny'],
};

/**
 * A child machine that stands in for the Session's Turn or the Turn's tool-call machine: `log` gets
 * one entry per invocation (its input and every event its parent sent it), and the test drives it:
 * `stub.send` sends any event up, `stub.publish` sends an update to be published (`session.publish`),
 * `stub.finish` ends it with an output.
 */
export function stubChild<Output>(log: Array<{ input: any; events: AnyEventObject[] }>) {
  return setup({}).createMachine({
    context: ({ input }) => {
      log.push({ input, events: [] });
      return { output: null as Output | null };
    },
    initial: 'running',
    states: {
      running: {
        on: {
          'stub.publish': { actions: sendParent(({ event }) => ({ type: 'session.publish', updates: [event.update] })) },
          'stub.send': { actions: sendParent(({ event }) => event.event) },
          'stub.finish': { target: 'done', actions: assign({ output: ({ event }) => event.output }) },
          '*': { actions: ({ event }) => void log.at(-1)!.events.push(event) },
        },
      },
      done: { type: 'final' },
    },
    output: ({ context }) => context.output!,
  });
}
