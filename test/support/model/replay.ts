/**
 * Replays a generated path on the real runtime: each stimulus is produced for real (a gate passed or
 * failed, a model event streamed, a summary answered, a catalog read answered, a timer fired, a host
 * command called), the runtime is left to settle, and then the three actors, the command's answer and
 * the updates published must be exactly what the simulated path says.
 */
import { expect } from 'vitest';
import type { SessionUpdate, SessionUpdateEnvelope } from '../../../src/protocol/updates.js';
import { ModelError } from '../../../src/errors.js';
import { validSummary } from '../summaries.js';
import type { ModelPath } from './model-paths.js';
import { observe, TOOL_CONTENTS, type SimReply, type Stimulus } from './stimuli.js';
import { SUMMARY_ATTEMPTS, World, type GatedWrite } from './world.js';

export function describeStimuli(path: ModelPath): string {
  return path.steps.map((s) => s.stimulus.type).join(' → ');
}

/** The comparable part of an update (no ids, texts or times). */
export function updateShape(update: SessionUpdate): string {
  switch (update.type) {
    case 'phase_changed':
      return `phase_changed:${update.phase}`;
    case 'permission_resolved':
      return `permission_resolved:${update.decision}`;
    case 'user_input_resolved':
      return `user_input_resolved:${update.outcome}`;
    case 'tool_call_started':
      return `tool_call_started:${update.toolName}`;
    case 'tool_call_finished':
      return `tool_call_finished:${update.toolName}:${update.status}`;
    case 'turn_finished':
      return `turn_finished:${update.outcome.status}${update.outcome.status === 'failed' ? `:${update.outcome.code}` : ''}`;
    case 'draft_cleared':
      return `draft_cleared:${update.reason}`;
    case 'conversation_compacted':
      return `conversation_compacted:${update.kind}`;
    default:
      return update.type;
  }
}

const USAGE = { inputTokens: 3, outputTokens: 2, cachedInputTokens: 0, reasoningTokens: 0 };

/** A command's answer, still to come (boxed: an async function would wait for a bare promise). */
type Answer = { reply: Promise<SimReply> } | null;

interface ReplayState {
  accepted: string[];
  requests: number;
  modeToggle: boolean;
  delivered: number;
  background: Array<Promise<unknown>>;
  /** The host's manual compaction while it waits for its summary. */
  compaction: Answer;
  /** Explorers spawned by the path and not yet stopped. */
  children: string[];
}

function asReply(promise: Promise<unknown>): Promise<SimReply> {
  return promise.then(
    () => ({ ok: true }) as const,
    (error: unknown) => {
      const code = (error as { code?: string }).code;
      if (!code) throw error;
      return { ok: false, code } as const;
    },
  );
}

async function command(world: World, state: ReplayState, cmd: Extract<Stimulus, { kind: 'cmd' }>['cmd']): Promise<Answer> {
  const session = world.session;
  const active = world.activeTurnId() ?? 'turn_none';
  const snapshot = world.actors().session;
  const pending = snapshot.context.pendingApproval as { turnId: string; toolCallId: string } | null;
  switch (cmd) {
    case 'start': {
      state.requests += 1;
      const clientRequestId = `${world.sessionId}-req-${state.requests}`;
      const before = world.activeTurnId();
      const reply = session.startTurn({ clientRequestId, input: [{ type: 'text', text: `request ${state.requests}` }] });
      void reply.then(
        (r) => {
          if (r.turnId !== before) state.accepted.push(clientRequestId);
        },
        () => undefined,
      );
      return { reply: asReply(reply) };
    }
    case 'start_dup':
      return { reply: asReply(session.startTurn({ clientRequestId: state.accepted[state.accepted.length - 1]!, input: [{ type: 'text', text: 'again' }] })) };
    case 'cancel':
      return { reply: asReply(session.cancelTurn(active)) };
    case 'cancel_other':
      return { reply: asReply(session.cancelTurn('turn_other')) };
    case 'resolve_allow_once':
    case 'resolve_deny':
    case 'resolve_allow_for_turn':
    case 'resolve_allow_for_session':
      return { reply: asReply(session.resolvePermission(pending?.turnId ?? active, pending?.toolCallId ?? 'tc_none', cmd.slice('resolve_'.length) as never)) };
    case 'resolve_wrong_call':
      return { reply: asReply(session.resolvePermission(active, 'tc_wrong', 'allow_once')) };
    case 'resolve_other_turn':
      return { reply: asReply(session.resolvePermission('turn_other', 'tc_wrong', 'allow_once')) };
    case 'answer': {
      const asked = snapshot.context.pendingUserInput as { turnId: string; toolCallId: string } | null;
      return { reply: asReply(session.answerUserInput(asked?.turnId ?? active, asked?.toolCallId ?? 'tc_none', { q: 'this one' })) };
    }
    case 'answer_wrong_call':
      return { reply: asReply(session.answerUserInput(active, 'tc_wrong', { q: 'this one' })) };
    case 'answer_other_turn':
      return { reply: asReply(session.answerUserInput('turn_other', 'tc_wrong', { q: 'this one' })) };
    case 'steer':
      return { reply: asReply(session.steerTurn(active, [{ type: 'text', text: 'steer' }])) };
    case 'steer_other':
      return { reply: asReply(session.steerTurn('turn_other', [{ type: 'text', text: 'steer other' }])) };
    case 'deliver':
      state.delivered += 1;
      return { reply: asReply(session.deliverAgentMessage({ id: `agent-msg:${world.sessionId}:${state.delivered}`, taskName: 't', kind: 'final_answer', body: 'b' })) };
    case 'set_mode':
      state.modeToggle = !state.modeToggle;
      return { reply: asReply(session.setPermissionMode(state.modeToggle ? 'accept_edits' : 'auto')) };
    case 'compact':
      return { reply: asReply(session.compactConversation()) };
    case 'stop_child': {
      // The explorer's first turn is held at its first write: its handle's shutdown times out and
      // the parent stops the child actor (SessionHandle.shutdown → stopActor → session.stop_child).
      const child = world.core.session(state.children.shift()!);
      if (!child) throw new Error('the spawned explorer is not loaded');
      await child.shutdown(1);
      return null;
    }
    case 'shutdown': {
      const done = session.shutdown();
      state.background.push(done);
      return { reply: Promise.resolve({ ok: true }) };
    }
  }
}

function passStorage(world: World, method: GatedWrite, outcome: string): void {
  const gate = world.gate('storage', method);
  if (outcome === 'fail') gate.fail();
  else gate.pass();
}

/** Answers the open summary request (valid or not). */
function answerSummary(world: World, valid: boolean): void {
  const gate = world.gate('summary');
  gate.push({ type: 'text_delta', delta: valid ? validSummary('the model-based path') : 'not a summary' });
  gate.push({ type: 'completed', usage: USAGE, finishReason: 'stop' });
  gate.end();
}

/** A compaction's summary and checkpoint, as the outcome says (turn or manual alike). */
async function compaction(world: World, outcome: string): Promise<void> {
  if (outcome === 'invalid') {
    for (let attempt = 1; attempt <= SUMMARY_ATTEMPTS; attempt += 1) {
      await world.until(() => world.has('summary'), `summary attempt ${attempt}`);
      answerSummary(world, false);
    }
    return;
  }
  if (outcome === 'reload') world.failInstall = true;
  answerSummary(world, true);
  await world.until(() => world.has('storage', 'insertCheckpoint'), 'the checkpoint write');
  passStorage(world, 'insertCheckpoint', outcome === 'fail' ? 'fail' : 'ok');
}

async function perform(world: World, state: ReplayState, stimulus: Stimulus): Promise<Answer> {
  switch (stimulus.kind) {
    case 'cmd':
      return command(world, state, stimulus.cmd);
    case 'tool_call': {
      const content = TOOL_CONTENTS[stimulus.tool];
      world.gate('model').push({ type: 'tool_call', callId: world.nextCallId(), name: content.name, arguments: content.arguments });
      return null;
    }
    case 'model': {
      const gate = world.gate('model');
      switch (stimulus.ev) {
        case 'text':
          gate.push({ type: 'text_delta', delta: 'hello' });
          break;
        case 'reasoning':
          gate.push({ type: 'reasoning_delta', delta: 'thinking' });
          break;
        case 'opaque':
          gate.push({ type: 'provider_opaque', provider: 'gated', data: { k: 1 } });
          break;
        case 'completed':
          // The actor reports the completion once the stream has ended well.
          gate.push({ type: 'completed', usage: USAGE, responseId: 'resp', finishReason: 'stop' });
          gate.end();
          break;
        case 'end':
          gate.end();
          break;
        case 'protocol':
          // A stream that ends without completing, or completes twice: both are protocol errors.
          if (gate.completed) gate.push({ type: 'completed', usage: USAGE });
          else gate.end();
          break;
        case 'error':
          gate.fail(new ModelError('model_error', 'provider error'));
          break;
        case 'overflow':
          gate.fail(new ModelError('context_overflow', 'the request is over the context window'));
          break;
      }
      return null;
    }
    case 'port':
      switch (stimulus.actor) {
        case 'beginTurn':
          passStorage(world, 'beginTurn', stimulus.outcome);
          return null;
        case 'drainInbox':
          passStorage(world, 'appendTurnMessages', stimulus.outcome);
          return null;
        case 'sampleWorldState': {
          const gate = world.gate('catalog');
          if (stimulus.outcome === 'catalog_error') {
            gate.fail(new Error('the skill root cannot be read'));
            return null;
          }
          // A failed write needs a write: a changed catalog always makes one.
          if (stimulus.outcome === 'fail') world.catalogVersion += 1;
          gate.answer(`<available_skills>\ncatalog version ${world.catalogVersion}\n</available_skills>`);
          const sampling = () => JSON.stringify(world.actors().turn?.value) === JSON.stringify({ running_model: { streaming: 'sampling' } });
          await world.until(() => !sampling() || world.has('storage', 'appendTurnMessages'), 'the World State write or the end of sampling');
          if (stimulus.outcome === 'fail') passStorage(world, 'appendTurnMessages', 'fail');
          else if (world.has('storage', 'appendTurnMessages')) passStorage(world, 'appendTurnMessages', 'ok');
          return null;
        }
        case 'recordModelCallStart':
          passStorage(world, 'recordModelCallStart', stimulus.outcome);
          return null;
        case 'persistAssistantMessage':
          passStorage(world, 'commitAssistantMessage', stimulus.outcome);
          return null;
        case 'record':
          passStorage(world, 'commitToolResult', stimulus.outcome);
          return null;
        case 'commitPlan':
          passStorage(world, 'commitPlanUpdate', stimulus.outcome);
          return null;
        case 'compactConversation':
          await compaction(world, stimulus.outcome);
          return null;
        case 'manual': {
          await compaction(world, stimulus.outcome);
          const reply = state.compaction;
          state.compaction = null;
          return reply;
        }
        case 'runAgentTool': {
          if (stimulus.outcome === 'timeout') {
            world.gate('timer').fire();
            return null;
          }
          const gate = world.gate('storage', 'createSession');
          const childId = (gate.args[0] as { id: string }).id;
          if (stimulus.outcome === 'fail') gate.fail();
          else {
            gate.pass();
            state.children.push(childId);
            world.children.push(childId);
          }
          return null;
        }
        case 'recordCancelledCalls': {
          if (stimulus.outcome === 'fail') {
            world.gate('storage', 'commitToolResult').fail();
            return null;
          }
          // One write per remaining call, each after the previous one committed.
          for (;;) {
            const turn = world.actors().turn;
            if (!turn?.children.recordCancelledCalls) return null;
            if (!world.has('storage', 'commitToolResult')) throw new Error('recordCancelledCalls is running but writes nothing');
            passStorage(world, 'commitToolResult', 'ok');
            await world.settle();
          }
        }
        case 'finishTurn': {
          const gate = world.gate('storage', 'finishTurn');
          if (stimulus.outcome === 'not_running') {
            // Another process's startup correction got there first: the row is no longer running.
            await world.storage.db.query(`UPDATE turns SET status = 'interrupted', ended_at = now(), error_code = 'process_restart' WHERE id = $1`, [gate.args[0]]);
          }
          if (stimulus.outcome === 'fail') {
            world.failedEnds.add(gate.args[0] as string);
            gate.fail();
          } else gate.pass();
          return null;
        }
        case 'authorize': {
          const gate = world.gate('authorize');
          switch (stimulus.outcome) {
            case 'execute':
              gate.answer({ kind: 'execute' });
              break;
            case 'deny':
              gate.answer({ kind: 'deny', text: 'refused by policy', source: 'policy' });
              break;
            case 'card':
              gate.answer({
                kind: 'card',
                card: { toolName: 'gated', kind: 'approval', summary: 'run the gated tool', environmentId: 'local', grantKey: 'gated:any' },
              });
              break;
            default:
              gate.fail(new Error('authorizer failed'));
          }
          return null;
        }
        case 'execute': {
          const gate = world.gate('tool');
          switch (stimulus.outcome) {
            case 'progress':
              gate.ctx.progress({ kind: 'stdout', chunk: 'tick\n' });
              break;
            case 'succeed':
              gate.answer('done');
              break;
            case 'cancelled':
              gate.answer({ status: 'cancelled', text: 'the tool stopped itself', error: { code: 'cancelled', message: 'the tool stopped itself', retryable: false } });
              break;
            default:
              gate.fail(new Error('tool failed'));
          }
          return null;
        }
      }
  }
}

/** Replays `path` on `world`, asserting the state, answer and updates after every step. */
export async function replay(world: World, path: ModelPath): Promise<void> {
  const state: ReplayState = { accepted: [], requests: 0, modeToggle: false, delivered: 0, background: [], compaction: null, children: [] };
  const interrupt = path.config.interrupt;
  if (interrupt) {
    world.arm(interrupt.machine, interrupt.state, () => {
      const reply = interrupt.cmd === 'cancel' ? world.session.cancelTurn(world.activeTurnId() ?? 'turn_none') : world.session.shutdown();
      state.background.push(reply.catch(() => undefined));
    });
  }
  const where = (i: number) => `${path.config.name} step ${i + 1}/${path.steps.length} (${path.steps[i]!.stimulus.type})\n  path: ${describeStimuli(path)}`;
  for (const [i, step] of path.steps.entries()) {
    const seen = world.updates.length;
    let answer = await perform(world, state, step.stimulus);
    await world.settle();
    const expected = step.state.actors;
    expect(world.observe(), where(i)).toEqual(observe(expected.session, expected.turn, expected.toolCall));
    if (step.stimulus.kind === 'cmd' && step.stimulus.cmd === 'compact' && step.reply === null) {
      // The compaction waits for its summary: its answer is checked when it ends.
      state.compaction = answer;
      answer = null;
    }
    if (answer) expect(await answer.reply, `${where(i)}: the command's answer`).toEqual(step.reply);
    const published = world.updates.slice(seen).map((e: SessionUpdateEnvelope) => updateShape(e.update));
    expect(published, `${where(i)}: updates`).toEqual(step.state.last.updates.map((u) => updateShape(u.update)));
  }
  if (interrupt) {
    expect(!world.armed, `${path.config.name}: the interrupt fired as in the path`).toBe(path.steps.at(-1)!.state.env.interruptFired);
    world.disarm();
  }
  expect(state.compaction, 'no compaction is left waiting at the end of a path').toBeNull();
  await Promise.all(state.background);
}
