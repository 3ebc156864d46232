/**
 * @module cli/render
 * How `openwork chat` shows a session's updates in a terminal: the answer streamed as it arrives
 * (on a colour terminal rendered as Markdown, block by block), reasoning dimmed, each tool call and
 * its result in one line, what write and edit changed as a diff, cards, plans and the outcome; the
 * spinner says what the turn waits for between them.
 */
import { closeSync, constants, fstatSync, openSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { PermissionCard, SessionUpdateEnvelope } from '../protocol/updates.js';
import type { UserInputQuestion } from '../protocol/user-input.js';
import { diffLines } from './diff-view.js';
import { MarkdownStream } from './markdown.js';
import type { Spinner } from './spinner.js';
import type { Style } from './style.js';
import { terminalText } from './terminal-text.js';
import { cutMiddle } from '../protocol/visible-text.js';
import { kernelInterfaceRoot } from '../services/permissions/tiers.js';

// The terminal styling moved to cli/style.ts (diff-view.ts needs it, and render.ts needs the diff view).
export { styleFor, type Style } from './style.js';

/** One line of at most `max` characters, its head kept (a result's first line, a plan step, a name); strict. */
function brief(text: string, max: number): string {
  const flat = terminalText(text.replace(/[ \t\n]+/g, ' ').trim(), { singleLine: true, strict: true });
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/**
 * A tool call's arguments on one line of about `max` characters: cut in the middle, so the end of
 * a long command (where a rider such as `; rm -rf ~` sits) is still shown, with the number of
 * characters cut.
 */
function briefArguments(text: string, max: number): string {
  return terminalText(cutMiddle(text.replace(/[ \t\n]+/g, ' ').trim(), max), { singleLine: true, strict: true });
}

function resultLine(text: string): string {
  const lines = text.split('\n').filter((l) => l.trim() !== '');
  if (lines.length === 0) return '(empty)';
  const first = brief(lines[0]!, 100);
  return lines.length > 1 ? `${first} (+${lines.length - 1} lines)` : first;
}

/** What a network card warns about (issue 12.3); the inspector page shows the same words. */
export const NETWORK_CARD_NOTE = "this command may reach the internet and the services of this machine (127.0.0.1, unix sockets, a local database)";

/**
 * A card field as the user reads it: control characters made visible (so a carriage return or an
 * erase sequence cannot hide part of a command), and each further line marked as part of the field,
 * so text inside it cannot pass for a line of the card or its question.
 */
function cardField(text: string): string {
  return terminalText(text, { strict: true }).split('\n').join('\n    │ ');
}

/** The lines of a permission card, before the question. */
export function cardLines(card: PermissionCard, style: Style): string[] {
  const lines = [style.yellow(`? ${terminalText(card.toolName, { singleLine: true, strict: true })} asks: ${cardField(card.summary)}`)];
  if (card.reason) lines.push(style.dim(`  why: ${cardField(card.reason)}`));
  if (card.command) lines.push(style.dim(`  command: ${cardField(card.command)}`));
  if (card.path) lines.push(style.dim(`  path: ${cardField(card.path)}`));
  if (card.mcp) lines.push(style.dim(`  arguments: ${cardField(card.mcp.arguments)}`));
  if (card.network) lines.push(style.red(`  network: ${NETWORK_CARD_NOTE}`));
  if (card.dangerNote) lines.push(style.red(`  danger: ${cardField(card.dangerNote)}`));
  return lines;
}

/** The lines of one question of request_user_input, its options numbered from 1. */
export function questionLines(q: UserInputQuestion, style: Style): string[] {
  const lines = [style.yellow(`? ${q.header ? `${cardField(q.header)}: ` : ''}${cardField(q.question)}`)];
  for (const [i, option] of (q.options ?? []).entries()) {
    lines.push(`  ${i + 1}. ${cardField(option.label)}${option.description ? style.dim(` (${cardField(option.description)})`) : ''}`);
  }
  if (q.options) lines.push(style.dim('  type a number, or answer in your own words'));
  return lines;
}

/** What a typed line answers: an option's label by its number, else the text itself; blank is no answer. */
export function pickAnswer(q: UserInputQuestion, typed: string): string | undefined {
  const text = typed.trim();
  if (text === '') return undefined;
  const n = /^\d+$/.test(text) ? Number(text) : NaN;
  const option = q.options && n >= 1 && n <= q.options.length ? q.options[n - 1] : undefined;
  return option ? option.label : text;
}

/** What the renderer does beyond plain lines; every part is optional (a pipe gets none of the extras). */
export interface RenderOptions {
  /** Renders completed Markdown blocks; absent, the answer streams raw. */
  markdown?: (markdown: string) => string;
  /** Where relative tool paths start, for the write/edit diff. */
  workingDirectory?: string;
  /** Diff lines shown at most before "… n more lines". */
  diffLines?: number;
  spinner?: Spinner;
}

/** Files larger than this are not diffed (the CLI reads them whole, twice). */
const DIFF_MAX_FILE_BYTES = 4 * 1024 * 1024;

/**
 * The content of a regular file of at most `DIFF_MAX_FILE_BYTES`, else null. The path comes from the
 * model's arguments and is read before the tool has judged it, so nothing here may block or grow
 * without bound: the open does not wait (a FIFO), and devices (`/dev/zero`), directories and large
 * files are left alone; `/proc` and the like are not files at all (services/permissions/tiers.ts).
 */
function readForDiff(path: string): string | null {
  if (kernelInterfaceRoot(path, process.platform === 'darwin' ? 'darwin' : 'linux') !== null) return null;
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch {
    return null;
  }
  try {
    const info = fstatSync(fd);
    if (!info.isFile() || info.size > DIFF_MAX_FILE_BYTES) return null;
    return readFileSync(fd, 'utf8');
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}

/** The tools whose successful calls are shown as a diff of the file they changed. */
const DIFFED_TOOLS = new Set(['write', 'edit']);

/** Writes updates as they come; keeps track of whether a streamed line is open. */
export class UpdateRenderer {
  private streaming: 'text' | 'reasoning' | null = null;
  private readonly markdown: MarkdownStream | null;
  /** The content of each file a running write/edit call targets, read when the call started. */
  private readonly before = new Map<string, { path: string; shown: string; content: string | null }>();

  constructor(
    private readonly out: NodeJS.WritableStream,
    private readonly style: Style,
    private readonly options: RenderOptions = {},
  ) {
    this.markdown = options.markdown ? new MarkdownStream(options.markdown) : null;
  }

  /** Writes after clearing the spinner's line, so that no output lands behind a frame. */
  private write(text: string): void {
    this.options.spinner?.clear();
    this.out.write(text);
  }

  /** The spinner shows `label` unless a streamed line is open (its frame would overwrite it). */
  wait(label: string, options: { restart?: boolean; retryInMs?: number } = { restart: true }): void {
    if (this.streaming !== null) return;
    this.options.spinner?.show(label, options);
  }

  /** Ends a streamed line (and writes what Markdown is still held), if one is open. */
  breakLine(): void {
    const rest = this.markdown?.flush() ?? '';
    if (rest) this.write(rest);
    if (this.streaming !== null) this.write('\n');
    this.streaming = null;
  }

  private line(text: string): void {
    this.breakLine();
    this.write(`${text}\n`);
  }

  private text(delta: string): void {
    if (this.markdown) {
      // Rendered per completed block: the line stays closed, and the spinner keeps spinning in between.
      if (this.streaming === 'reasoning') this.breakLine();
      const blocks = this.markdown.push(delta);
      if (blocks) this.write(blocks);
      this.options.spinner?.show('writing the answer');
      return;
    }
    if (this.streaming !== 'text') {
      this.breakLine();
      this.options.spinner?.stop();
      this.streaming = 'text';
    }
    this.write(delta);
  }

  /** Notes the file a write/edit call is about to change (the update comes before the call runs). */
  private noteBefore(toolCallId: string, toolName: string, args: string): void {
    if (!DIFFED_TOOLS.has(toolName) || this.options.workingDirectory === undefined) return;
    let path: unknown;
    try {
      path = (JSON.parse(args) as { path?: unknown }).path;
    } catch {
      return;
    }
    if (typeof path !== 'string' || path === '') return;
    const absolute = resolve(this.options.workingDirectory, path);
    this.before.set(toolCallId, { path: absolute, shown: path, content: readForDiff(absolute) });
  }

  private diffAfter(toolCallId: string, succeeded: boolean): void {
    const before = this.before.get(toolCallId);
    this.before.delete(toolCallId);
    if (!before || !succeeded) return;
    const after = readForDiff(before.path);
    if (after === null) return;
    for (const l of diffLines(before.shown, before.content, after, this.style, this.options.diffLines ?? 40)) this.line(l);
  }

  render(envelope: SessionUpdateEnvelope): void {
    const u = envelope.update;
    switch (u.type) {
      case 'text_delta':
        this.text(terminalText(u.delta));
        return;
      case 'reasoning_delta':
        if (this.streaming !== 'reasoning') {
          this.breakLine();
          this.options.spinner?.stop();
          this.write(this.style.dim('thinking: '));
          this.streaming = 'reasoning';
        }
        this.write(this.style.dim(terminalText(u.delta)));
        return;
      case 'draft_cleared':
        if (u.reason === 'discarded') {
          this.markdown?.drop();
          this.line(this.style.dim('[the partial answer above was discarded]'));
        } else this.breakLine();
        return;
      case 'tool_call_started':
        this.noteBefore(u.toolCallId, u.toolName, u.arguments);
        this.line(this.style.dim(`→ ${brief(u.toolName, 80)} ${briefArguments(u.arguments, 120)}`));
        this.wait(`running ${brief(u.toolName, 80)}`);
        return;
      case 'tool_call_finished': {
        const mark = u.status === 'succeeded' ? this.style.green('✓') : this.style.red('✗');
        this.line(`${mark} ${brief(u.toolName, 80)} ${u.status === 'succeeded' ? '' : `${u.status}: `}${this.style.dim(resultLine(u.text))}`);
        this.diffAfter(u.toolCallId, u.status === 'succeeded');
        return;
      }
      case 'permission_resolved':
        this.line(this.style.dim(`  permission: ${u.decision}`));
        return;
      case 'plan_updated':
        this.line(`plan: ${u.plan.map((s) => `${s.status === 'completed' ? '[x]' : s.status === 'in_progress' ? '[>]' : '[ ]'} ${brief(s.step, 200)}`).join('  ')}`);
        return;
      case 'phase_changed':
        if (u.phase === 'compacting') this.line(this.style.dim('(compacting the conversation)'));
        if (u.phase === 'running_model') this.wait('waiting for the model');
        else if (u.phase === 'compacting') this.wait('compacting the conversation');
        else if (u.phase === 'waiting_permission') this.wait('waiting for your approval');
        else if (u.phase === 'waiting_user_input') this.wait('waiting for your answer');
        return;
      case 'turn_finished':
        this.breakLine();
        this.options.spinner?.stop();
        if (u.outcome.status === 'cancelled') this.line(this.style.yellow('turn cancelled'));
        return;
      case 'permission_requested':
      case 'user_input_requested':
        // Asked by the conversation loop, which owns the input.
        this.breakLine();
        return;
      case 'user_input_resolved':
        if (u.outcome === 'cancelled') this.line(this.style.dim('  (the question was withdrawn)'));
        return;
      case 'conversation_compacted':
        this.breakLine();
        this.line(this.style.dim(`conversation compacted (${u.kind}): ${u.conversationTokensBefore} → ${u.conversationTokensAfter} tokens`));
        return;
      case 'turn_started':
        this.wait('waiting for the model');
        return;
      case 'tool_call_progress':
        return;
      default: {
        const never: never = u;
        return never;
      }
    }
  }
}
