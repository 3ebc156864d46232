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
 * - `explore`: the root spawns an explorer sub-agent (`spawn_agent`), waits for it (`wait_agent`)
 *   and answers with its report. The explorer is a child Session actor under the root's actor: it
 *   lists the directory and streams its report, so the actor tree shows it while it works.
 * - `ask`: the model asks the user two questions (`request_user_input`), the turn waits in
 *   `waiting_user_input` until the page answers them, and the answer is repeated back.
 *
 * Two kinds of request are answered whatever the turn's scenario is: an explorer's (its system
 * context is the explorer prompt; each is answered from the request alone, since the explorer
 * shares this model with its root) and a compaction's summary request (a valid nine-heading summary
 * built from the conversation, so that "Compact" on the page writes a real checkpoint).
 *
 * Steering input is answered: the next model call of the turn says it was noted. The model is told
 * where each turn starts (`beginTurn`), because steering after a final answer and a new prompt look
 * the same in the request.
 */
import { ModelError } from '../errors.js';
import { sleep } from '../services/abortable.js';
import type { ModelCallOptions, ModelMessage, ModelPort, ModelRequest, ModelStreamEvent } from '../services/model/port.js';
import { estimateTokens } from '../services/context/estimate.js';
import { EXPLORER_SYSTEM_PROMPT } from '../services/agents/explorer.js';
import { SUMMARY_HEADINGS, SUMMARY_INSTRUCTION } from '../services/compaction/summary.js';

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

type Mode = 'tour' | 'slow' | 'flood' | 'fail' | 'explore' | 'ask';

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
  if (first === 'slow' || first === 'flood' || first === 'fail' || first === 'explore' || first === 'ask') return first;
  return 'tour';
}

/** The questions of the `ask` scenario. */
export const ASK_QUESTIONS = {
  questions: [
    { id: 'language', header: 'Language', question: 'Which language should the note be in?', options: [{ label: 'English' }, { label: 'German' }] },
    { id: 'name', question: 'What should the note be called?' },
  ],
};

/** The explorer's task, as the root hands it over. */
export const EXPLORER_TASK = 'List the working directory and tell me what kind of project it is.';

function isExplorerRequest(request: ModelRequest): boolean {
  return request.system.some((part) => part.content.includes(EXPLORER_SYSTEM_PROMPT));
}

function isSummaryRequest(request: ModelRequest): boolean {
  const last = request.messages.at(-1);
  return request.tools.length === 0 && last?.role === 'user' && textOfUser(last) === SUMMARY_INSTRUCTION;
}

/** Quoted conversation text, made harmless for the summary's validation (no control tags). */
function quote(text: string, max = 160): string {
  const flat = text.replace(/\s+/g, ' ').replace(/</g, '‹').replace(/>/g, '›').trim();
  return flat.length > max ? `${flat.slice(0, max)}…` : flat;
}

/** A summary that passes the strict validation of reference §3.4, built from what the request holds. */
export function scenarioSummary(request: ModelRequest): string {
  const messages = request.messages.slice(0, -1);
  const userTexts = messages.filter((m) => m.role === 'user' && m.kind === 'normal').map((m) => quote(textOfUser(m)));
  const tools = messages.filter((m): m is Extract<ModelMessage, { role: 'tool' }> => m.role === 'tool');
  const failed = tools.filter((t) => t.status !== 'success');
  const lastAssistant = [...messages].reverse().find((m): m is Extract<ModelMessage, { role: 'assistant' }> => m.role === 'assistant');
  const lastText = lastAssistant ? quote(lastAssistant.content.map((b) => (b.type === 'text' ? b.text : '')).join(''), 300) : '';
  const toolNames = [...new Set(tools.map((t) => t.toolName))];
  const sections = [
    userTexts.length > 0 ? `The user asked: “${userTexts[0]}”.` : 'The user has not asked anything yet.',
    'The inspector\'s scripted scenario model drives the openwork runtime: Session, Turn and tool-call actors, the SessionUpdate stream, permission cards and plans.',
    tools.some((t) => t.toolName === 'write_note') ? 'The tour note under .openwork/inspector/ was written or attempted.' : 'None',
    failed.length > 0 ? failed.map((t) => `${t.toolName} ended ${t.status}: ${quote(t.text, 80)}`).join('\n') : 'None',
    toolNames.length > 0 ? `Tools used so far: ${toolNames.join(', ')}.` : 'No tool was used.',
    userTexts.length > 0 ? userTexts.map((t) => `- ${t}`).join('\n') : 'None',
    'None',
    lastText ? `The last answer said: “${lastText}”.` : 'Nothing is in progress.',
    'Wait for the user\'s next request; this summary replaces the messages it covers, which stay in the database.',
  ];
  const body = SUMMARY_HEADINGS.map((heading, i) => `${heading}\n${sections[i]}`).join('\n\n');
  return `<conversation_summary format_version="1">\n${body}\n</conversation_summary>`;
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
  'tree shows the effects actor (whose model slot makes the call) under the Turn, and the statechart keeps streaming lit.',
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
  let spawned = 0;

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
      case 'explore':
        return step(
          {
            reasoning: 'An explorer can look at the directory for me while I wait for its report.',
            text: 'I will send an explorer to look at the working directory.',
            toolCalls: [spawnCall()],
          },
          request,
        );
      case 'ask':
        return step(
          {
            reasoning: 'I cannot choose for the user here; I will ask.',
            text: 'Before I start I need two answers from you.',
            toolCalls: [{ name: 'request_user_input', arguments: ASK_QUESTIONS }],
          },
          request,
        );
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

  /** Task names are unique per root session: a new one for each spawn of this model. */
  function spawnCall() {
    spawned += 1;
    return { name: 'spawn_agent', arguments: { task_name: `explorer_${spawned}`, message: EXPLORER_TASK } };
  }

  /** The root's next step in `explore`: wait for the explorer, then pass its report on. */
  function exploreStep(request: ModelRequest, lastTool: Extract<ModelMessage, { role: 'tool' }> | undefined, note: string): Timed[] {
    const messages = request.messages;
    const spawnedAt = messages.findLastIndex((m) => m.role === 'tool' && m.toolName === 'spawn_agent' && m.status === 'success');
    // The report may arrive before the wait: it is delivered before whichever model call comes next.
    const reports = spawnedAt < 0 ? [] : messages.slice(spawnedAt + 1).filter((m) => m.role === 'user' && m.kind === 'agent_message').map((m) => textOfUser(m));
    if (reports.length > 0) {
      const body = reports.map((r) => /<body>\n?([\s\S]*?)\n?<\/body>/.exec(r)?.[1] ?? r).join('\n\n');
      return step({ text: `${note}The explorer reported back:\n\n${body}`, chunk: 8, delayMs: 40 }, request);
    }
    switch (lastTool?.toolName) {
      case 'spawn_agent':
        if (lastTool.status !== 'success') {
          // A session that explored before already has `explorer_1`: take the next name.
          if (lastTool.text.startsWith('duplicate_task_name')) return step({ text: `${note}That name is taken; another one.`, toolCalls: [spawnCall()] }, request);
          return step({ text: `${note}The explorer could not start (${lastTool.text}).` }, request);
        }
        return step({ text: `${note}The explorer is on its way; I will wait for its report.`, toolCalls: [{ name: 'wait_agent', arguments: { timeout_ms: 60_000 } }] }, request);
      case 'wait_agent':
        return step({ text: `${note}The explorer has not reported back (${lastTool.text}).` }, request);
      default:
        return step({ text: `${note}Done.`, chunk: 8 }, request);
    }
  }

  /** An explorer's step, from its request alone: list the directory, then report slowly. */
  function explorerStep(request: ModelRequest): Timed[] {
    const lastTool = [...request.messages].reverse().find((m): m is Extract<ModelMessage, { role: 'tool' }> => m.role === 'tool');
    if (lastTool?.toolName !== 'list_directory') {
      return step({ reasoning: 'The parent wants the layout; listing the directory answers it.', text: 'Listing the working directory.', toolCalls: [{ name: 'list_directory', arguments: {} }] }, request);
    }
    const entries = lastTool.text.split('\n').filter((line) => line.trim() !== '');
    const names = entries.map((line) => line.replace(/^(dir |file)\s*/, ''));
    const kind = names.includes('package.json') ? 'a JavaScript or TypeScript project (it has a package.json)' : 'a directory without a package manifest';
    const text = `The working directory holds ${entries.length} entr${entries.length === 1 ? 'y' : 'ies'}: ${names.slice(0, 12).join(', ')}${names.length > 12 ? ', …' : ''}. It looks like ${kind}.`;
    return step({ text, chunk: 6, delayMs: 90 }, request);
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
    const lastTool = [...messages].reverse().find((m): m is Extract<ModelMessage, { role: 'tool' }> => m.role === 'tool');
    if (mode === 'explore') return exploreStep(request, lastTool, note);
    if (mode === 'ask' && lastTool?.toolName === 'request_user_input') {
      const answered = lastTool.status === 'success' ? `You answered ${lastTool.text}.` : `No answer (${lastTool.text}).`;
      return step({ text: `${note}${answered} Thank you.`, chunk: 8, delayMs: 40 }, request);
    }
    if (mode !== 'tour') return step({ text: `${note}Done.`, chunk: 8 }, request);
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
    // Neither an explorer's call nor a summary call belongs to the root's turn.
    if (isSummaryRequest(request)) {
      events = step({ text: scenarioSummary(request), chunk: 64, delayMs: 10 }, request);
      for (const { event, delayMs } of events) {
        await pause(delayMs, signal);
        yield event;
      }
      return;
    }
    if (isExplorerRequest(request)) {
      for (const { event, delayMs } of explorerStep(request)) {
        await pause(delayMs, signal);
        yield event;
      }
      return;
    }
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
