/**
 * The Turn chart alone, per tool step (issue 14 point 3, branch perf-steps): a Turn actor from
 * `<dist>/machines/turn.js`, under a parent that takes its updates, driven through K tool steps a turn
 * by instant fakes (its effects actor's model call and direct call answer at once, in a microtask;
 * the begin and end of the turn are resolved promises). No storage, no model, no session: what is
 * measured is the interpreter, the chart's actions and the effects actor's host.
 *
 * Per tool step it prints: the Turn's macrosteps (events the Turn processed) and microsteps (transitions
 * taken, eventless ones included; inspection's `@xstate.microstep`), every XState event and
 * snapshot (inspection), the heap's growth with a young generation large enough that nothing is
 * collected in the window (the method of docs/benchmarks.md "Perf-fold"), and the process CPU over
 * the same turns (median of the rounds; counts and allocation do not depend on load, CPU does).
 *
 * `node --expose-gc --min-semi-space-size=256 --max-semi-space-size=256 bench/turn-chart.mjs <dist>`
 * TURN_CHART_INSPECT=1: the counts instead (add `--allow-natives-syntax` for the context's property mode;
 * the run then exits 1 when any Turn snapshot's context is in dictionary mode, naming the first: the
 * check of branch perf-context, run by test/machines/turn/context-shape.test.ts from the sources).
 * TURN_CHART_INSPECT_TURNS (10): the turns counted.
 * TURN_CHART_HEAP_PROF=<file>: an allocation profile of one round instead (every sample, collected or not).
 * Knobs: TURN_CHART_WARMUP (300 turns), TURN_CHART_TURNS (50 a round), TURN_CHART_ROUNDS (7), BENCH_K (10).
 *
 * The fakes follow the runtime's model actor: a call the fact before reserved (`counted`) reports its
 * sampling with `model.call_recorded` when the chart takes that event in `sampling` (perf-steps' fold),
 * and `model.sampled` first otherwise, so each build is driven as its own runtime drives it.
 */
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
// The same xstate the builds import (node_modules is one directory behind its symlinks).
import { createActor, fromPromise, setup } from 'xstate';

if (typeof globalThis.gc !== 'function') throw new Error('run with node --expose-gc --min-semi-space-size=256 --max-semi-space-size=256');
const dist = resolve(process.argv[2] ?? new URL('../dist', import.meta.url).pathname);
const { turnMachine } = await import(pathToFileURL(`${dist}/machines/turn.js`).href);
const { hostTurnEffects } = await import(pathToFileURL(`${dist}/machines/turn/effects.js`).href);

const K = Number(process.env.BENCH_K ?? 10);
const WARMUP = Number(process.env.TURN_CHART_WARMUP ?? 300);
const TURNS = Number(process.env.TURN_CHART_TURNS ?? 50);
const ROUNDS = Number(process.env.TURN_CHART_ROUNDS ?? 7);
const USAGE = { inputTokens: 3, outputTokens: 2, cachedInputTokens: 0, reasoningTokens: 0 };
const RESULT = { status: 'succeeded', text: 'ok' };

// Does this build's chart take the request's outcome straight in `sampling` (the fold)?
const samplingNode = turnMachine.getStateNodeById('turn.running_model.streaming.sampling');
const folded = samplingNode.on['model.call_recorded'] !== undefined;

const later = (fn) => queueMicrotask(fn);

/** The model call: each call asks for one tool while fewer than K were asked this turn, then answers. */
let toolCallsThisTurn = 0;
const callModel = ({ input, sendBack, receive }) => {
  let live = true;
  receive((command) => {
    if (command.type === 'model.persist') later(() => live && sendBack({ type: 'model.persisted', messageId: `msg_${input.modelCallIndex}` }));
  });
  later(() => {
    if (!live) return;
    if (!folded || !input.counted) sendBack({ type: 'model.sampled' });
    sendBack({ type: 'model.call_recorded', estimatedInputTokens: 10 });
    if (toolCallsThisTurn < K) {
      toolCallsThisTurn += 1;
      sendBack({ type: 'model.tool_call', callId: `call_${toolCallsThisTurn}`, name: 'instant', arguments: '{"n":1}' });
    } else {
      sendBack({ type: 'model.text_delta', delta: 'done' });
    }
    sendBack({ type: 'model.completed', usage: USAGE });
  });
  return () => {
    live = false;
  };
};

/** A call the Turn runs itself: validated, authorised, run and recorded at once. */
const runToolCall = ({ sendBack, receive }) => {
  let live = true;
  receive((command) => {
    switch (command.type) {
      case 'tool.authorize':
        return later(() => live && sendBack({ type: 'tool.authorized', output: { kind: 'execute' } }));
      case 'tool.execute':
        return later(() => live && sendBack({ type: 'tool.finished', result: RESULT }));
      case 'tool.record':
        return later(() => live && sendBack({ type: 'tool.recorded', result: command.input.result }));
    }
  });
  later(() => live && sendBack({ type: 'tool.validated', output: { kind: 'registered', args: { n: 1 } } }));
  return () => {
    live = false;
  };
};

const turn = turnMachine.provide({
  actors: {
    turnEffects: hostTurnEffects({ callModel, runToolCall }),
    beginTurn: fromPromise(async () => undefined),
    finishTurn: fromPromise(async () => true),
    drainInbox: fromPromise(async () => ({ mailboxIds: [], inputIds: [] })),
    recordCancelledCalls: fromPromise(async () => undefined),
  },
});

let finished = null;
let turnIndex = 0;
const parent = setup({ actors: { turn } }).createMachine({
  context: {},
  on: {
    start: '.running',
  },
  initial: 'idle',
  states: {
    idle: {},
    running: {
      invoke: {
        id: 'turn',
        src: 'turn',
        input: () => turnInput(`turn_${++turnIndex}`),
        onDone: { target: 'idle', actions: ({ event }) => finished(event.output) },
        onError: { target: 'idle', actions: ({ event }) => finished({ error: event.error }) },
      },
    },
  },
});

function turnInput(turnId) {
  return {
    sessionId: 'ses_bench',
    turnId,
    clientRequestId: `req_${turnId}`,
    messages: [{ id: `m_${turnId}`, role: 'user', kind: 'normal', content: [{ type: 'text', text: 'go' }] }],
    systemContext: [],
    limits: { maxModelCalls: K + 5, doomLoopThreshold: K + 5 },
    permissionMode: 'auto',
    permissionModeOrigin: 'session_default',
    nonInteractive: false,
    sessionGrants: {},
    tokenBaseline: USAGE,
    mailbox: [],
    pendingInput: [],
    compactAtTokens: 0,
    compactionEnabled: true,
    disabledSkillNames: [],
  };
}

let counting = false;
const counts = { turnEvents: 0, events: 0, snapshots: 0, turnSnapshots: 0, turnMicrosteps: 0, fastContexts: 0 };
let firstSlow = null;
// With `node --allow-natives-syntax`: whether each Turn snapshot's context has fast properties (a
// hidden class) or went to dictionary mode (a hash table: every read a lookup, every copy rehashed).
const hasFastProperties = process.execArgv.includes('--allow-natives-syntax') ? new Function('o', 'return %HasFastProperties(o)') : null;
const inspect = (e) => {
  if (!counting) return;
  if (e.type === '@xstate.event') {
    counts.events += 1;
    if (e.actorRef?.id === 'turn') counts.turnEvents += 1;
  } else if (e.type === '@xstate.microstep') {
    if (e.actorRef?.id === 'turn') counts.turnMicrosteps += 1;
  } else if (e.type === '@xstate.snapshot') {
    counts.snapshots += 1;
    if (e.actorRef?.id === 'turn') {
      counts.turnSnapshots += 1;
      if (hasFastProperties?.(e.snapshot.context)) counts.fastContexts += 1;
      else if (hasFastProperties && firstSlow === null)
        firstSlow = { value: JSON.stringify(e.snapshot.value), event: e.event?.type ?? null, keys: Object.keys(e.snapshot.context).length };
    }
  }
};
const withInspect = process.env.TURN_CHART_INSPECT === '1';
const host = createActor(parent, withInspect ? { inspect } : {});
host.start();

const runTurn = () =>
  new Promise((resolveTurn, reject) => {
    toolCallsThisTurn = 0;
    finished = (output) => (output?.outcome?.status === 'completed' ? resolveTurn() : reject(new Error(JSON.stringify(output))));
    host.send({ type: 'start' });
  });

for (let i = 0; i < WARMUP; i++) await runTurn();

// The counts: one pass with an inspector attached (in its own process run, TURN_CHART_INSPECT=1).
if (withInspect) {
  counting = true;
  const counted = Number(process.env.TURN_CHART_INSPECT_TURNS ?? 10);
  for (let i = 0; i < counted; i++) await runTurn();
  counting = false;
  const per = (n) => (n / (counted * K)).toFixed(2);
  console.log(
    `${dist} (fold ${folded}): per tool step: Turn macrosteps ${per(counts.turnEvents)}, Turn microsteps ${per(counts.turnMicrosteps)}, XState events ${per(counts.events)}, snapshots ${per(counts.snapshots)} (Turn ${per(counts.turnSnapshots)})` +
      (hasFastProperties ? `; Turn contexts with fast properties ${((100 * counts.fastContexts) / counts.turnSnapshots).toFixed(0)}%` : ''),
  );
  if (firstSlow !== null) {
    console.log(`Turn context in dictionary mode: first at state ${firstSlow.value} after ${firstSlow.event}, ${firstSlow.keys} top-level keys`);
    process.exit(1);
  }
  process.exit(0);
}

// An allocation profile of one round, every allocation sampled whether or not it was collected since
// (TURN_CHART_HEAP_PROF=<file>; read with the sampling profile's tree, selfSize by call frame).
if (process.env.TURN_CHART_HEAP_PROF) {
  const { Session } = await import('node:inspector/promises');
  const { writeFileSync } = await import('node:fs');
  const session = new Session();
  session.connect();
  await session.post('HeapProfiler.startSampling', { samplingInterval: 256, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
  for (let i = 0; i < TURNS; i++) await runTurn();
  const { profile } = await session.post('HeapProfiler.stopSampling');
  writeFileSync(process.env.TURN_CHART_HEAP_PROF, JSON.stringify(profile));
  console.log(`${dist}: allocation profile of ${TURNS * K} steps in ${process.env.TURN_CHART_HEAP_PROF}`);
  process.exit(0);
}

const heap = [];
const cpu = [];
for (let r = 0; r < ROUNDS; r++) {
  globalThis.gc();
  const before = process.memoryUsage().heapUsed;
  const c0 = process.cpuUsage();
  for (let i = 0; i < TURNS; i++) await runTurn();
  const c1 = process.cpuUsage(c0);
  heap.push((process.memoryUsage().heapUsed - before) / (TURNS * K) / 1024);
  cpu.push((c1.user + c1.system) / (TURNS * K));
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(
  `${dist} (fold ${folded}): heap growth a step ${median(heap).toFixed(1)} kB (rounds ${heap.map((x) => x.toFixed(1)).join(' ')}); process CPU a step ${median(cpu).toFixed(0)} µs (rounds ${cpu.map((x) => x.toFixed(0)).join(' ')})`,
);
host.stop();
