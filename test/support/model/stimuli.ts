/**
 * The stimuli of the model-based tests: everything that can happen to a loaded session from the
 * outside — a host command, a storage write that commits or fails, a model stream event, a World
 * State sample, a compaction's summary, an authorisation, a tool outcome, an agent tool's outcome.
 * Each stimulus is delivered to the simulated system (sim.ts) as the `xstate.done.actor.<id>` /
 * `xstate.error.actor.<id>` event, model event or command event the real runtime would produce, and
 * performed for real on the runtime by replay.ts.
 *
 * Effects that no port holds (request assembly, tool-call validation, an invalid plan, list_agents,
 * a wait_agent that finds a message already waiting, a tool stopping after its abort, World State
 * sampling when it is off) complete on their own here exactly as they do in the runtime; their
 * outcome follows from the world configuration, the call's content and the session's state, so the
 * simulated path and the runtime agree. `manual compaction` is the host's `compactConversation()`:
 * its effect runs outside the charts (in the handle), so the environment remembers that a summary
 * is pending while the Session is in `maintenance`.
 */
import type { AnyActorLogic } from 'xstate';
import { ModelError } from '../../../src/errors.js';
import type { SessionInput } from '../../../src/machines/session/ports.js';
import { ModelCallSetupFailure } from '../../../src/machines/turn/ports.js';
import { ReloadRequiredError } from '../../../src/services/compaction/compaction.js';
import { CompactionError } from '../../../src/services/compaction/runtime-state.js';
import { AssemblyError } from '../../../src/services/context/assemble.js';
import { WorldStateError } from '../../../src/services/context/world-state.js';
import type { ToolCallInput } from '../../../src/machines/types.js';
import type { RateLimitSnapshot } from '../../../src/protocol/rate-limits.js';
import { EXPLORER_LIMITS } from '../../../src/services/agents/explorer.js';
import { contextLimits } from '../../../src/services/context/limits.js';
import { DEFAULT_CARD_DECISIONS } from '../../../src/services/tool-call-actors.js';
import { validatePlanArgs } from '../../../src/services/plan/update-plan.js';
import type { TurnSnapshot } from '../../../src/machines/turn.js';
import { effectSlotsOf, SimSystem, type SimActors, type SimEffects, type ToolCallSnapshot } from './sim.js';

/** The content of a tool call the model may emit, and what validation makes of it. */
export const TOOL_CONTENTS = {
  ok_a: { name: 'gated', arguments: '{"v":"a"}' },
  ok_b: { name: 'gated', arguments: '{"v":"b"}' },
  bad_json: { name: 'gated', arguments: '{"v":' },
  bad_args: { name: 'gated', arguments: '{"v":5}' },
  unknown: { name: 'nope', arguments: '{}' },
  explode: { name: 'explode', arguments: '{"v":"x"}' },
  plan: { name: 'update_plan', arguments: '{"plan":[{"step":"one","status":"in_progress"},{"step":"two","status":"pending"}]}' },
  bad_plan: { name: 'update_plan', arguments: '{"plan":[{"step":"one","status":"done"}]}' },
  spawn: { name: 'spawn_agent', arguments: '{"task_name":"probe","message":"look around"}' },
  wait: { name: 'wait_agent', arguments: '{"timeout_ms":10000}' },
  list: { name: 'list_agents', arguments: '{}' },
  ask: { name: 'request_user_input', arguments: '{"questions":[{"id":"q","question":"which one?"}]}' },
} as const;
export type ToolKind = keyof typeof TOOL_CONTENTS;

/** The task name every spawn in a path uses (a second live spawn is a duplicate). */
export const TASK_NAME = 'probe';

/** The tokens a request may have before threshold compaction: a window this small puts every request over the line. */
export const TINY_CONTEXT_WINDOW = 10;

/** What the model port reports after every stream (reference: seed 004 §2 rate limits). */
export const RATE_LIMITS: RateLimitSnapshot = { limitId: 'gated', primary: { usedPercent: 10, windowMinutes: 1 } };

export const CARD = {
  toolName: 'gated',
  kind: 'approval' as const,
  summary: 'run the gated tool',
  environmentId: 'local',
  grantKey: 'gated:any',
};

export type CommandKind =
  | 'start'
  | 'start_dup'
  | 'cancel'
  | 'cancel_other'
  | 'resolve_allow_once'
  | 'resolve_deny'
  | 'resolve_allow_for_turn'
  | 'resolve_allow_for_session'
  | 'resolve_wrong_call'
  | 'resolve_other_turn'
  /** `answerUserInput` for the pending request_user_input call. */
  | 'answer'
  /** `answerUserInput` in the active turn for a call that is not waiting: `user_input_not_pending`. */
  | 'answer_wrong_call'
  /** `answerUserInput` for a turn that is not active: `turn_not_active`. */
  | 'answer_other_turn'
  | 'steer'
  | 'steer_other'
  | 'deliver'
  | 'set_mode'
  /** `compactConversation()`: maintenance, then a summary unless there is nothing to summarise. */
  | 'compact'
  /** A spawned explorer's handle shut down with its turn stuck: its parent stops the child actor. */
  | 'stop_child'
  | 'shutdown';

export type ModelEventKind = 'text' | 'reasoning' | 'opaque' | 'completed' | 'end' | 'protocol' | 'error' | 'overflow';

export type PortActor =
  | 'beginTurn'
  | 'drainInbox'
  | 'sampleWorldState'
  | 'recordModelCallStart'
  | 'persistAssistantMessage'
  | 'compactConversation'
  | 'recordCancelledCalls'
  | 'finishTurn'
  | 'authorize'
  | 'execute'
  | 'commitPlan'
  | 'runAgentTool'
  | 'record'
  /** The summary of a manual compaction (no chart actor: the handle runs it during maintenance). */
  | 'manual';

export type Stimulus =
  | { type: string; kind: 'port'; actor: PortActor; outcome: string }
  | { type: string; kind: 'model'; ev: ModelEventKind }
  | { type: string; kind: 'tool_call'; tool: ToolKind }
  | { type: string; kind: 'cmd'; cmd: CommandKind };

export interface WorldConfig {
  name: string;
  /** At most this many turns are started. */
  maxTurns: number;
  limits: { maxModelCalls: number; doomLoopThreshold: number };
  /**
   * `off`: `createCore({ plan: true, conversationHistory: true, agents: true, compaction: false })` (an overflow fails the turn); `overflow`: compaction
   * on, the model's window unknown (only an explicit overflow compacts); `threshold`: a window so
   * small that every request reaches the automatic line.
   */
  compaction: 'off' | 'overflow' | 'threshold';
  /** World State sampling on, its skill catalog held by the test; off, sampling completes at once. */
  worldState: boolean;
  /** The system prompt is over the part limit: every request assembly fails. */
  assembleFails: boolean;
  /** A sub-agent (explorer) session: cards are refused without asking, no control tools. */
  nonInteractive: boolean;
  maxCallsPerResponse: number;
  toolKinds: ToolKind[];
  model: ModelEventKind[];
  commands: CommandKind[];
  ports: Partial<Record<PortActor, string[]>>;
  /** A host command issued the moment an actor enters a state (a race no gate can hold). */
  interrupt?: { machine: 'turn' | 'toolCall'; state: string; cmd: 'cancel' | 'shutdown' };
}

export const DEFAULT_PORTS: Record<PortActor, string[]> = {
  beginTurn: ['ok', 'fail'],
  drainInbox: ['ok', 'fail'],
  // ok: the catalog answers (what changed is written); fail: that write fails; catalog_error: the catalog fails.
  sampleWorldState: ['ok', 'fail', 'catalog_error'],
  recordModelCallStart: ['ok', 'fail'],
  persistAssistantMessage: ['ok', 'fail'],
  // ok: a valid summary and its checkpoint; fail: the checkpoint write fails; invalid: every summary
  // attempt is refused by validation; reload: the committed checkpoint cannot be installed.
  compactConversation: ['ok', 'fail', 'invalid', 'reload'],
  recordCancelledCalls: ['ok', 'fail'],
  finishTurn: ['ok', 'not_running', 'fail'],
  authorize: ['execute', 'deny', 'card', 'fail'],
  execute: ['succeed', 'fail', 'cancelled', 'progress'],
  commitPlan: ['ok', 'fail'],
  // spawn_agent: ok (the child row is written) or fail (it is not); wait_agent: timeout.
  runAgentTool: ['ok', 'fail', 'timeout'],
  record: ['ok', 'fail'],
  manual: ['ok', 'fail', 'invalid', 'reload'],
};

export interface Env {
  turnsStarted: number;
  accepted: string[];
  interruptFired: boolean;
  /** Content kind of every provider call id the model emitted. */
  kinds: Record<string, ToolKind>;
  calls: number;
  commands: number;
  delivered: number;
  steered: number;
  modeToggle: boolean;
  /** A real user request is in the conversation (a manual compaction has something to summarise). */
  hasUser: boolean;
  /** A manual compaction waits for its summary. */
  manual: boolean;
  /** Agent control's registry holds TASK_NAME (a spawn of that name is a duplicate). */
  reserved: boolean;
  /** Spawned explorers whose actor is still running under the root (their first turn is held). */
  liveChildren: string[];
  /** Spawned explorers stopped since (their rows stay until the next reconciliation deletes them). */
  stoppedChildren: number;
}

/** One node of the traversal: the three actors, the environment, and what the last stimulus did. */
export interface ModelState {
  status: 'active';
  output: undefined;
  error: undefined;
  actors: SimActors;
  env: Env;
  last: SimEffects;
}

export const SESSION_ID = 'ses_model';

export function sessionInput(config: WorldConfig): SessionInput {
  return {
    sessionId: SESSION_ID,
    permissionMode: 'auto',
    permissionModeOrigin: config.nonInteractive ? 'inherited' : 'session_default',
    nonInteractive: config.nonInteractive,
    systemContext: [{ key: 'core/agent-system', content: 'model-based test' }],
    limits: config.nonInteractive ? EXPLORER_LIMITS : config.limits,
    compactAtTokens: config.compaction === 'threshold' ? contextLimits({ contextWindow: TINY_CONTEXT_WINDOW })!.autoCompactTokenLimit : 0,
    compactionEnabled: config.compaction !== 'off',
    tokenTotals: { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 },
    acceptedRequests: {},
    lastTerminal: null,
    reloadRequired: false,
  };
}

type Bare = { kind: 'port'; actor: PortActor; outcome: string } | { kind: 'model'; ev: ModelEventKind } | { kind: 'tool_call'; tool: ToolKind } | { kind: 'cmd'; cmd: CommandKind };

function label(s: Bare): string {
  switch (s.kind) {
    case 'port':
      return `${s.actor}:${s.outcome}`;
    case 'model':
      return `model:${s.ev}`;
    case 'tool_call':
      return `model:tool_call:${s.tool}`;
    case 'cmd':
      return `cmd:${s.cmd}`;
  }
}

function stim(s: Bare): Stimulus {
  return { ...s, type: label(s) };
}

/** The compact, comparable view of the actors: what the replay must also see in the runtime. */
export interface Observation {
  session: unknown;
  sessionStatus: string;
  activeTurn: boolean;
  pendingApproval: boolean;
  pendingUserInput: boolean;
  reloadRequired: boolean;
  shuttingDown: boolean;
  rateLimits: boolean;
  mailbox: number;
  turn: unknown;
  turnStatus: string | null;
  modelCallIndex: number | null;
  samplingSequence: number | null;
  summarized: boolean | null;
  stopRequest: string | null;
  batchIndex: number | null;
  waitTimeouts: number | null;
  outcome: string | null;
  toolCall: unknown;
  toolCallStatus: string | null;
  toolStop: string | null;
  toolTerminal: string | null;
  toolResult: string | null;
  /** The call the Turn runs itself: result/terminal/executed. */
  direct: string | null;
  /** Invoked effect actors (what the runtime is waiting for). */
  waiting: string[];
}

type Snap = { value: unknown; status: string; context: any; children: Record<string, unknown> };

export function observe(session: Snap, turn: Snap | null | undefined, toolCall: Snap | null | undefined): Observation {
  const effects = (s: Snap | null | undefined, skip: string) =>
    s && s.status === 'active' ? Object.keys(s.children).filter((k) => k !== skip && k !== 'effects' && s.children[k]) : [];
  const outcome = turn?.context.outcome as { status: string; code?: string } | null | undefined;
  return {
    session: session.value,
    sessionStatus: session.status,
    activeTurn: session.context.activeTurn !== null,
    pendingApproval: session.context.pendingApproval !== null,
    pendingUserInput: session.context.pendingUserInput !== null,
    reloadRequired: session.context.reloadRequired,
    shuttingDown: session.context.shuttingDown,
    rateLimits: session.context.rateLimits !== null,
    mailbox: session.context.mailbox.length,
    turn: turn?.value ?? null,
    turnStatus: turn?.status ?? null,
    modelCallIndex: turn?.context.counts.modelCallIndex ?? null,
    samplingSequence: turn?.context.modelCall.samplingSequence ?? null,
    summarized: turn ? turn.context.modelCall.summarizedThisCall : null,
    stopRequest: turn?.context.stopRequest ?? null,
    batchIndex: turn ? turn.context.counts.batchIndex : null,
    waitTimeouts: turn ? turn.context.counts.waitTimeouts : null,
    outcome: outcome ? `${outcome.status}${outcome.code ? `:${outcome.code}` : ''}` : null,
    toolCall: toolCall?.value ?? null,
    toolCallStatus: toolCall?.status ?? null,
    toolStop: toolCall?.context.stopRequest ?? null,
    toolTerminal: toolCall?.context.terminal?.code ?? null,
    toolResult: toolCall?.context.result?.status ?? null,
    direct: directOf(turn),
    // The Turn's effects actor lives as long as the turn: what it waits for is its live slots.
    waiting: [...effects(turn, 'toolCall'), ...effectSlotsOf(turn), ...effects(toolCall, '')].sort(),
  };
}

/** The call the Turn runs itself (`tools.run`): its result, terminal and whether the tool ran. */
function directOf(turn: Snap | null | undefined): string | null {
  const d = turn?.status === 'active' ? turn.context.direct : null;
  return d ? `${d.result?.status ?? '-'}/${d.terminal?.code ?? '-'}/${d.executed}` : null;
}

/** The traversal key: state values plus the small counters that decide what can happen next. */
export function serialize(state: ModelState): string {
  const s = state.actors.session;
  const t = state.actors.turn;
  const c = state.actors.toolCall;
  const sc = s.context;
  const tc = t?.context;
  const env = state.env;
  const kinds = (calls: Array<{ callId: string }> | undefined) => (calls ?? []).map((x) => env.kinds[x.callId] ?? '?');
  return JSON.stringify([
    s.value,
    s.status,
    sc.activeTurn !== null,
    sc.pendingApproval !== null,
    sc.mailbox.length > 0,
    sc.pendingInput.length > 0,
    sc.reloadRequired,
    sc.shuttingDown,
    sc.systemError !== null,
    sc.permissionMode,
    Object.keys(sc.sessionGrants).length,
    sc.lastTerminal ? (sc.lastTerminal.outcome.status === 'failed' ? sc.lastTerminal.outcome.code : sc.lastTerminal.outcome.status) : null,
    t
      ? [
          t.value,
          t.status,
          tc!.counts.modelCallIndex,
          tc!.stopRequest,
          tc!.draft.completion !== null,
          tc!.draft.text !== '',
          tc!.draft.reasoning !== '',
          tc!.draft.opaque.length,
          tc!.draft.semantic,
          kinds(tc!.draft.toolCalls),
          tc!.host.pendingInput.length > 0,
          tc!.host.mailbox.length > 0,
          tc!.batch ? kinds(tc!.batch.calls).slice(tc!.counts.batchIndex) : null,
          tc!.modelCall.compactionTrigger,
          tc!.modelCall.overflowResubmitted,
          tc!.modelCall.thresholdTried,
          tc!.modelCall.summarizedThisCall,
          tc!.modelCall.samplingSequence,
          tc!.end.reloadRequired,
          tc!.counts.waitTimeouts,
          tc!.outcome ? JSON.stringify([tc!.outcome.status, (tc!.outcome as { code?: string }).code]) : null,
          tc!.doom.count,
          Object.keys(tc!.host.turnGrants).length,
          tc!.plan !== null,
          tc!.host.permissionMode,
          tc!.end.endingWithAnswer,
          tc!.end.endRecorded,
          directOf(t as unknown as Snap),
        ]
      : null,
    c ? [c.value, c.status, c.context.stopRequest, c.context.result?.status ?? null, c.context.terminal?.code ?? null, c.context.recorded, c.context.waitTimedOut] : null,
    env.turnsStarted,
    env.accepted.length > 0,
    env.interruptFired,
    env.hasUser,
    env.manual,
    env.reserved,
    env.liveChildren.length,
    env.stoppedChildren > 0,
  ]);
}

function pendingCallKind(state: { actors: SimActors; env: Env }): ToolKind | undefined {
  const call = (state.actors.toolCall?.context as ToolCallInput | undefined)?.call ?? state.actors.turn?.context.direct?.call;
  return call ? state.env.kinds[call.callId] : undefined;
}

/** Agent messages delivered and not yet drained: what makes `wait_agent` return at once. */
function undrained(actors: SimActors): number {
  const turn = actors.turn && actors.turn.status === 'active' ? actors.turn.context.host.mailbox.length : 0;
  return actors.session.context.mailbox.length + turn;
}

/** What can happen next, given the world configuration. */
export function stimuliFor(state: ModelState, config: WorldConfig): Stimulus[] {
  const out: Stimulus[] = [];
  const { session, turn, toolCall } = state.actors;
  const env = state.env;
  const ports = (actor: PortActor) => config.ports[actor] ?? DEFAULT_PORTS[actor];
  const turnWaits =
    turn && turn.status === 'active'
      ? [...Object.keys(turn.children).filter((k) => k !== 'effects' && turn.children[k as keyof typeof turn.children]), ...effectSlotsOf(turn)]
      : [];
  const toolWaits = toolCall && toolCall.status === 'active' ? Object.keys(toolCall.children).filter((k) => toolCall.children[k]) : [];
  const offer = (actor: PortActor, allowed?: readonly string[]) => {
    for (const outcome of ports(actor)) if (!allowed || allowed.includes(outcome)) out.push(stim({ kind: 'port', actor, outcome }));
  };

  for (const id of turnWaits) {
    if (id === 'toolCall') continue;
    if (id === 'run') {
      // The run actor validates on its own (settle()); then what the chart sent it is a port: the
      // authorizer's, the tool's or the result's write.
      const run = runState(turn!);
      if (run === 'authorizing') offer('authorize');
      if (run === 'executing') offer('execute');
      if (run === 'recording') offer('record');
      continue;
    }
    if (id === 'callModel' && sampling(turn!)) {
      // The model actor samples World State first (when it is on: off, settle() lets it pass).
      if (config.worldState) offer('sampleWorldState');
      continue;
    }
    if (id === 'callModel' && requesting(turn!)) {
      // The model actor assembled its request and now writes the call's counters (a storage port).
      offer('recordModelCallStart');
      continue;
    }
    if (id === 'callModel' && persisting(turn!)) {
      // The same model actor stores the answer the Turn asked for (`model.persist`): a storage port.
      offer('persistAssistantMessage');
      continue;
    }
    if (id === 'callModel') {
      const draft = turn!.context.draft;
      const ev = (e: ModelEventKind) => config.model.includes(e) && out.push(stim({ kind: 'model', ev: e }));
      if (draft.completion === null) {
        if (draft.text === '') ev('text');
        if (draft.reasoning === '') ev('reasoning');
        if (draft.opaque.length === 0) ev('opaque');
        if (draft.toolCalls.length < config.maxCallsPerResponse) {
          for (const tool of config.toolKinds) out.push(stim({ kind: 'tool_call', tool }));
        }
        ev('completed');
      } else {
        ev('end');
      }
      ev('protocol');
      ev('error');
      ev('overflow');
      continue;
    }
    // An end written with the final answer: the actor writes nothing and cannot fail (settle()).
    if (id === 'finishTurn' && (turn!.children.finishTurn as unknown as { options?: { input?: { recorded?: boolean } } } | undefined)?.options?.input?.recorded) continue;
    if (id in DEFAULT_PORTS) offer(id as PortActor);
  }
  for (const id of toolWaits) {
    if (id === 'commitPlan' && pendingCallKind(state) !== 'plan') continue;
    if (id === 'runAgentTool') {
      const kind = pendingCallKind(state);
      if (kind === 'spawn') offer('runAgentTool', ['ok', 'fail']);
      if (kind === 'wait') offer('runAgentTool', ['timeout']);
      continue;
    }
    if (id in DEFAULT_PORTS) offer(id as PortActor);
  }
  if (env.manual) offer('manual');

  const sc = session.context;
  const active = session.status === 'active';
  for (const cmd of config.commands) {
    switch (cmd) {
      case 'start':
        // A start that the session refuses (busy, maintenance, reload_required) does not count.
        if (env.turnsStarted < config.maxTurns || session.value !== 'idle' || sc.reloadRequired) out.push(stim({ kind: 'cmd', cmd }));
        break;
      case 'start_dup':
        if (env.accepted.length > 0) out.push(stim({ kind: 'cmd', cmd }));
        break;
      case 'cancel':
      case 'steer':
      case 'resolve_wrong_call':
      case 'answer_wrong_call':
        if (sc.activeTurn) out.push(stim({ kind: 'cmd', cmd }));
        break;
      case 'answer':
        if (sc.pendingUserInput) out.push(stim({ kind: 'cmd', cmd }));
        break;
      case 'resolve_allow_once':
      case 'resolve_deny':
      case 'resolve_allow_for_turn':
      case 'resolve_allow_for_session':
        if (sc.pendingApproval) out.push(stim({ kind: 'cmd', cmd }));
        break;
      case 'stop_child':
        if (active && env.liveChildren.length > 0) out.push(stim({ kind: 'cmd', cmd }));
        break;
      case 'shutdown':
        if (active && !sc.shuttingDown) out.push(stim({ kind: 'cmd', cmd }));
        break;
      default:
        out.push(stim({ kind: 'cmd', cmd }));
    }
  }
  return out;
}

function storageError(what: string) {
  return { code: 'persistence_error', message: `injected failure in ${what}` };
}

const failedResult = (code: string) => ({ status: 'failed', text: code, error: { code, message: code, retryable: false } });

/** What the `run` actor reports of a call's validation (the decision of services/tool-call-actors.ts). */
function validateOutput(input: ToolCallInput, kind: ToolKind, config: WorldConfig): { type: string; [k: string]: unknown } {
  const done = (output: unknown) => ({ type: 'tool.validated', output });
  const invalid = (code: string) => done({ kind: 'invalid', result: failedResult(code), resolvedName: null });
  const control = kind === 'plan' || kind === 'bad_plan' || kind === 'spawn' || kind === 'wait' || kind === 'list' || kind === 'ask';
  switch (kind) {
    case 'bad_json':
    case 'bad_args':
      return invalid('invalid_arguments');
    case 'unknown':
      return invalid('tool_not_found');
    case 'explode':
      return { type: 'tool.check_failed', error: new Error('schema exploded') };
    default: {
      // An explorer's tool surface has no control tools at all (reference §5.10 acceptance 17).
      if (control && config.nonInteractive) return invalid('tool_not_found');
      // The actor only validates; the doom-loop rule is the Turn chart's guard on its answer.
      const args = JSON.parse(input.call.arguments) as unknown;
      return done({ kind: control ? 'control' : 'registered', args });
    }
  }
}

/** Lets the effects that no port holds complete, in the order the runtime completes them. */
function settle(sim: SimSystem, env: Env, config: WorldConfig): void {
  for (let guard = 0; guard < 100; guard += 1) {
    const turnWaits = sim.invoked('turn');
    if ('callModel' in turnWaits && !config.worldState && sampling(sim.snapshot('turn')!)) {
      // Sampling is off: the model actor goes on to its request at once.
      sim.send('turn', sampledEvent(sim, config));
      continue;
    }
    // A model call is known by its slot's input: each start carries a new one.
    const callRef = turnWaits.callModel as object | undefined;
    if (callRef && !assembled.has(callRef) && requesting(sim.snapshot('turn')!)) {
      // A call that writes its own counters assembles its request in `requesting` (no port holds
      // it): it fails, asks for a threshold compaction, or goes on to write the call's counters (a
      // port, offered as a stimulus).
      assembled.add(callRef);
      const outcome = assemblyOutcome(turnWaits.callModel as CallStart, config);
      if (outcome) sim.send('turn', outcome);
      continue;
    }
    if ((turnWaits.finishTurn as { recorded?: boolean } | undefined)?.recorded) {
      // The final answer's statement wrote the end: the actor only does its local bookkeeping.
      sim.send('turn', { type: 'xstate.done.actor.finishTurn', output: true, actorId: 'finishTurn' });
      continue;
    }
    const cancelled = turnWaits.recordCancelledCalls as { calls: unknown[] } | undefined;
    if (cancelled && cancelled.calls.length === 0) {
      sim.send('turn', { type: 'xstate.done.actor.recordCancelledCalls', output: undefined, actorId: 'recordCancelledCalls' });
      continue;
    }
    if ('run' in turnWaits && runState(sim.snapshot('turn')!) === 'validating') {
      // The Turn validates every call itself (no port holds it).
      const input = turnWaits.run as ToolCallInput;
      sim.send('turn', validateOutput(input, env.kinds[input.call.callId]!, config));
      continue;
    }
    if ('run' in turnWaits && runState(sim.snapshot('turn')!) === 'executing' && sim.effects.executeAborted) {
      sim.effects.executeAborted = false;
      sim.send('turn', { type: 'tool.finished', result: { status: 'cancelled', text: 'tool call cancelled', error: { code: 'cancelled', message: 'tool call cancelled', retryable: false } } });
      continue;
    }
    const toolWaits = sim.invoked('toolCall');
    if ('commitPlan' in toolWaits) {
      const input = toolWaits.commitPlan as { args: unknown };
      const checked = validatePlanArgs(input.args);
      if (!checked.ok) {
        sim.send('toolCall', {
          type: 'xstate.done.actor.commitPlan',
          output: { ok: false, result: { status: 'failed', text: checked.message, error: { code: 'invalid_arguments', message: checked.message, retryable: false } } },
          actorId: 'commitPlan',
        });
        continue;
      }
    }
    if ('runAgentTool' in toolWaits) {
      const input = toolWaits.runAgentTool as { toolName: string };
      const agentDone = (result: unknown, waitTimedOut?: boolean) =>
        sim.send('toolCall', { type: 'xstate.done.actor.runAgentTool', output: { result, ...(waitTimedOut !== undefined ? { waitTimedOut } : {}) }, actorId: 'runAgentTool' });
      if (input.toolName === 'list_agents') {
        agentDone({ status: 'succeeded', text: '[]' });
        continue;
      }
      if (input.toolName === 'spawn_agent' && env.reserved) {
        agentDone(failedResult('duplicate_task_name'));
        continue;
      }
      if (input.toolName === 'wait_agent' && undrained(sim.freeze()) > 0) {
        // A delivered message not yet drained: wait_agent returns at once (or wakes) with delivered: true.
        agentDone({ status: 'succeeded', text: '{"delivered":true,"timed_out":false}' }, false);
        continue;
      }
    }
    if ('execute' in toolWaits && sim.effects.executeAborted) {
      sim.effects.executeAborted = false;
      sim.send('toolCall', { type: 'tool.finished', result: { status: 'cancelled', text: 'tool call cancelled', error: { code: 'cancelled', message: 'tool call cancelled', retryable: false } } });
      continue;
    }
    return;
  }
  throw new Error('the simulated system did not settle');
}

let simChildren = 0;

function commandEvent(state: { session: SimActors['session'] }, env: Env, cmd: CommandKind): { type: string; [k: string]: unknown } | null {
  const sc = state.session.context;
  const commandId = `cmd${(env.commands += 1)}`;
  const active = sc.activeTurn?.turnId ?? 'turn_none';
  const userMessage = (text: string) => ({ id: `msg_${text}`, role: 'user', kind: 'normal', content: [{ type: 'text', text }] });
  switch (cmd) {
    case 'start': {
      const clientRequestId = `req-${env.turnsStarted + 1}-${env.commands}`;
      return { type: 'session.start_turn', commandId, turnId: `turn_${env.commands}`, clientRequestId, messages: [userMessage(`start ${env.commands}`)], disabledSkillNames: [] };
    }
    case 'start_dup':
      return {
        type: 'session.start_turn',
        commandId,
        turnId: `turn_${env.commands}`,
        clientRequestId: env.accepted[env.accepted.length - 1]!,
        messages: [userMessage('again')],
        disabledSkillNames: [],
      };
    case 'cancel':
      return { type: 'session.cancel_turn', commandId, turnId: active };
    case 'cancel_other':
      return { type: 'session.cancel_turn', commandId, turnId: 'turn_other' };
    case 'resolve_allow_once':
    case 'resolve_deny':
    case 'resolve_allow_for_turn':
    case 'resolve_allow_for_session':
      return {
        type: 'session.resolve_permission',
        commandId,
        turnId: sc.pendingApproval?.turnId ?? active,
        toolCallId: sc.pendingApproval?.toolCallId ?? 'tc_none',
        decision: cmd.slice('resolve_'.length),
        at: 0,
      };
    case 'resolve_wrong_call':
      return { type: 'session.resolve_permission', commandId, turnId: active, toolCallId: 'tc_wrong', decision: 'allow_once', at: 0 };
    case 'resolve_other_turn':
      return { type: 'session.resolve_permission', commandId, turnId: 'turn_other', toolCallId: 'tc_wrong', decision: 'allow_once', at: 0 };
    case 'answer':
      return {
        type: 'session.answer_user_input',
        commandId,
        turnId: sc.pendingUserInput?.turnId ?? active,
        toolCallId: sc.pendingUserInput?.toolCallId ?? 'tc_none',
        answers: { q: 'this one' },
      };
    case 'answer_wrong_call':
      return { type: 'session.answer_user_input', commandId, turnId: active, toolCallId: 'tc_wrong', answers: { q: 'this one' } };
    case 'answer_other_turn':
      return { type: 'session.answer_user_input', commandId, turnId: 'turn_other', toolCallId: 'tc_wrong', answers: { q: 'this one' } };
    case 'steer':
      return { type: 'session.steer_turn', commandId, turnId: active, message: userMessage(`steer ${(env.steered += 1)}`) };
    case 'steer_other':
      return { type: 'session.steer_turn', commandId, turnId: 'turn_other', message: userMessage('steer other') };
    case 'deliver':
      env.delivered += 1;
      return { type: 'session.deliver_agent_message', commandId, message: { id: `agent-msg:${env.delivered}`, taskName: 't', kind: 'final_answer', body: 'b' } };
    case 'set_mode':
      env.modeToggle = !env.modeToggle;
      return { type: 'session.set_permission_mode', commandId, mode: env.modeToggle ? 'accept_edits' : 'auto' };
    case 'compact':
      return { type: 'session.begin_maintenance', commandId, kind: 'compact' };
    case 'stop_child':
      return { type: 'session.stop_child', childId: env.liveChildren[0]! };
    case 'shutdown':
      return { type: 'session.shutdown', commandId };
  }
}

/** The reply the session handle gives to a command, as the sim sees it (null: none yet, or none at all). */
export type SimReply = { ok: true } | { ok: false; code: string } | null;

function replyOf(sim: SimSystem, before: number, commandId: string): SimReply {
  const reply = sim.effects.replies.slice(before).find((r) => r.commandId === commandId)?.reply;
  if (!reply) return null;
  return reply.ok ? { ok: true } : { ok: false, code: reply.code };
}

function runCommand(sim: SimSystem, env: Env, cmd: CommandKind): SimReply {
  const session = sim.snapshot('session')!;
  const event = commandEvent({ session: session as never }, env, cmd);
  if (!event) return null;
  // A stopped session answers every command itself (SessionHandle.send); stop_child is never offered then.
  if (session.status !== 'active') return { ok: false, code: 'actor_stopped' };
  if (event.type === 'session.start_turn' && session.value === 'idle' && env.stoppedChildren > 0) {
    // The reconciliation before a root's turn deletes explorers that never got a turn row and are no
    // longer running: agent control forgets their task names (reference §5.8 step 1).
    env.stoppedChildren = 0;
    if (env.liveChildren.length === 0) env.reserved = false;
  }
  const before = sim.effects.replies.length;
  sim.send('session', event);
  if (event.type === 'session.stop_child') {
    env.liveChildren = env.liveChildren.slice(1);
    env.stoppedChildren += 1;
    return null;
  }
  const reply = replyOf(sim, before, event.commandId as string);
  if (event.type === 'session.start_turn') {
    const raw = sim.effects.replies.slice(before).find((r) => r.commandId === event.commandId)?.reply;
    if (raw?.ok && raw.turnId === event.turnId) {
      env.turnsStarted += 1;
      env.accepted.push(event.clientRequestId as string);
    }
  }
  if (event.type === 'session.begin_maintenance' && reply?.ok) {
    if (env.hasUser) {
      // The handle's compaction waits for its summary: the answer comes when it ends.
      env.manual = true;
      return null;
    }
    // Nothing to summarise: the compaction fails at once and the maintenance ends.
    sim.send('session', { type: 'session.end_maintenance', reloadRequired: false });
    return { ok: false, code: 'compaction_error' };
  }
  if (event.type === 'session.shutdown' && sim.snapshot('session')!.status !== 'active') {
    // Children end with the root actor.
    env.liveChildren = [];
  }
  return reply;
}

/** The manual compaction's end: a checkpoint (update, then the end), a failure, or an uninstallable checkpoint. */
function endManual(sim: SimSystem, env: Env, outcome: string): SimReply {
  env.manual = false;
  if (outcome === 'ok') {
    sim.send('session', {
      type: 'session.maintenance_update',
      update: { type: 'conversation_compacted', compactionId: 'cmp_manual', kind: 'manual', conversationTokensBefore: 10, conversationTokensAfter: 5 },
    });
  }
  sim.send('session', { type: 'session.end_maintenance', reloadRequired: outcome === 'reload' });
  if (sim.snapshot('session')!.status !== 'active') env.liveChildren = [];
  return outcome === 'ok' ? { ok: true } : { ok: false, code: outcome === 'reload' ? 'reload_required' : 'compaction_error' };
}

/** Model calls (their slot's input) whose start (the request's assembly) the simulation has played already. */
const assembled = new WeakSet<object>();

/** What the Turn told its model slot as the call started. */
type CallStart = { thresholdCompaction: boolean; counted: boolean };

/**
 * What the model actor reports once World State is sampled: `model.sampled` for a call that writes
 * its own counters (it shows `requesting` for that write); for a call the fact before reserved
 * (`counted`), nothing is written before the request, so it reports the outcome of the request's
 * assembly at once (issue 14 point 3: one Turn macrostep fewer a model call).
 */
function sampledEvent(sim: SimSystem, config: WorldConfig): { type: string; [k: string]: unknown } {
  const input = sim.invoked('turn').callModel as CallStart;
  return input.counted ? assemblyOutcome(input, config)! : { type: 'model.sampled' };
}

/**
 * What the model actor reports once its request is assembled: its failure, a threshold compaction,
 * or (for a call already counted) the request going out; null when it goes on to write its counters.
 */
function assemblyOutcome(input: CallStart, config: WorldConfig): { type: string; [k: string]: unknown } | null {
  if (config.assembleFails) return { type: 'model.failed', error: new ModelCallSetupFailure('assemble', new AssemblyError('system context part too large')) };
  if (config.compaction === 'threshold' && input.thresholdCompaction) return { type: 'model.over_threshold', estimatedInputTokens: 50 };
  return input.counted ? { type: 'model.call_recorded', estimatedInputTokens: 50 } : null;
}

/** The state of a call the Turn runs itself (`tools.run.<state>`, `executing` for either of its substates), or null. */
function runState(turn: { value: unknown }): string | null {
  const run = (turn.value as { tools?: { run?: unknown } } | null)?.tools?.run;
  if (typeof run === 'string') return run;
  return run && typeof run === 'object' && 'executing' in run ? 'executing' : null;
}

/** The Turn waits for its model actor to sample World State. */
function sampling(turn: { value: unknown }): boolean {
  return JSON.stringify(turn.value) === JSON.stringify({ running_model: { streaming: 'sampling' } });
}

/** The Turn waits for its model actor to store the answer it asked for. */
function persisting(turn: { value: unknown }): boolean {
  return JSON.stringify(turn.value) === JSON.stringify({ running_model: { streaming: 'persisting' } });
}

/** The Turn waits for its model actor to assemble the request and write the call's counters. */
function requesting(turn: { value: unknown }): boolean {
  return JSON.stringify(turn.value) === JSON.stringify({ running_model: { streaming: 'requesting' } });
}

function portEvent(sim: SimSystem, actor: Exclude<PortActor, 'manual'>, outcome: string, config: WorldConfig): { target: 'turn' | 'toolCall'; event: { type: string; [k: string]: unknown } } {
  // A call's actors run in the tool-call machine when the call waits, else in the Turn itself.
  const target = actor in sim.invoked('toolCall') ? 'toolCall' : 'turn';
  const input = sim.invoked(target)[actor] as Record<string, any>;
  const done = (output: unknown) => ({ target, event: { type: `xstate.done.actor.${actor}`, output, actorId: actor } }) as const;
  const fail = (error: unknown = storageError(actor)) => ({ target, event: { type: `xstate.error.actor.${actor}`, error, actorId: actor } }) as const;
  switch (actor) {
    case 'recordModelCallStart':
      // The model actor writes the counters itself: their commit is its event, their failure its error.
      return outcome === 'ok'
        ? { target, event: { type: 'model.call_recorded', estimatedInputTokens: 50 } }
        : { target, event: { type: 'model.failed', error: new ModelCallSetupFailure('record', storageError(actor)) } };
    case 'drainInbox':
      return outcome === 'ok' ? done({ mailboxIds: input.mailbox.map((m: { id: string }) => m.id), inputIds: input.pendingInput.map((m: { id: string }) => m.id) }) : fail();
    case 'sampleWorldState': {
      // The model actor samples World State itself: its end is an event, its failure the actor's error.
      if (outcome === 'ok') return { target, event: sampledEvent(sim, config) };
      const cause = outcome === 'catalog_error' ? new WorldStateError('skill_catalog_task_error', 'cannot build the skill catalog') : storageError(actor);
      return { target, event: { type: 'model.failed', error: new ModelCallSetupFailure('sample', cause) } };
    }
    case 'persistAssistantMessage':
      // The model actor stores the answer itself: the commit is its event, a failed write another.
      return outcome === 'ok'
        ? { target, event: { type: 'model.persisted', messageId: 'msg_assistant' } }
        : { target, event: { type: 'model.persist_failed', error: storageError(actor) } };
    case 'compactConversation':
      switch (outcome) {
        case 'ok':
          return done({ summarized: true, checkpointId: 'cmp_turn', conversationTokensBefore: 10, conversationTokensAfter: 5 });
        case 'reload':
          return fail(new ReloadRequiredError('cmp_turn', new Error('not installed')));
        default:
          return fail(new CompactionError('compaction failed'));
      }
    case 'finishTurn':
      return outcome === 'fail' ? fail() : done(outcome === 'ok');
    case 'authorize': {
      // The Turn's run actor reports authorisation as an event, its failure as `tool.check_failed`.
      const authorized = (output: unknown) => ({ target, event: { type: 'tool.authorized', output } }) as const;
      switch (outcome) {
        case 'execute':
          return authorized({ kind: 'execute' });
        case 'deny':
          return authorized({ kind: 'deny', text: 'refused by policy', source: 'policy' });
        case 'card':
          return authorized({ kind: 'card', card: { ...CARD, decisions: DEFAULT_CARD_DECISIONS }, at: 0 });
        default:
          return { target, event: { type: 'tool.check_failed', error: new Error('authorizer failed') } } as const;
      }
    }
    case 'execute':
      switch (outcome) {
        case 'progress':
          return { target, event: { type: 'tool.progress', progress: { kind: 'stdout', chunk: 'tick\n' } } };
        case 'succeed':
          return { target, event: { type: 'tool.finished', result: { status: 'succeeded', text: 'done' } } };
        case 'cancelled':
          return { target, event: { type: 'tool.finished', result: { status: 'cancelled', text: 'the tool stopped itself' } } };
        default:
          return { target, event: { type: 'tool.finished', result: { status: 'failed', text: 'tool failed', error: { code: 'execution_failed', message: 'tool failed', retryable: false } } } };
      }
    case 'commitPlan': {
      if (outcome !== 'ok') return fail();
      const checked = validatePlanArgs(input.args);
      if (!checked.ok) throw new Error('commitPlan:ok offered for an invalid plan');
      return done({ ok: true, result: { status: 'succeeded', text: 'Plan updated' }, plan: { explanation: checked.explanation, steps: checked.steps, updatedAt: '2026-01-01T00:00:00.000Z' } });
    }
    case 'runAgentTool':
      switch (outcome) {
        case 'ok':
          return done({ result: { status: 'succeeded', text: `{"task_name":"${TASK_NAME}"}` } });
        case 'fail':
          return done({ result: failedResult('agent_start_failed') });
        default:
          return done({ result: { status: 'succeeded', text: '{"delivered":false,"timed_out":true}' }, waitTimedOut: true });
      }
    case 'record': {
      // The actor answers the result as stored (made storable, issue 13.2); these results already are.
      if (target === 'toolCall') return outcome === 'ok' ? done(input.result) : fail();
      // The Turn's run actor writes what the chart sent it on entering `recording` (its `direct`) and
      // reports the write as an event.
      const result = (sim.snapshot('turn')!.context as TurnSnapshot['context']).direct!.result;
      return outcome === 'ok' ? { target, event: { type: 'tool.recorded', result } } : { target, event: { type: 'tool.record_failed', error: storageError(actor) } };
    }
    default:
      return outcome === 'ok' ? done(undefined) : fail();
  }
}

function modelEvents(sim: SimSystem, ev: ModelEventKind): Array<{ type: string; [k: string]: unknown }> {
  const draft = (sim.snapshot('turn')!.context as TurnSnapshot['context']).draft;
  const usage = { inputTokens: 1, outputTokens: 1, cachedInputTokens: 0, reasoningTokens: 0 };
  // The model actor passes the port's rate limits up whenever a stream ends, however it ends.
  const limits = { type: 'model.rate_limits_reported', snapshot: RATE_LIMITS };
  switch (ev) {
    case 'text':
      return [{ type: 'model.text_delta', delta: 'hello' }];
    case 'reasoning':
      return [{ type: 'model.reasoning_delta', delta: 'thinking' }];
    case 'opaque':
      return [{ type: 'model.provider_opaque', provider: 'scripted', data: { k: 1 } }];
    case 'completed':
      // The actor holds the completion until the stream has ended well, reports the limits, then completes.
      return [limits, { type: 'model.completed', usage, responseId: 'resp', finishReason: 'stop' }];
    case 'end':
      // The actor has no done event: it reports a stream that ends without a completion as its failure.
      return [limits, { type: 'model.failed', error: new ModelError('model_protocol_error', 'the model stream ended without a completed response', { semanticOutput: draft.semantic }) }];
    case 'protocol':
      return [limits, { type: 'model.failed', error: new ModelError('model_protocol_error', 'protocol', { semanticOutput: draft.semantic }) }];
    case 'error':
      return [limits, { type: 'model.failed', error: new ModelError('model_error', 'provider error', { semanticOutput: draft.semantic }) }];
    case 'overflow':
      return [limits, { type: 'model.failed', error: new ModelError('context_overflow', 'overflow', { semanticOutput: draft.semantic }) }];
  }
}

/** Applies one stimulus to a state: the next state, with what happened on the way. */
export function applyStimulus(state: ModelState, stimulus: Stimulus, config: WorldConfig): ModelState & { reply: SimReply } {
  const sim = SimSystem.from(state.actors);
  const env: Env = { ...state.env, accepted: [...state.env.accepted], kinds: { ...state.env.kinds }, liveChildren: [...state.env.liveChildren] };
  if (config.interrupt && !env.interruptFired) {
    const interrupt = config.interrupt;
    sim.entryHook = (machine, snapshot, system) => {
      if (env.interruptFired || machine !== interrupt.machine || JSON.stringify(snapshot.value) !== interrupt.state) return;
      env.interruptFired = true;
      runCommand(system, env, interrupt.cmd);
    };
  }
  let reply: SimReply = null;
  switch (stimulus.kind) {
    case 'cmd':
      reply = runCommand(sim, env, stimulus.cmd);
      break;
    case 'port': {
      if (stimulus.actor === 'manual') {
        reply = endManual(sim, env, stimulus.outcome);
        break;
      }
      if (stimulus.actor === 'beginTurn' && stimulus.outcome === 'ok') env.hasUser = true;
      if (stimulus.actor === 'runAgentTool' && pendingCallKind({ actors: sim.freeze(), env }) === 'spawn') {
        if (stimulus.outcome === 'ok') {
          // The child row is written: its Session actor is spawned under this one, its turn accepted.
          simChildren += 1;
          const childId = `agent:sim_child_${simChildren}`;
          sim.send('session', { type: 'session.spawn_child', childId, systemId: childId, input: {} });
          env.liveChildren.push(childId);
        }
        env.reserved = stimulus.outcome === 'ok';
      }
      const { target, event } = portEvent(sim, stimulus.actor, stimulus.outcome, config);
      sim.send(target, event);
      break;
    }
    case 'model':
      for (const event of modelEvents(sim, stimulus.ev)) sim.send('turn', event);
      break;
    case 'tool_call': {
      env.calls += 1;
      const callId = `call_${env.calls}`;
      env.kinds[callId] = stimulus.tool;
      const content = TOOL_CONTENTS[stimulus.tool];
      sim.send('turn', { type: 'model.tool_call', callId, name: content.name, arguments: content.arguments });
      break;
    }
  }
  settle(sim, env, config);
  if (sim.snapshot('session')!.status !== 'active') env.liveChildren = [];
  sim.entryHook = null;
  return { status: 'active', output: undefined, error: undefined, actors: sim.freeze(), env, last: sim.effects, reply };
}

export function initialState(config: WorldConfig): ModelState {
  const sim = SimSystem.create(sessionInput(config));
  return {
    status: 'active',
    output: undefined,
    error: undefined,
    actors: sim.freeze(),
    env: {
      turnsStarted: 0,
      accepted: [],
      interruptFired: false,
      kinds: {},
      calls: 0,
      commands: 0,
      delivered: 0,
      steered: 0,
      modeToggle: false,
      hasUser: false,
      manual: false,
      reserved: false,
      liveChildren: [],
      stoppedChildren: 0,
    },
    last: sim.effects,
  };
}

/** The whole system as an ActorLogic that xstate/graph can traverse. */
export function modelLogic(config: WorldConfig): AnyActorLogic {
  return {
    config,
    transition: (state: ModelState, event: Stimulus) => applyStimulus(state, event, config),
    getInitialSnapshot: () => initialState(config),
    getPersistedSnapshot: (state: ModelState) => state,
  } as unknown as AnyActorLogic;
}

/** A state where nothing is running: the session is stopped, or idle with no turn and no compaction. */
export function atRest(state: ModelState): boolean {
  const s = state.actors.session;
  if (s.status !== 'active') return true;
  return s.value === 'idle' && s.context.activeTurn === null && state.actors.turn === null && !state.env.manual;
}

export type { ToolCallSnapshot };
