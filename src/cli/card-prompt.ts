/**
 * @module cli/card-prompt
 * How the terminal asks a permission card: the card's lines, then one question offering the
 * decisions the card allows ("allow [o]nce / this [t]urn / this [s]ession / [d]eny?"), asked
 * again until the answer is one of them. `openwork chat`, `openwork demo` and `openwork exec
 * --approve on-request` all ask through here, so a card reads and answers the same everywhere.
 */
import type { PermissionDecision } from '../protocol/input.js';
import type { PermissionCard } from '../protocol/updates.js';
import type { LineInput } from './line-input.js';
import { cardLines, type Style } from './render.js';

const ANSWERS: Record<string, PermissionDecision> = {
  o: 'allow_once',
  once: 'allow_once',
  y: 'allow_once',
  yes: 'allow_once',
  t: 'allow_for_turn',
  turn: 'allow_for_turn',
  s: 'allow_for_session',
  session: 'allow_for_session',
  d: 'deny',
  deny: 'deny',
  n: 'deny',
  no: 'deny',
};

const LABELS: Record<PermissionDecision, string> = {
  allow_once: '[o]nce',
  allow_for_turn: 'this [t]urn',
  allow_for_session: 'this [s]ession',
  deny: '[d]eny',
};

/** The question under a card, naming only the decisions it offers. */
export function cardQuestion(card: PermissionCard): string {
  const offered = (['allow_once', 'allow_for_turn', 'allow_for_session', 'deny'] as const).filter((d) => card.decisions.includes(d));
  return `  allow ${offered.map((d) => LABELS[d]).join(' / ')}? `;
}

/** The decision a typed answer names, if the card offers it. */
export function parseCardAnswer(card: PermissionCard, typed: string): PermissionDecision | undefined {
  const picked = ANSWERS[typed.trim().toLowerCase()];
  return picked && card.decisions.includes(picked) ? picked : undefined;
}

/**
 * Shows the card and asks until a decision is typed. Resolves `deny` when the input ends (nobody
 * is left to allow anything) and undefined when `signal` aborts first (the turn ended).
 */
export async function askCard(
  card: PermissionCard,
  lines: LineInput,
  print: (line: string) => void,
  style: Style,
  signal?: AbortSignal,
): Promise<PermissionDecision | undefined> {
  for (const line of cardLines(card, style)) print(line);
  for (;;) {
    const answer = await lines.ask(cardQuestion(card), signal);
    if (answer === undefined) return undefined;
    if (answer === null) {
      print(style.dim('  (input ended: denying)'));
      return 'deny';
    }
    const decision = parseCardAnswer(card, answer);
    if (decision) return decision;
    print(style.dim(`  please answer ${cardQuestion(card).trim()}`));
  }
}
