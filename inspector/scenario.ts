/**
 * @module inspector/scenario
 * The inspector's scripted model: an offline `ModelPort` whose answers drive every feature the
 * page shows, through the real runtime. The first word of a prompt picks the scenario:
 *
 * - anything else ("Show me around"): the tour: streamed reasoning, a plan, `list_directory`,
 *   `run_checks` with progress, `write_note` behind an approval card, a plan update and a slow
 *   streamed answer. Denying the card ends the turn with `permission_denied`.
 * - `slow`: streamed reasoning, then a long answer streamed slowly (to cancel or reload mid-turn).
 * - `flood`: a pause, 700 one-character deltas at once, then a slow tail: more updates than the
 *   512-entry replay buffer holds, so a page that was away must rebuild from the snapshot.
 * - `fail`: some text, then a model error (the turn fails with `model_error`).
 *
 * Steering input is answered: the next model call of the turn says it was noted. The model is told
 * where each turn starts (`beginTurn`), because steering after a final answer and a new prompt look
 * the same in the request.
 */
import { ModelError } from '../src/errors.js';
import { sleep } from '../src/services/abortable.js';
import type { ModelCallOptions, ModelMessage, ModelPort, ModelRequest, ModelStreamEvent } from '../src/services/model/port.js';
import { estimateTokens } from '../src/services/context/estimate.js';

export interface ScenarioModelOptions {
  /** Multiplies every delay (default 1; tests may go faster). */
  timeScale?: number;
}

export interface ScenarioModel extends ModelPort {
  /** Tells the model that a new turn starts: its next call answers a prompt, not steering input. */
  beginTurn(): void;
  /** How many calls were made, for tests. */
  readonly calls: number;
}

type Mode = 'tour' | 'slow' | 'flood' | 'fail';

interface Timed {
  event: ModelStreamEvent;
  delayMs: number;
}

interface StepSpec {
  reasoning?: string;
  text?: string;
  toolCalls?: Array<{ name: string; arguments: unknown }>;
  /** Characters per text delta and the wait before each. */
  chunk?: number;
  delayMs?: number;
}

const PLAN_STEPS = ['Look at the working directory', 'Run the checks', 'Write a note (needs your approval)'];

function plan(done: number, explanation?: string) {
  return {
    ...(explanation ? { explanation } : {}),
    plan: PLAN_STEPS.map((step, i) => ({ step, status: i < done ? 'completed' : i === done ? 'in_progress' : 'pending' })),
  };
}

function textOfUser(message: ModelMessage | undefined): string {
  if (!message || message.role !== 'user') return '';
  return message.content.map((b) => b.text).join('');
}

function modeOf(prompt: string): Mode {
  const first = /^[a-z]+/i.exec(prompt.trim())?.[0]?.toLowerCase() ?? '';
  if (first === 'slow' || first === 'flood' || first === 'fail') return first;
  return 'tour';
}

const FINAL_ANSWER = [
  'Here is the tour. I wrote a plan first, so you could follow along in the plan card. ',
  'Then I listed the working directory and ran the checks, which reported their progress line by line. ',
  'Writing the note needed your approval: the card you answered came from the tool-call actor, ',
  'which waited in its waiting_permission state until your decision arrived. ',
  'Every step you saw, the phases, the drafts and the tool results, came from the SessionUpdate stream, ',
  'with one sequence number each, and the actor tree shows the Session, Turn and tool-call actors as they move.',
].join('');

const SLOW_ANSWER = [
  'This answer streams slowly on purpose, a few characters at a time, so that you can watch the draft grow, ',
  'cancel the turn while the model is still talking, or reload the page and see the same draft rebuilt ',
  'from the replay buffer. The Turn actor stays in running_model.streaming until the last delta arrives; ',
  'then the assistant message is committed, the draft is cleared and the turn completes. ',
  'While it streams, the update stream on the page counts up one sequence number per delta, the actor ',
  'tree shows the callModel effect actor running under the Turn, and the statechart keeps streaming lit.',
].join('');

/**
 * Creates the scenario model (one per session: it remembers where the current turn is).
 *
 * @example
 * const model = scenarioModel();
 * const session = await core.createSession({ workingDirectory, model });
 */
export function scenarioModel(options: ScenarioModelOptions = {}): ScenarioModel {
  const scale = options.timeScale ?? 1;
  let mode: Mode = 'tour';
  let turnCalls = 0;
  let calls = 0;
  let responseCounter = 0;
  let callCounter = 0;

  function step(spec: StepSpec, request: ModelRequest): Timed[] {
    const delay = (spec.delayMs ?? 40) * scale;
    const chunk = spec.chunk ?? 12;
    const out: Timed[] = [];
    const reasoning = spec.reasoning ?? '';
    for (let i = 0; i < reasoning.length; i += 16) out.push({ event: { type: 'reasoning_delta', delta: reasoning.slice(i, i + 16) }, delayMs: 30 * scale });
    const text = spec.text ?? '';
    for (let i = 0; i < text.length; i += chunk) out.push({ event: { type: 'text_delta', delta: text.slice(i, i + chunk) }, delayMs: delay });
    for (const call of spec.toolCalls ?? []) {
      callCounter += 1;
      out.push({
        event: { type: 'tool_call', callId: `call_${callCounter}`, name: call.name, arguments: JSON.stringify(call.arguments) },
        delayMs: 20 * scale,
      });
    }
    responseCounter += 1;
    out.push({
      event: {
        type: 'completed',
        usage: {
          inputTokens: estimateTokens(request.messages) + estimateTokens(request.system),
          outputTokens: estimateTokens(text) + estimateTokens(spec.toolCalls ?? []),
          cachedInputTokens: 0,
          reasoningTokens: estimateTokens(reasoning),
        },
        responseId: `scenario_${responseCounter}`,
        finishReason: (spec.toolCalls?.length ?? 0) > 0 ? 'tool_use' : 'stop',
      },
      delayMs: 10 * scale,
    });
    return out;
  }

  function firstStep(request: ModelRequest, prompt: string): Timed[] {
    switch (mode) {
      case 'slow':
        return step({ reasoning: 'The user asked for a slow answer; I will take my time.', text: SLOW_ANSWER, chunk: 6, delayMs: 100 }, request);
      case 'flood': {
        // A pause first, so that a page can look away before the burst and come back after it.
        const announce: Timed[] = [{ event: { type: 'reasoning_delta', delta: 'Flooding the stream in a moment.' }, delayMs: 30 * scale }];
        const flood: Timed[] = [];
        for (let i = 0; i < 700; i += 1) flood.push({ event: { type: 'text_delta', delta: i % 70 === 69 ? '\n' : '.' }, delayMs: i === 0 ? 4_000 * scale : 0 });
        const tail = step({ text: ` and now the slow tail of the flood. ${SLOW_ANSWER}`, chunk: 6, delayMs: 120 }, request);
        return [...announce, ...flood, ...tail];
      }
      case 'fail':
        return [
          { event: { type: 'text_delta', delta: 'Starting, but this model is scripted to fail…' }, delayMs: 50 * scale },
          { event: { type: 'text_delta', delta: '' }, delayMs: 300 * scale },
        ];
      case 'tour':
        return step(
          {
            reasoning: `The user said "${prompt.slice(0, 60)}". I will write a plan, look at the directory, run the checks, and ask before writing anything.`,
            text: 'Let me make a plan and look around first.',
            toolCalls: [
              { name: 'update_plan', arguments: plan(0, 'A short tour of the runtime.') },
              { name: 'list_directory', arguments: {} },
            ],
          },
          request,
        );
      default: {
        const never: never = mode;
        throw new Error(`unknown scenario mode ${String(never)}`);
      }
    }
  }

  /** The tour's next step after the tool results (and any steering input) in `request`. */
  function nextStep(request: ModelRequest): Timed[] {
    const messages = request.messages;
    const steering: string[] = [];
    let i = messages.length - 1;
    while (i >= 0 && messages[i]!.role === 'user') {
      // World State sections and agent messages are user-role too; only normal ones are steering.
      const m = messages[i]!;
      if (m.role === 'user' && m.kind === 'normal') steering.unshift(textOfUser(m));
      i -= 1;
    }
    const note = steering.length > 0 ? `Noted: “${steering.join(' / ').slice(0, 200)}”. ` : '';
    const before = messages[i];
    // Steering after a final answer: the turn takes one more round just to hear it.
    if (steering.length > 0 && before?.role === 'assistant' && !before.content.some((b) => b.type === 'tool_call')) {
      return step({ text: `${note}I will keep that in mind.`, chunk: 8, delayMs: 40 }, request);
    }
    if (mode !== 'tour') return step({ text: `${note}Done.`, chunk: 8 }, request);
    const lastTool = [...messages].reverse().find((m): m is Extract<ModelMessage, { role: 'tool' }> => m.role === 'tool');
    switch (lastTool?.toolName) {
      case 'list_directory': {
        const entries = lastTool.text.split('\n').length;
        return step(
          {
            text: `${note}I see ${entries} entries. Now the checks.`,
            toolCalls: [
              { name: 'update_plan', arguments: plan(1) },
              { name: 'run_checks', arguments: { count: 5 } },
            ],
          },
          request,
        );
      }
      case 'run_checks':
        return step(
          {
            text: `${note}The checks passed. I would like to write a note; that needs your approval.`,
            toolCalls: [
              { name: 'update_plan', arguments: plan(2) },
              { name: 'write_note', arguments: { name: 'tour-note.txt', text: `The inspector tour ran at ${new Date().toISOString()}.\n` } },
            ],
          },
          request,
        );
      case 'write_note':
        return step({ text: `${note}The note is written.`, toolCalls: [{ name: 'update_plan', arguments: plan(3) }] }, request);
      default:
        return step({ text: `${note}${FINAL_ANSWER}`, chunk: 8, delayMs: 60 }, request);
    }
  }

  /** A zero delay must not yield to the event loop: a flood arrives in one burst. */
  async function pause(ms: number, signal: AbortSignal): Promise<void> {
    if (ms <= 0) {
      if (signal.aborted) throw signal.reason;
      return;
    }
    await sleep(ms, signal);
  }


  async function* play(request: ModelRequest, signal: AbortSignal): AsyncGenerator<ModelStreamEvent> {
    calls += 1;
    let events: Timed[];
    if (turnCalls === 0) {
      const lastUser = [...request.messages].reverse().find((m) => m.role === 'user' && m.kind === 'normal');
      const prompt = textOfUser(lastUser);
      mode = modeOf(prompt);
      events = firstStep(request, prompt);
    } else {
      events = nextStep(request);
    }
    turnCalls += 1;
    for (const { event, delayMs } of events) {
      await pause(delayMs, signal);
      if (event.type === 'text_delta' && event.delta === '') continue;
      yield event;
    }
    if (mode === 'fail' && turnCalls === 1) {
      throw new ModelError('model_error', 'the scenario model failed on purpose (prompt "fail")', { semanticOutput: true });
    }
  }

  return {
    id: 'scripted/inspector-scenario',
    providerId: 'scripted',
    model: 'inspector-scenario',
    contextWindow: 128_000,
    beginTurn() {
      turnCalls = 0;
    },
    get calls() {
      return calls;
    },
    stream(request: ModelRequest, { signal }: ModelCallOptions): AsyncIterable<ModelStreamEvent> {
      return play(request, signal);
    },
  };
}
