/**
 * @module cli/render
 * How `openwork chat` shows a session's updates in a terminal: the answer streamed as it arrives,
 * reasoning dimmed, each tool call and its result in one line, cards, plans and the outcome.
 */
import type { PermissionCard, SessionUpdateEnvelope } from '../protocol/updates.js';
import type { UserInputQuestion } from '../protocol/user-input.js';

export interface Style {
  dim(text: string): string;
  bold(text: string): string;
  red(text: string): string;
  green(text: string): string;
  yellow(text: string): string;
}

/** ANSI styling on a colour terminal (and not under NO_COLOR), plain text otherwise. */
export function styleFor(out: NodeJS.WritableStream, env: NodeJS.ProcessEnv = process.env): Style {
  const on = (out as { isTTY?: boolean }).isTTY === true && !env.NO_COLOR;
  const wrap = (open: number, close: number) => (text: string) => (on ? `\u001b[${open}m${text}\u001b[${close}m` : text);
  return { dim: wrap(2, 22), bold: wrap(1, 22), red: wrap(31, 39), green: wrap(32, 39), yellow: wrap(33, 39) };
}

function brief(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

function resultLine(text: string): string {
  const lines = text.split('\n').filter((l) => l.trim() !== '');
  if (lines.length === 0) return '(empty)';
  const first = brief(lines[0]!, 100);
  return lines.length > 1 ? `${first} (+${lines.length - 1} lines)` : first;
}

/** What a network card warns about (issue 12.3); the inspector page shows the same words. */
export const NETWORK_CARD_NOTE = "this command may reach the internet and the services of this machine (127.0.0.1, unix sockets, a local database)";

/** The lines of a permission card, before the question. */
export function cardLines(card: PermissionCard, style: Style): string[] {
  const lines = [style.yellow(`? ${card.toolName} asks: ${card.summary}`)];
  if (card.reason) lines.push(style.dim(`  why: ${card.reason}`));
  if (card.command) lines.push(style.dim(`  command: ${card.command}`));
  if (card.path) lines.push(style.dim(`  path: ${card.path}`));
  if (card.mcp) lines.push(style.dim(`  arguments: ${card.mcp.arguments}`));
  if (card.network) lines.push(style.red(`  network: ${NETWORK_CARD_NOTE}`));
  if (card.dangerNote) lines.push(style.red(`  danger: ${card.dangerNote}`));
  return lines;
}

/** The lines of one question of request_user_input, its options numbered from 1. */
export function questionLines(q: UserInputQuestion, style: Style): string[] {
  const lines = [style.yellow(`? ${q.header ? `${q.header}: ` : ''}${q.question}`)];
  for (const [i, option] of (q.options ?? []).entries()) {
    lines.push(`  ${i + 1}. ${option.label}${option.description ? style.dim(` (${option.description})`) : ''}`);
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

/** Writes updates as they come; keeps track of whether a streamed line is open. */
export class UpdateRenderer {
  private streaming: 'text' | 'reasoning' | null = null;

  constructor(
    private readonly out: NodeJS.WritableStream,
    private readonly style: Style,
  ) {}

  /** Ends a streamed line, if one is open. */
  breakLine(): void {
    if (this.streaming !== null) this.out.write('\n');
    this.streaming = null;
  }

  private line(text: string): void {
    this.breakLine();
    this.out.write(`${text}\n`);
  }

  render(envelope: SessionUpdateEnvelope): void {
    const u = envelope.update;
    switch (u.type) {
      case 'text_delta':
        if (this.streaming !== 'text') {
          this.breakLine();
          this.streaming = 'text';
        }
        this.out.write(u.delta);
        return;
      case 'reasoning_delta':
        if (this.streaming !== 'reasoning') {
          this.breakLine();
          this.out.write(this.style.dim('thinking: '));
          this.streaming = 'reasoning';
        }
        this.out.write(this.style.dim(u.delta));
        return;
      case 'draft_cleared':
        if (u.reason === 'discarded') this.line(this.style.dim('[the partial answer above was discarded]'));
        else this.breakLine();
        return;
      case 'tool_call_started':
        this.line(this.style.dim(`→ ${u.toolName} ${brief(u.arguments, 120)}`));
        return;
      case 'tool_call_finished': {
        const mark = u.status === 'succeeded' ? this.style.green('✓') : this.style.red('✗');
        this.line(`${mark} ${u.toolName} ${u.status === 'succeeded' ? '' : `${u.status}: `}${this.style.dim(resultLine(u.text))}`);
        return;
      }
      case 'permission_resolved':
        this.line(this.style.dim(`  permission: ${u.decision}`));
        return;
      case 'plan_updated':
        this.line(`plan: ${u.plan.map((s) => `${s.status === 'completed' ? '[x]' : s.status === 'in_progress' ? '[>]' : '[ ]'} ${s.step}`).join('  ')}`);
        return;
      case 'phase_changed':
        if (u.phase === 'compacting') this.line(this.style.dim('(compacting the conversation)'));
        return;
      case 'turn_finished':
        this.breakLine();
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
      case 'tool_call_progress':
        return;
      default: {
        const never: never = u;
        return never;
      }
    }
  }
}
