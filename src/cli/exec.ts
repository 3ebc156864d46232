/**
 * @module cli/exec
 * `openwork exec "<prompt>"`: one turn, headless, in the working directory. It prints the answer
 * (or, with `--json`, every session update as one JSON line) and exits 0 when the turn completed,
 * 1 when it failed, 130 when SIGINT interrupted it (2 when it could not start). Permission cards
 * are answered by `--approve`: `never` denies each one, `full-auto` allows each one once, and
 * `on-request` asks on the terminal, so it refuses to start without one.
 */
import { isOpenworkError, errorMessage } from '../errors.js';
import type { PermissionDecision } from '../protocol/input.js';
import type { SessionUpdateEnvelope, TurnOutcome } from '../protocol/updates.js';
import { EXIT, type ChatIO } from './chat.js';
import { LineInput } from './line-input.js';
import type { ApprovePolicy, ExecOptions } from './options.js';
import { cardLines, styleFor } from './render.js';
import { terminalText } from './terminal-text.js';
import { openCliRuntime, openCliSession } from './runtime.js';
import type { EarlyStore } from './early-store.js';

/** The decision each policy gives without asking (on-request asks instead). */
const AUTOMATIC: Record<Exclude<ApprovePolicy, 'on-request'>, PermissionDecision> = { never: 'deny', 'full-auto': 'allow_once' };

/** Runs one turn; resolves with the exit code. */
export async function runExec(options: ExecOptions, io: ChatIO, early?: EarlyStore): Promise<number> {
  const env = io.env ?? process.env;
  const fail = (message: string) => {
    io.error.write(`openwork: ${message}\n`);
    return EXIT.cannotStart;
  };
  const terminal = (io.input as { isTTY?: boolean }).isTTY === true;
  // Checked before anything is opened: asking needs someone at a terminal to answer.
  if (options.approve === 'on-request' && !terminal) {
    return fail('--approve on-request asks on the terminal, but stdin is not a terminal; use --approve never or --approve full-auto');
  }

  // No request_user_input: a headless turn has nobody to answer the model's questions.
  const started = await openCliRuntime(options, false, undefined, early);
  if (!started.ok) return fail(started.line);
  const { core } = started.value;
  const opened = await openCliSession(started.value, options);
  if (!opened.ok) return fail(opened.line);
  const session = opened.value;

  const style = styleFor(io.error, env);
  const lines = options.approve === 'on-request' ? new LineInput(io.input, io.error, true) : null;
  let turnId: string | null = null;
  let interrupted = false;
  let resolveAbandon!: () => void;
  const abandoned = new Promise<'abandoned'>((resolve) => {
    resolveAbandon = () => resolve('abandoned');
  });
  const onInterrupt = () => {
    // The first SIGINT cancels the turn (its outcome is stored); a second one stops waiting for it.
    if (interrupted) return resolveAbandon();
    interrupted = true;
    if (turnId !== null) session.cancelTurn(turnId).catch(() => undefined);
  };
  const signals = io.signals ?? process;
  signals.on('SIGINT', onInterrupt);
  lines?.rl.on('SIGINT', onInterrupt);

  // Cards are answered one at a time, in the order they come.
  let answering = Promise.resolve();
  const answer = (envelope: SessionUpdateEnvelope) => {
    if (envelope.update.type !== 'permission_requested') return;
    const { card, toolCallId } = envelope.update;
    const id = envelope.turnId;
    if (!id) return;
    answering = answering.then(async () => {
      let decision: PermissionDecision | undefined;
      if (options.approve === 'on-request' && lines) {
        for (const line of cardLines(card, style)) io.error.write(`${line}\n`);
        while (decision === undefined) {
          const typed = await lines.ask('  allow once [y] / deny [n]? ');
          if (typed === undefined || typed === null) decision = 'deny';
          else if (/^(y|yes|o|once)$/i.test(typed.trim())) decision = 'allow_once';
          else if (/^(n|no|d|deny)$/i.test(typed.trim())) decision = 'deny';
        }
      } else {
        decision = AUTOMATIC[options.approve as Exclude<ApprovePolicy, 'on-request'>];
      }
      if (!card.decisions.includes(decision)) decision = 'deny';
      if (!options.json) io.error.write(style.dim(`permission for ${card.toolName}: ${decision} (--approve ${options.approve})\n`));
      await session.resolvePermission(id, toolCallId, decision).catch((error: unknown) => {
        // The turn may have ended meanwhile (cancelled); the card went with it.
        if (!isOpenworkError(error)) throw error;
      });
    });
  };
  const subscription = session.updates$.subscribe((envelope) => {
    if (options.json) io.output.write(`${JSON.stringify(envelope)}\n`);
    answer(envelope);
  });

  let exitCode: number = EXIT.ok;
  try {
    ({ turnId } = await session.startTurn({ clientRequestId: `exec-${process.pid}-${Date.now()}`, input: [{ type: 'text', text: options.prompt }] }));
    if (interrupted) await session.cancelTurn(turnId).catch(() => undefined);
    const outcome: TurnOutcome | 'abandoned' = await Promise.race([session.waitForTurn(turnId), abandoned]);
    if (outcome === 'abandoned' || outcome.status === 'cancelled') {
      exitCode = EXIT.interrupted;
      if (!options.json) io.error.write('openwork: interrupted\n');
    } else if (outcome.status === 'failed') {
      exitCode = EXIT.turnFailed;
      if (!options.json) io.error.write(`openwork: the turn failed (${outcome.code}): ${outcome.message}\n`);
    } else if (!options.json) {
      // On a terminal the answer's control characters are shown, not run; a pipe gets it byte for byte.
      const finalText = (io.output as { isTTY?: boolean }).isTTY === true ? terminalText(outcome.finalText) : outcome.finalText;
      io.output.write(finalText.endsWith('\n') ? finalText : `${finalText}\n`);
    }
  } catch (error) {
    io.error.write(`openwork: ${errorMessage(error)}\n`);
    exitCode = EXIT.turnFailed;
  } finally {
    signals.off('SIGINT', onInterrupt);
    subscription.unsubscribe();
    lines?.close();
    await Promise.race([core.shutdown(), new Promise((resolve) => setTimeout(resolve, 5_000).unref())]);
  }
  return exitCode;
}
