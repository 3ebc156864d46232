/**
 * What the Session side of a step costs, apart from everything else (issue 14 points 2-3, branch
 * perf-session): the build's own Session machine and SessionHandle, with the Turn replaced by a
 * small machine that relays, per step, the two `session.publish` batches the real Turn sends in the
 * peers scenario (`[draft_cleared, phase_changed, tool_call_started]`, then `[tool_call_finished,
 * phase_changed]`), and a turn's start and end around K steps. Nothing is stored and no model is
 * called: what is timed is the Session macrostep of each publish, the envelope, sequence, ring
 * buffer, the session's and the core's RxJS Subjects (with a host subscriber on each, as a host has),
 * and per turn `session.start_turn`, the Turn actor's spawn and the turn's end (`settleTurn`).
 *
 * `node --expose-gc bench/peers/session-publish.mjs [dist-dir]`: per turn, per step and per publish,
 * CPU (the fastest of 40 rounds, so that a loaded machine reads closer to a quiet one) and bytes
 * allocated (V8's sampling heap profiler, collected objects included; SESSION_PUBLISH_ALLOC=<prefix>
 * writes the profiles). The Session's share of a publish is the turn minus the same turn with the
 * stand-in's relays swallowed. SESSION_PUBLISH_SUBSCRIBERS=0: no host subscriber (the peers
 * scenario). One build a process: two builds in one process would share xstate's inline caches;
 * run builds alternately instead.
 */
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Session } from 'node:inspector/promises';
import { writeFileSync } from 'node:fs';

const K = 10;
const TURNS = Number(process.env.SESSION_PUBLISH_TURNS ?? 50);
const ROUNDS = Number(process.env.SESSION_PUBLISH_ROUNDS ?? 40);
const ALLOC_CALLS = 400;
const dist = resolve(process.argv[2] ?? new URL('../../dist', import.meta.url).pathname);

async function harness(dist) {
  const { sessionMachine, SessionHandle } = await import(pathToFileURL(`${dist}/index.js`).href);
  // The xstate and rxjs the build itself resolves, so that the stand-in is of the same instance.
  const require = createRequire(`${dist}/index.js`);
  const { createActor, setup, sendParent } = await import(pathToFileURL(require.resolve('xstate')).href);
  const { Subject } = await import(pathToFileURL(require.resolve('rxjs')).href);
  // The Turn's stand-in: relays what it is told to its parent (as the Turn's deferred sendParent
  // does) and ends with the output a completed turn gives.
  const fakeTurn = setup({}).createMachine({
    context: ({ input }) => ({ turnId: input.turnId }),
    initial: 'running',
    output: ({ context }) => ({
      turnId: context.turnId,
      outcome: { status: 'completed', finalText: 'done' },
      plan: null,
      usage: { inputTokens: 100, outputTokens: 10, cachedInputTokens: 0, reasoningTokens: 0 },
      mailbox: [],
      pendingInput: [],
      reloadRequired: false,
      endRecorded: true,
    }),
    states: {
      running: {
        on: {
          relay: { actions: sendParent(({ event }) => event.payload) },
          // The same macrostep in the stand-in without the send: what the stand-in itself costs.
          swallow: { actions: () => {} },
          end: 'done',
        },
      },
      done: { type: 'final' },
    },
  });
  const logic = sessionMachine.provide({ actors: { turn: fakeTurn } });
  const global = new Subject();
  let seen = 0;
  // SESSION_PUBLISH_SUBSCRIBERS=0: no host subscriber on either stream, as in the peers scenario.
  const subscribers = process.env.SESSION_PUBLISH_SUBSCRIBERS !== '0';
  if (subscribers) {
    global.subscribe(() => {
      seen += 1;
    });
  }
  let counter = 0;
  let sessions = 0;
  let actor;
  const open = () => {
  sessions += 1;
  const record = { id: `ses_${sessions}`, parentSessionId: null, permissionMode: 'auto' };
  actor = createActor(logic, {
    input: {
      sessionId: record.id,
      permissionMode: 'auto',
      permissionModeOrigin: 'default',
      nonInteractive: false,
      systemContext: [],
      limits: { maxModelCalls: 100, doomLoopThreshold: 3 },
      compactAtTokens: 0,
      compactionEnabled: false,
      tokenTotals: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 },
      acceptedRequests: {},
      lastTerminal: null,
      reloadRequired: false,
    },
  });
  const handle = new SessionHandle({
    record,
    actor,
    compactor: {},
    services: { session: () => ({}) },
    storage: {},
    clock: { now: () => 1_000 },
    ids: { next: (p) => `${p}_${++counter}` },
    global,
    sandbox: { available: false, kind: 'none', detail: '' },
    maxUserInputTokens: 32_000,
    onClosed: () => {},
  });
  if (subscribers) {
    handle.updates$.subscribe(() => {
      seen += 1;
    });
  }
  actor.start();
  return handle;
  };
  let relayType = 'relay';
  const relay = (updates) => actor.getSnapshot().children.turn.send({ type: relayType, payload: { type: 'session.publish', updates } });
  let turns = 0;
  // The same turn with the stand-in's relays swallowed: the Session's share is turn - swallowed.
  const swallowed = () => {
    relayType = 'swallow';
    try {
      turn();
    } finally {
      relayType = 'relay';
    }
  };
  const turn = () => {
    open();
    turns += 1;
    const turnId = `turn_${turns}`;
    actor.send({ type: 'session.start_turn', commandId: `c${turns}`, turnId, clientRequestId: `r${turns}`, messages: [], disabledSkillNames: [] });
    relay([{ type: 'phase_changed', phase: 'running_model' }]);
    for (let i = 0; i < K; i += 1) {
      relay([
        { type: 'draft_cleared', reason: 'committed' },
        { type: 'phase_changed', phase: 'running_tools' },
        { type: 'tool_call_started', toolCallId: `tc_${i}`, providerCallId: `call_${i}`, toolName: 'instant', arguments: '{"i":1}', status: 'validating' },
      ]);
      relay([
        { type: 'tool_call_finished', toolCallId: `tc_${i}`, providerCallId: `call_${i}`, toolName: 'instant', status: 'success', text: 'ok' },
        { type: 'phase_changed', phase: 'running_model' },
      ]);
    }
    relay([{ type: 'text_delta', delta: 'done' }]);
    relay([
      { type: 'draft_cleared', reason: 'committed' },
      { type: 'phase_changed', phase: 'completed' },
      { type: 'turn_finished', outcome: { status: 'completed', finalText: 'done' }, usage: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 } },
    ]);
    actor.getSnapshot().children.turn.send({ type: 'end' });
    if (relayType === "relay" && actor.getSnapshot().value !== "idle") throw new Error(`turn did not end: ${JSON.stringify(actor.getSnapshot().value)}`);
  };
  // Only the start and end of a turn: what point 2 measures per turn.
  const bareTurn = () => {
    open();
    turns += 1;
    const turnId = `turn_${turns}`;
    actor.send({ type: 'session.start_turn', commandId: `c${turns}`, turnId, clientRequestId: `r${turns}`, messages: [], disabledSkillNames: [] });
    actor.getSnapshot().children.turn.send({ type: 'end' });
  };
  // Only a session opened: the actor, the handle, its stream and buffer.
  const bareSession = () => void open();
  return { dist, turn, swallowed, bareTurn, bareSession, seen: () => seen };
}

const tick = () => new Promise((r) => setTimeout(r, 5));

/** CPU µs per call over n calls. */
async function measure(fn, n) {
  await tick();
  const t0 = process.cpuUsage();
  for (let i = 0; i < n; i += 1) fn();
  const t = process.cpuUsage(t0);
  await tick();
  return { us: (t.user + t.system) / n };
}

const h = await harness(dist);
// Warm-up: the JIT.
for (let i = 0; i < 300; i += 1) h.turn();
const rows = { turn: [], swallowed: [], bareTurn: [], bareSession: [] };
for (let r = 0; r < ROUNDS; r += 1) {
  for (const k of Object.keys(rows)) {
    global.gc?.();
    rows[k].push(await measure(h[k], TURNS));
  }
}
// Bytes: V8's sampling heap profiler over ALLOC_CALLS calls of each (collected objects included, as
// cpu-split.mjs takes it); SESSION_PUBLISH_ALLOC=<file> also writes the full turns' profile there.
const inspector = new Session();
inspector.connect();
await inspector.post('HeapProfiler.enable');
const sampledBytes = {};
for (const k of ['turn', 'swallowed', 'bareTurn', 'bareSession']) {
  await inspector.post('HeapProfiler.startSampling', { samplingInterval: 256, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true });
  for (let i = 0; i < ALLOC_CALLS; i += 1) h[k]();
  const { profile } = await inspector.post('HeapProfiler.stopSampling');
  if (process.env.SESSION_PUBLISH_ALLOC) writeFileSync(`${process.env.SESSION_PUBLISH_ALLOC}.${k}.heapprofile`, JSON.stringify(profile));
  let total = 0;
  const walk = (node) => {
    total += node.selfSize;
    for (const c of node.children) walk(c);
  };
  walk(profile.head);
  sampledBytes[k] = total / ALLOC_CALLS;
}
const min = (xs) => Math.min(...xs);
const r = Object.fromEntries(Object.entries(rows).map(([k, v]) => [k, { us: min(v.map((x) => x.us)), bytes: sampledBytes[k] }]));
const publishes = 24;
if (process.env.SESSION_PUBLISH_HEADER !== '0') {
  console.log(`per turn of ${K} steps on a fresh session (${publishes} session.publish of 2.2 updates each); fastest of ${ROUNDS} rounds of ${TURNS}; bytes: sampled allocation (collected objects included)`);
  console.log('| build | turn µs | turn kB (sampled) | per step µs (turn/K) | start+end µs | start+end bytes | open session µs | open bytes | Session per publish µs (turn - swallowed) | per publish bytes |');
  console.log('|---|---|---|---|---|---|---|---|---|---|');
}
const f = (x, d = 1) => (Number.isNaN(x) ? 'n/a' : x.toFixed(d));
console.log(
  `| ${process.env.SESSION_PUBLISH_LABEL ?? dist} | ${f(r.turn.us)} | ${f(r.turn.bytes / 1024)} | ${f(r.turn.us / K, 2)} | ${f(r.bareTurn.us - r.bareSession.us)} | ${f(r.bareTurn.bytes - r.bareSession.bytes, 0)} | ${f(r.bareSession.us)} | ${f(r.bareSession.bytes, 0)} | ${f((r.turn.us - r.swallowed.us) / publishes, 2)} | ${f((r.turn.bytes - r.swallowed.bytes) / publishes, 0)} |`,
);
