/**
 * @module cli/chat
 * `openwork chat [prompt]`: a terminal conversation in the working directory on a real model.
 * It streams the answer (on a terminal as Markdown, block by block, with a spinner while it waits),
 * shows each tool call and result in brief (write/edit as a diff), asks each permission card and
 * each question of the model (request_user_input) inline, ends each turn with a usage line,
 * cancels the running turn on Ctrl-C and exits on a second one. Sessions are stored (PGlite under
 * `.openwork/` or Postgres) and continued with `--session <id>`, on the model, API and base URL
 * they ran on, after their last exchanges.
 */
import { isOpenworkError, errorMessage } from '../errors.js';
import { permissionModeSchema } from '../protocol/input.js';
import type { PermissionDecision } from '../protocol/input.js';
import type { SessionUpdateEnvelope, TurnOutcome } from '../protocol/updates.js';
import type { SessionHandle } from '../session-handle.js';
import type { UserInputRequest } from '../protocol/user-input.js';
import { askCard } from './card-prompt.js';
import { diffLineBudget } from './diff-view.js';
import { lastExchanges, shorten } from './last-exchanges.js';
import { LineInput } from './line-input.js';
import type { ChatOptions } from './options.js';
import { UpdateRenderer, pickAnswer, questionLines, styleFor } from './render.js';
import type { CliRuntime, Opened } from './runtime.js';
import { parseSlash, slashHelpLines } from './slash-commands.js';
import { Spinner } from './spinner.js';
import { storageLabel } from './storage.js';
import { turnUsage, usageLine } from './usage-line.js';
import type { EarlyStore } from './early-store.js';
import { terminalText } from './terminal-text.js';

export interface ChatIO {
  input: NodeJS.ReadableStream;
  output: NodeJS.WritableStream;
  error: NodeJS.WritableStream;
  env?: NodeJS.ProcessEnv;
  /** Where Ctrl-C comes from (default: this process). */
  signals?: NodeJS.EventEmitter;
}

/** Exit codes: 0 done, 1 the last turn failed, 2 could not start, 130 interrupted (Ctrl-C, or the last turn was cancelled). */
export const EXIT = { ok: 0, turnFailed: 1, cannotStart: 2, interrupted: 130 } as const;

/** How many stored exchanges `--session` shows before the prompt. */
const SHOWN_EXCHANGES = 3;

function outcomeLine(outcome: TurnOutcome): string | null {
  if (outcome.status !== 'failed') return null;
  return `openwork: the turn failed (${outcome.code}): ${outcome.message}`;
}

/** Runs the conversation; resolves with the exit code. */
export async function runChat(options: ChatOptions, io: ChatIO, early?: EarlyStore): Promise<number> {
  const env = io.env ?? process.env;
  const style = styleFor(io.output, env);
  const fail = (message: string) => {
    io.error.write(`openwork: ${message}\n`);
    return EXIT.cannotStart;
  };

  // The spinner needs a terminal that draws (not TERM=dumb); Markdown and colour need one that colours.
  const outputTTY = (io.output as { isTTY?: boolean }).isTTY === true;
  const spinner = new Spinner(io.output, outputTTY && env.TERM !== 'dumb');
  const columns = (io.output as { columns?: number }).columns;
  const rows = (io.output as { rows?: number }).rows;
  let renderer: UpdateRenderer | null = null;
  const terminal = (io.input as { isTTY?: boolean }).isTTY === true;
  const readyLine = terminal ? 'Ctrl-C cancels the running turn; Ctrl-C again (or Ctrl-D) exits.' : 'reading prompts from stdin; SIGINT cancels the running turn, a second one exits.';

  let activeTurn: string | null = null;
  let cancelling = false;
  let exitCode: number = EXIT.ok;
  let resolveExit!: () => void;
  const exitSignal = new AbortController();
  const exitRequested = new Promise<'exit'>((resolve) => {
    resolveExit = () => {
      exitSignal.abort();
      resolve('exit');
    };
  });
  let exiting = false;

  // The runtime's modules (XState, the OpenAI client, the tools) load here, not with the CLI, so
  // that the prompt can be shown before them (see promptFirst below).
  const runtime = import('./runtime.js');
  // A retry is known only to the model port: its stream events tell the spinner how long the wait is.
  const opening: Promise<Opened<CliRuntime>> = runtime.then((m) =>
    m.openCliRuntime(
      options,
      true,
      (event) => {
        if (event.type === 'retry') renderer?.wait(`retry in {retry}s (attempt ${event.attempt}): ${event.reason.slice(0, 60)}`, { retryInMs: event.delayMs ?? 0 });
      },
      early,
    ),
  );

  /**
   * Prompt first (issue 14.4): a new session on a store that main began to open, and whose
   * directory lock is already held (a second process was told `store_locked` instead), gets its
   * prompt at once; the store, the runtime and the session finish opening meanwhile, and the
   * first line typed waits for them (it is kept, as every typed-ahead line is, by LineInput). A
   * failure to open is still reported, in place of the session header, and ends the chat (exit 2)
   * before anything typed is sent. Continuing a session (`--session`) shows its last exchanges and
   * runs on its stored model, and a prompt given as an argument has nothing to wait for: both open
   * first, as before.
   */
  const promptFirst = early !== undefined && !('error' in early) && !options.sessionId && !options.prompt;
  let lines: LineInput | null = null;
  let firstLine: Promise<string | null | undefined> | null = null;
  let earlyInterrupt: (() => void) | null = null;
  if (promptFirst) {
    lines = new LineInput(io.input, io.output, terminal);
    io.output.write(`${style.bold(`openwork chat · opening ${storageLabel(options)} for a new session`)}\n${style.dim(readyLine)}\n`);
    // Ctrl-C while the store opens leaves the chat, as it does at the prompt.
    earlyInterrupt = () => {
      exiting = true;
      exitCode = EXIT.interrupted;
      resolveExit();
    };
    (io.signals ?? process).on('SIGINT', earlyInterrupt);
    lines.rl.on('SIGINT', earlyInterrupt);
    firstLine = (terminal ? lines.ask('> ', exitSignal.signal) : lines.next(exitSignal.signal)).then((line) => {
      // Ctrl-D at this prompt ends its line at once (see the loop below), before the header comes.
      if (line === null && terminal) io.output.write('\n');
      return line;
    });
  }

  const started = await opening;
  const { openCliSession, rememberSessionSettings } = await runtime;
  if (earlyInterrupt) {
    (io.signals ?? process).off('SIGINT', earlyInterrupt);
    lines!.rl.off('SIGINT', earlyInterrupt);
  }
  if (!started.ok) {
    lines?.close();
    return fail(started.line);
  }
  const { core, model } = started.value;

  const opened = await openCliSession(started.value, options);
  if (!opened.ok) {
    lines?.close();
    return fail(opened.line);
  }
  let session: SessionHandle = opened.value;

  lines ??= new LineInput(io.input, io.output, terminal);
  const input = lines;
  // The Markdown renderer is loaded after the first prompt is shown (markdown-render.ts says why);
  // a turn waits for it before it starts, so every answer is rendered by it.
  let renderMarkdown: ((markdown: string) => string) | undefined;
  let markdownReady: Promise<unknown> = Promise.resolve();
  const loadMarkdown = () => {
    if (!style.on) return;
    markdownReady = import('./markdown-render.js').then((m) => {
      renderMarkdown = m.markdownRenderer(Math.min(columns ?? 100, 120));
    });
  };
  const rendererFor = (handle: SessionHandle) =>
    new UpdateRenderer(io.output, style, {
      ...(style.on ? { markdown: (markdown: string) => renderMarkdown!(markdown) } : {}),
      workingDirectory: handle.info.workingDirectory,
      diffLines: diffLineBudget(rows),
      spinner,
    });
  renderer = rendererFor(session);
  const print = (text: string) => {
    renderer!.breakLine();
    spinner.clear();
    // The header of a prompt-first chat arrives while the prompt waits: it goes above the prompt.
    if (firstLine) input.printAbovePrompt(`${text}\n`);
    else io.output.write(`${text}\n`);
  };

  print(style.bold(`openwork chat · session ${session.sessionId}`));
  print(style.dim(`model ${model.id} over ${model.api} at ${model.baseURL} · storage ${storageLabel(options)} · cwd ${session.info.workingDirectory}`));
  // Reference §4.6: where the sandbox is unavailable the UI says so, with the reason, for as long as it lasts.
  const sandbox = session.snapshot().sandbox;
  print(sandbox.available ? style.dim(`sandbox: ${sandbox.kind}, bash runs inside it`) : style.yellow(`sandbox unavailable, bash disabled: ${sandbox.detail ?? 'no reason given'}`));
  if (!promptFirst) print(style.dim(readyLine));
  if (options.sessionId) {
    // Where the conversation stands, before the user types the next prompt.
    const exchanges = lastExchanges(await session.messages().catch(() => []), SHOWN_EXCHANGES);
    if (exchanges.length > 0) print(style.dim(`last ${exchanges.length === 1 ? 'exchange' : `${exchanges.length} exchanges`}:`));
    for (const exchange of exchanges) {
      for (const [i, line] of shorten(exchange.user, 3, 160).entries()) print(style.bold(`${i === 0 ? '> ' : '  '}${terminalText(line)}`));
      for (const line of shorten(exchange.answer ?? '(no answer)', 6, 160)) print(`  ${terminalText(line)}`);
    }
  }

  const onInterrupt = () => {
    if (activeTurn !== null && !cancelling) {
      cancelling = true;
      print(style.yellow('^C cancelling the turn (Ctrl-C again to exit)'));
      session.cancelTurn(activeTurn).catch(() => undefined);
      return;
    }
    if (!exiting) {
      exiting = true;
      exitCode = EXIT.interrupted;
      resolveExit();
    }
  };
  const signals = io.signals ?? process;
  signals.on('SIGINT', onInterrupt);
  input.rl.on('SIGINT', onInterrupt);

  const approvals: SessionUpdateEnvelope[] = [];
  let wakeApproval: (() => void) | null = null;
  const watch = (handle: SessionHandle) =>
    handle.updates$.subscribe((envelope) => {
      renderer!.render(envelope);
      if (envelope.update.type === 'permission_requested' || envelope.update.type === 'user_input_requested') {
        approvals.push(envelope);
        wakeApproval?.();
      }
    });
  let subscription = watch(session);

  /** Asks the model's questions one by one; a number picks an option, anything else is the answer. */
  const answerQuestions = async (turnId: string, toolCallId: string, request: UserInputRequest, turnOver: AbortSignal) => {
    const answers: Record<string, string> = {};
    for (const q of request.questions) {
      for (const line of questionLines(q, style)) print(line);
      let answer: string | undefined;
      while (answer === undefined) {
        spinner.stop();
        const typed = await input.ask(style.bold('  answer> '), turnOver);
        if (typed === undefined) return;
        if (typed === null) {
          print(style.dim('  (input ended: cancelling the turn)'));
          await session.cancelTurn(turnId).catch(() => undefined);
          return;
        }
        answer = pickAnswer(q, typed);
        if (answer === undefined) print(style.dim('  please type an answer'));
      }
      answers[q.id] = answer;
    }
    try {
      await session.answerUserInput(turnId, toolCallId, answers);
    } catch (error) {
      if (!isOpenworkError(error)) throw error;
    }
  };

  /** Asks each pending card on the input; resolves when the turn is over. */
  const answerCards = async (turnId: string, finished: Promise<TurnOutcome>) => {
    let done = false;
    // A question still open when the turn ends (cancelled, say) gives its line back to the prompt.
    const turnOver = new AbortController();
    void finished.then(() => {
      done = true;
      turnOver.abort();
      wakeApproval?.();
    });
    while (!done) {
      const envelope = approvals.shift();
      if (!envelope) {
        await new Promise<void>((resolve) => {
          wakeApproval = resolve;
        });
        wakeApproval = null;
        continue;
      }
      if (envelope.turnId !== turnId) continue;
      if (envelope.update.type === 'user_input_requested') {
        await answerQuestions(turnId, envelope.update.toolCallId, envelope.update.request, turnOver.signal);
        continue;
      }
      if (envelope.update.type !== 'permission_requested') continue;
      const { card, toolCallId } = envelope.update;
      // While the question is on screen, the prompt is the indicator: a frame would overwrite the typing.
      spinner.stop();
      const decision: PermissionDecision | undefined = await askCard(card, input, print, style, turnOver.signal);
      if (decision === undefined) continue;
      try {
        await session.resolvePermission(turnId, toolCallId, decision);
      } catch (error) {
        // The turn may have ended meanwhile (cancelled); the card is gone with it.
        if (!isOpenworkError(error)) throw error;
      }
    }
  };

  const runTurn = async (text: string, n: number) => {
    let turnId: string;
    try {
      await markdownReady;
      ({ turnId } = await session.startTurn({ clientRequestId: `cli-${process.pid}-${Date.now()}-${n}`, input: [{ type: 'text', text }] }));
    } catch (error) {
      print(style.red(`openwork: ${errorMessage(error)}`));
      return;
    }
    activeTurn = turnId;
    cancelling = false;
    const finished = session.waitForTurn(turnId);
    await Promise.race([Promise.all([finished, answerCards(turnId, finished)]), exitRequested]);
    activeTurn = null;
    if (exiting) return;
    const outcome = await finished;
    const line = outcomeLine(outcome);
    if (line) print(style.red(line));
    const usage = await turnUsage(core.storage, turnId);
    if (usage) print(style.dim(usageLine(usage)));
    // The exit code is the last turn's: a turn Ctrl-C cancelled makes it 130, so a piped run that
    // was interrupted does not look like a success to its caller.
    exitCode = outcome.status === 'failed' ? EXIT.turnFailed : outcome.status === 'cancelled' && cancelling ? EXIT.interrupted : EXIT.ok;
  };

  /**
   * Carries out a slash command (never sent to the model); false when it asks to leave the chat.
   * Its failures (a store that does not answer) are one line, and the chat goes on.
   */
  const runSlash = async (line: string): Promise<boolean> => {
    const slash = parseSlash(line)!;
    if (slash.kind === 'unknown') {
      print(style.red(`openwork: unknown command ${slash.name} (type /help for the list)`));
      return true;
    }
    try {
      switch (slash.name) {
        case 'help':
          print('commands (a line starting with / is never sent to the model):');
          for (const l of slashHelpLines()) print(l);
          return true;
        case 'exit':
          return false;
        case 'status': {
          const turns = await session.turns();
          const sum = (pick: (t: (typeof turns)[number]) => number | null) => turns.reduce((total, t) => total + (pick(t) ?? 0), 0);
          print(`session ${session.sessionId} · model ${model.id} over ${model.api} · mode ${session.snapshot().permissionMode}`);
          print(
            `usage so far: ${turns.length} turn(s), ${sum((t) => t.inputTokens)} tokens in (${sum((t) => t.cachedInputTokens)} cached), ` +
              `${sum((t) => t.outputTokens)} out (${sum((t) => t.reasoningTokens)} reasoning), ${sum((t) => t.modelCallCount)} model call(s), ` +
              `${sum((t) => t.toolCallCount)} tool call(s)`,
          );
          const context = session.inspectContext();
          const next = context.estimate.estimatedInputTokens;
          print(
            context.autoCompactTokenLimit !== null
              ? `context: about ${next} tokens in the next request; ${context.autoCompactPercent}% of the compaction line (${context.autoCompactTokenLimit} of a ${model.contextWindow}-token window)`
              : `context: about ${next} tokens in the next request; window unknown (set --context-window or "contextWindow" in the config)`,
          );
          return true;
        }
        case 'mode': {
          const wanted = slash.args[0];
          if (wanted === undefined) {
            print(`mode ${session.snapshot().permissionMode} (auto: edits outside the workspace ask; accept_edits: file edits in the workspace run without asking)`);
            return true;
          }
          const mode = permissionModeSchema.safeParse(wanted);
          if (!mode.success) {
            print(style.red(`openwork: /mode takes auto or accept_edits, not ${JSON.stringify(wanted)}`));
            return true;
          }
          await session.setPermissionMode(mode.data);
          print(`mode ${mode.data} (from the next tool call)`);
          return true;
        }
        case 'compact': {
          print(style.dim('compacting the conversation…'));
          spinner.show('compacting the conversation', { restart: true });
          try {
            const result = await session.compactConversation();
            spinner.stop();
            print(
              result.checkpoint
                ? `compacted: ${result.conversationTokensBefore} → ${result.conversationTokensAfter} tokens (checkpoint ${result.checkpoint.id}; /rewind lists the checkpoints)`
                : `nothing to compact (${result.conversationTokensBefore} tokens)`,
            );
          } finally {
            spinner.stop();
          }
          return true;
        }
        case 'rewind': {
          const checkpoints = await session.checkpoints();
          const wanted = slash.args[0];
          if (wanted === undefined) {
            if (checkpoints.length === 0) print('no checkpoints yet (/compact writes one)');
            for (const [i, cp] of checkpoints.entries()) {
              print(`  ${i + 1}. ${cp.id}  ${cp.kind}  through message ${cp.throughMessageSequence}  ${cp.createdAt.replace(/\.\d+Z$/, 'Z')}`);
            }
            if (checkpoints.length > 0) print(style.dim('rewind with /rewind <n> or /rewind <checkpoint-id>: the model sees the conversation as it stood there; nothing is deleted'));
            return true;
          }
          const byNumber = /^\d+$/.test(wanted) ? checkpoints[Number(wanted) - 1] : undefined;
          const id = byNumber?.id ?? wanted;
          if (!byNumber && /^\d+$/.test(wanted)) {
            print(style.red(`openwork: no checkpoint ${wanted} (there ${checkpoints.length === 1 ? 'is 1' : `are ${checkpoints.length}`}; /rewind lists them)`));
            return true;
          }
          const result = await session.rewindConversation(id);
          print(`rewound to ${id}: ${result.conversationTokensBefore} → ${result.conversationTokensAfter} tokens`);
          return true;
        }
        case 'new': {
          const next = await core.createSession({ workingDirectory: options.workingDirectory, permissionMode: options.mode });
          await rememberSessionSettings(core.storage, next.sessionId, started.value.options);
          subscription.unsubscribe();
          session = next;
          renderer = rendererFor(session);
          subscription = watch(session);
          print(style.bold(`new session ${session.sessionId}`));
          return true;
        }
        case 'sessions': {
          // A session that never started a turn (a /new left unused) is nothing to continue.
          const stored = await core.listSessions({ limit: 20, withTurns: true });
          if (stored.length === 0) print('no sessions with a turn yet');
          for (const s of stored) {
            const current = s.id === session.sessionId ? ' (this one)' : '';
            print(`${s.id}  ${(s.lastTurnAt ?? s.updatedAt).replace(/\.\d+Z$/, 'Z')}  ${terminalText(s.title ?? '(untitled)', { singleLine: true })}${current}`);
          }
          print(style.dim('continue one with: openwork chat --session <id>'));
          return true;
        }
      }
    } catch (error) {
      print(style.red(`openwork: /${slash.name} failed: ${errorMessage(error)}`));
      return true;
    }
  };

  loadMarkdown();
  try {
    let n = 0;
    const handle = async (text: string): Promise<boolean> => {
      if (parseSlash(text)) return runSlash(text);
      n += 1;
      await runTurn(text, n);
      return true;
    };
    let going = true;
    if (options.prompt) {
      print(style.bold(`> ${options.prompt}`));
      going = await handle(options.prompt);
    }
    while (going && !exiting) {
      // The line typed at the prompt shown before the store was ready comes first.
      const pending = firstLine;
      firstLine = null;
      const next = pending ? await pending : terminal ? await input.ask('> ', exitSignal.signal) : await input.next(exitSignal.signal);
      if (next === undefined) break;
      if (next === null) {
        // Ctrl-D at the prompt: readline leaves the cursor after "> ", so the shell's prompt would
        // follow on the same line.
        if (terminal && !pending) io.output.write('\n');
        break;
      }
      if (next.trim() === '') continue;
      if (!terminal) print(style.bold(`> ${next}`));
      going = await handle(next);
    }
  } finally {
    signals.off('SIGINT', onInterrupt);
    subscription.unsubscribe();
    input.close();
    renderer.breakLine();
    spinner.stop();
    // A hung provider must not keep the process: the session store is closed or abandoned after 5 s.
    await Promise.race([core.shutdown(), new Promise((resolve) => setTimeout(resolve, 5_000).unref())]);
  }
  if (exitCode === EXIT.interrupted) io.output.write(style.dim('bye\n'));
  return exitCode;
}
