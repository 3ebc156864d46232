/**
 * The stimuli of the model-based tests: everything that can happen to a loaded session from the
 * outside — a host command, a storage write that commits or fails, a model stream event, an
 * authorisation, a tool outcome. Each stimulus is delivered to the simulated system (sim.ts) as the
 * `xstate.done.actor.<id>` / `xstate.error.actor.<id>` event, model event or command event the real
 * runtime would produce, and performed for real on the runtime by replay.ts.
 *
 * Effects that no port controls (request assembly, tool-call validation, a tool stopping after its
 * abort) complete on their own here exactly as they do in the runtime; their outcome follows from
 * the world configuration and the call's content, so the simulated path and the runtime agree.
 */
import type { AnyActorLogic } from 'xstate';
import type { SessionInput } from '../../../src/machines/session.js';
import type { ToolCallInput } from '../../../src/machines/types.js';
import { DEFAULT_CARD_DECISIONS } from '../../../src/services/tool-call-actors.js';
import { validatePlanArgs } from '../../../src/services/plan/update-plan.js';
import { canonicalJson } from '../../../src/storage/sql-storage.js';
import type { TurnSnapshot } from '../../../src/machines/turn.js';
import { SimSystem, type SimActors, type SimEffects, type ToolCallSnapshot } from './sim.js';

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
} as const;
export type ToolKind = keyof typeof TOOL_CONTENTS;

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
  | 'steer'
  | 'steer_other'
  | 'deliver'
  | 'set_mode'
  | 'maintenance_begin'
  | 'maintenance_end'
  | 'maintenance_end_reload'
  | 'shutdown';

export type ModelEventKind = 'text' | 'reasoning' | 'opaque' | 'completed' | 'end' | 'protocol' | 'error' | 'overflow';

export type PortActor =
  | 'beginTurn'
  | 'drainInbox'
  | 'recordModelCallStart'
  | 'persistAssistantMessage'
  | 'compactConversation'
  | 'recordCancelledCalls'
  | 'finishTurn'
  | 'authorize'
  | 'execute'
  | 'commitPlan'
  | 'record';

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
  /** Every request assembly reaches the compaction line (a compaction hook is configured). */
  compaction: boolean;
  /** The system prompt is over the part limit: every request assembly fails. */
  assembleFails: boolean;
  /** A sub-agent session: cards are refused without asking. */
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
  recordModelCallStart: ['ok', 'fail'],
  persistAssistantMessage: ['ok', 'fail'],
  compactConversation: ['ok', 'fail'],
  recordCancelledCalls: ['ok', 'fail'],
  finishTurn: ['ok', 'not_running', 'fail'],
  authorize: ['execute', 'deny', 'card', 'fail'],
  execute: ['succeed', 'fail', 'cancelled', 'progress'],
  commitPlan: ['ok', 'fail'],
  record: ['ok', 'fail'],
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
    nonInteractive: config.nonInteractive,
    systemContext: [{ key: 'core/agent-system', content: 'model-based test' }],
    limits: config.limits,
    compactAtTokens: config.compaction ? 1 : 0,
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
  turn: unknown;
  turnStatus: string | null;
  modelCallIndex: number | null;
  stopRequest: string | null;
  batchIndex: number | null;
  outcome: string | null;
  toolCall: unknown;
  toolCallStatus: string | null;
  toolStop: string | null;
  toolTerminal: string | null;
  toolResult: string | null;
  /** Invoked effect actors (what the runtime is waiting for). */
  waiting: string[];
}

type Snap = { value: unknown; status: string; context: any; children: Record<string, unknown> };

export function observe(session: Snap, turn: Snap | null | undefined, toolCall: Snap | null | undefined): Observation {
  const effects = (s: Snap | null | undefined, skip: string) =>
    s && s.status === 'active' ? Object.keys(s.children).filter((k) => k !== skip && s.children[k]) : [];
  const outcome = turn?.context.outcome as { status: string; code?: string } | null | undefined;
  return {
    session: session.value,
    sessionStatus: session.status,
    activeTurn: session.context.activeTurn !== null,
    pendingApproval: session.context.pendingApproval !== null,
    turn: turn?.value ?? null,
    turnStatus: turn?.status ?? null,
    modelCallIndex: turn?.context.modelCallIndex ?? null,
    stopRequest: turn?.context.stopRequest ?? null,
    batchIndex: turn ? turn.context.batchIndex : null,
    outcome: outcome ? `${outcome.status}${outcome.code ? `:${outcome.code}` : ''}` : null,
    toolCall: toolCall?.value ?? null,
    toolCallStatus: toolCall?.status ?? null,
    toolStop: toolCall?.context.stopRequest ?? null,
    toolTerminal: toolCall?.context.terminal?.code ?? null,
    toolResult: toolCall?.context.result?.status ?? null,
    waiting: [...effects(turn, 'toolCall'), ...effects(toolCall, '')].sort(),
  };
}

/** The traversal key: state values plus the small counters that decide what can happen next. */
export function serialize(state: ModelState): string {
  const s = state.actors.session;
  const t = state.actors.turn;
  const c = state.actors.toolCall;
  const sc = s.context;
  const tc = t?.context;
  const kinds = (calls: Array<{ callId: string }> | undefined) => (calls ?? []).map((x) => state.env.kinds[x.callId] ?? '?');
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
          tc!.modelCallIndex,
          tc!.stopRequest,
          tc!.draft.completion !== null,
          tc!.draft.text !== '',
          tc!.draft.reasoning !== '',
          tc!.draft.opaque.length,
          tc!.draft.semantic,
          kinds(tc!.draft.toolCalls),
          tc!.pendingInput.length > 0,
          tc!.mailbox.length > 0,
          tc!.batch ? kinds(tc!.batch.calls).slice(tc!.batchIndex) : null,
          tc!.compactionTrigger,
          tc!.overflowResubmitted,
          tc!.outcome ? JSON.stringify([tc!.outcome.status, (tc!.outcome as { code?: string }).code]) : null,
          tc!.doom.count,
          Object.keys(tc!.turnGrants).length,
          tc!.plan !== null,
          tc!.permissionMode,
          tc!.endRecorded,
        ]
      : null,
    c ? [c.value, c.status, c.context.stopRequest, c.context.result?.status ?? null, c.context.terminal?.code ?? null, c.context.recorded] : null,
    state.env.turnsStarted,
    state.env.accepted.length > 0,
    state.env.interruptFired,
  ]);
}

function pendingCallKind(state: ModelState): ToolKind | undefined {
  const call = (state.actors.toolCall?.context as ToolCallInput | undefined)?.call;
  return call ? state.env.kinds[call.callId] : undefined;
}

/** What can happen next, given the world configuration. */
export function stimuliFor(state: ModelState, config: WorldConfig): Stimulus[] {
  const out: Stimulus[] = [];
  const { session, turn, toolCall } = state.actors;
  const ports = (actor: PortActor) => config.ports[actor] ?? DEFAULT_PORTS[actor];
  const turnWaits = turn && turn.status === 'active' ? Object.keys(turn.children).filter((k) => turn.children[k as keyof typeof turn.children]) : [];
  const toolWaits = toolCall && toolCall.status === 'active' ? Object.keys(toolCall.children).filter((k) => toolCall.children[k]) : [];

  for (const id of turnWaits) {
    if (id === 'toolCall') continue;
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
    if (id === 'compactConversation' && !config.compaction) continue;
    if (id in DEFAULT_PORTS) for (const outcome of ports(id as PortActor)) out.push(stim({ kind: 'port', actor: id as PortActor, outcome }));
  }
  for (const id of toolWaits) {
    if (id === 'commitPlan' && pendingCallKind(state) !== 'plan') continue;
    if (id in DEFAULT_PORTS) for (const outcome of ports(id as PortActor)) out.push(stim({ kind: 'port', actor: id as PortActor, outcome }));
  }

  const sc = session.context;
  for (const cmd of config.commands) {
    switch (cmd) {
      case 'start':
        // A start that the session refuses (busy, maintenance, reload_required) does not count.
        if (state.env.turnsStarted < config.maxTurns || session.value !== 'idle' || sc.reloadRequired) out.push(stim({ kind: 'cmd', cmd }));
        break;
      case 'start_dup':
        if (state.env.accepted.length > 0) out.push(stim({ kind: 'cmd', cmd }));
        break;
      case 'cancel':
      case 'steer':
      case 'resolve_wrong_call':
        if (sc.activeTurn) out.push(stim({ kind: 'cmd', cmd }));
        break;
      case 'resolve_allow_once':
      case 'resolve_deny':
      case 'resolve_allow_for_turn':
      case 'resolve_allow_for_session':
        if (sc.pendingApproval) out.push(stim({ kind: 'cmd', cmd }));
        break;
      case 'maintenance_end':
      case 'maintenance_end_reload':
        if (session.status === 'active' && session.value === 'maintenance') out.push(stim({ kind: 'cmd', cmd }));
        break;
      case 'shutdown':
        if (session.status === 'active' && !sc.shuttingDown) out.push(stim({ kind: 'cmd', cmd }));
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

/** What `validateToolCall` returns for a call (the decision of services/tool-call-actors.ts). */
function validateOutput(input: ToolCallInput, kind: ToolKind): { type: string; [k: string]: unknown } {
  const done = (output: unknown) => ({ type: 'xstate.done.actor.validate', output, actorId: 'validate' });
  const invalid = (code: string) => done({ kind: 'invalid', result: { status: 'failed', text: code, error: { code, message: code, retryable: false } }, doom: input.doom, resolvedName: null });
  switch (kind) {
    case 'bad_json':
    case 'bad_args':
      return invalid('invalid_arguments');
    case 'unknown':
      return invalid('tool_not_found');
    case 'explode':
      return { type: 'xstate.error.actor.validate', error: new Error('schema exploded'), actorId: 'validate' };
    default: {
      const args = JSON.parse(input.call.arguments) as unknown;
      const signature = `${input.call.name}\u0000${canonicalJson(args)}`;
      const count = input.doom.signature === signature ? input.doom.count + 1 : 1;
      const doom = { signature, count };
      if (count >= input.doomLoopThreshold) {
        const text = `doom loop detected for tool '${input.call.name}'`;
        return done({ kind: 'doom_loop', result: { status: 'failed', text, error: { code: 'execution_failed', message: text, retryable: false } }, doom });
      }
      return done({ kind: kind === 'plan' || kind === 'bad_plan' ? 'control' : 'registered', args, doom });
    }
  }
}

/** Lets the effects that no port holds complete, in the order the runtime completes them. */
function settle(sim: SimSystem, env: Env, config: WorldConfig): void {
  for (let guard = 0; guard < 100; guard += 1) {
    const turnWaits = sim.invoked('turn');
    if ('assembleRequest' in turnWaits) {
      sim.send(
        'turn',
        config.assembleFails
          ? { type: 'xstate.error.actor.assembleRequest', error: { code: 'model_protocol_error', message: 'request assembly failed: system context part too large' }, actorId: 'assembleRequest' }
          : { type: 'xstate.done.actor.assembleRequest', output: { overThreshold: config.compaction }, actorId: 'assembleRequest' },
      );
      continue;
    }
    if ('compactConversation' in turnWaits && !config.compaction) {
      // Without a compaction hook the actor fails at once (services/turn-actors.ts).
      sim.send('turn', { type: 'xstate.error.actor.compactConversation', error: new Error('automatic compaction is not configured for this runtime'), actorId: 'compactConversation' });
      continue;
    }
    const cancelled = turnWaits.recordCancelledCalls as { calls: unknown[] } | undefined;
    if (cancelled && cancelled.calls.length === 0) {
      sim.send('turn', { type: 'xstate.done.actor.recordCancelledCalls', output: undefined, actorId: 'recordCancelledCalls' });
      continue;
    }
    const toolWaits = sim.invoked('toolCall');
    if ('validate' in toolWaits) {
      const input = toolWaits.validate as ToolCallInput;
      sim.send('toolCall', validateOutput(input, env.kinds[input.call.callId]!));
      continue;
    }
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
    if ('execute' in toolWaits && sim.effects.executeAborted) {
      sim.effects.executeAborted = false;
      sim.send('toolCall', { type: 'tool.finished', result: { status: 'cancelled', text: 'tool call cancelled', error: { code: 'cancelled', message: 'tool call cancelled', retryable: false } } });
      continue;
    }
    return;
  }
  throw new Error('the simulated system did not settle');
}

function commandEvent(state: { session: SimActors['session'] }, env: Env, cmd: CommandKind): { type: string; [k: string]: unknown } | null {
  const sc = state.session.context;
  const commandId = `cmd${(env.commands += 1)}`;
  const active = sc.activeTurn?.turnId ?? 'turn_none';
  const userMessage = (text: string) => ({ id: `msg_${text}`, role: 'user', kind: 'normal', content: [{ type: 'text', text }] });
  switch (cmd) {
    case 'start': {
      const clientRequestId = `req-${env.turnsStarted + 1}-${env.commands}`;
      return { type: 'session.start_turn', commandId, turnId: `turn_${env.commands}`, clientRequestId, messages: [userMessage(`start ${env.commands}`)] };
    }
    case 'start_dup':
      return { type: 'session.start_turn', commandId, turnId: `turn_${env.commands}`, clientRequestId: env.accepted[env.accepted.length - 1]!, messages: [userMessage('again')] };
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
    case 'maintenance_begin':
      return { type: 'session.begin_maintenance', commandId, kind: 'compact' };
    case 'maintenance_end':
      return { type: 'session.end_maintenance', reloadRequired: false };
    case 'maintenance_end_reload':
      return { type: 'session.end_maintenance', reloadRequired: true };
    case 'shutdown':
      return { type: 'session.shutdown', commandId };
  }
}

/** The reply the session handle gives to a command, as the sim sees it. */
export type SimReply = { ok: true } | { ok: false; code: string } | null;

function runCommand(sim: SimSystem, env: Env, cmd: CommandKind): SimReply {
  const session = sim.snapshot('session')!;
  const event = commandEvent({ session: session as never }, env, cmd);
  if (!event) return null;
  // A stopped session answers every command itself (SessionHandle.send), and end_maintenance is a no-op.
  if (session.status !== 'active') return event.type === 'session.end_maintenance' ? null : { ok: false, code: 'actor_stopped' };
  const before = sim.effects.replies.length;
  sim.send('session', event);
  if (event.type === 'session.start_turn') {
    const reply = sim.effects.replies.slice(before).find((r) => r.commandId === event.commandId)?.reply;
    if (reply?.ok && reply.turnId === event.turnId) {
      env.turnsStarted += 1;
      env.accepted.push(event.clientRequestId as string);
    }
  }
  if (!('commandId' in event)) return null;
  const reply = sim.effects.replies.slice(before).find((r) => r.commandId === event.commandId)?.reply;
  if (!reply) return null;
  return reply.ok ? { ok: true } : { ok: false, code: reply.code };
}

function portEvent(sim: SimSystem, actor: PortActor, outcome: string): { target: 'turn' | 'toolCall'; event: { type: string; [k: string]: unknown } } {
  const target = ['authorize', 'execute', 'commitPlan', 'record'].includes(actor) ? 'toolCall' : 'turn';
  const input = sim.invoked(target)[actor] as Record<string, any>;
  const done = (output: unknown) => ({ target, event: { type: `xstate.done.actor.${actor}`, output, actorId: actor } }) as const;
  const fail = () => ({ target, event: { type: `xstate.error.actor.${actor}`, error: storageError(actor), actorId: actor } }) as const;
  switch (actor) {
    case 'drainInbox':
      return outcome === 'ok' ? done({ mailboxIds: input.mailbox.map((m: { id: string }) => m.id), inputIds: input.pendingInput.map((m: { id: string }) => m.id) }) : fail();
    case 'persistAssistantMessage':
      return outcome === 'ok' ? done({ messageId: 'msg_assistant' }) : fail();
    case 'finishTurn':
      return outcome === 'fail' ? fail() : done(outcome === 'ok');
    case 'authorize':
      switch (outcome) {
        case 'execute':
          return done({ kind: 'execute' });
        case 'deny':
          return done({ kind: 'deny', text: 'refused by policy', source: 'policy' });
        case 'card':
          return done({ kind: 'card', card: { ...CARD, decisions: DEFAULT_CARD_DECISIONS }, at: 0 });
        default:
          return { target, event: { type: 'xstate.error.actor.authorize', error: new Error('authorizer failed'), actorId: actor } };
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
    default:
      return outcome === 'ok' ? done(undefined) : fail();
  }
}

function modelEvents(sim: SimSystem, ev: ModelEventKind): Array<{ type: string; [k: string]: unknown }> {
  const draft = (sim.snapshot('turn')!.context as TurnSnapshot['context']).draft;
  const usage = { inputTokens: 1, outputTokens: 1, cachedInputTokens: 0, reasoningTokens: 0 };
  switch (ev) {
    case 'text':
      return [{ type: 'model.text_delta', delta: 'hello' }];
    case 'reasoning':
      return [{ type: 'model.reasoning_delta', delta: 'thinking' }];
    case 'opaque':
      return [{ type: 'model.provider_opaque', provider: 'scripted', data: { k: 1 } }];
    case 'completed':
      return [{ type: 'model.completed', usage, responseId: 'resp', finishReason: 'stop' }];
    case 'end':
      return [{ type: 'xstate.done.actor.callModel', output: undefined, actorId: 'callModel' }];
    case 'protocol':
      return [{ type: 'xstate.error.actor.callModel', error: { code: 'model_protocol_error', message: 'protocol', semanticOutput: draft.semantic }, actorId: 'callModel' }];
    case 'error':
      return [{ type: 'xstate.error.actor.callModel', error: { code: 'model_error', message: 'provider error', semanticOutput: draft.semantic }, actorId: 'callModel' }];
    case 'overflow':
      return [{ type: 'xstate.error.actor.callModel', error: { code: 'context_overflow', message: 'overflow', semanticOutput: draft.semantic }, actorId: 'callModel' }];
  }
}

/** Applies one stimulus to a state: the next state, with what happened on the way. */
export function applyStimulus(state: ModelState, stimulus: Stimulus, config: WorldConfig): ModelState & { reply: SimReply } {
  const sim = SimSystem.from(state.actors);
  const env: Env = { ...state.env, accepted: [...state.env.accepted], kinds: { ...state.env.kinds } };
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
      const { target, event } = portEvent(sim, stimulus.actor, stimulus.outcome);
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
    env: { turnsStarted: 0, accepted: [], interruptFired: false, kinds: {}, calls: 0, commands: 0, delivered: 0, steered: 0, modeToggle: false },
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

/** A state where nothing is running: the session is idle (no turn), in maintenance, or stopped. */
export function atRest(state: ModelState): boolean {
  const s = state.actors.session;
  return s.status !== 'active' || (s.context.activeTurn === null && state.actors.turn === null);
}

export type { ToolCallSnapshot };
