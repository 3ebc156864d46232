/**
 * @module cli/last-exchanges
 * What `openwork chat --session <id>` shows before the prompt: the last few exchanges of the
 * stored conversation (the user's words and the answer of each turn), shortened, so that the
 * user sees where the session stands before typing.
 */
import type { StoredMessage } from '../protocol/content.js';

export interface Exchange {
  user: string;
  answer: string | null;
}

function textOf(message: StoredMessage): string {
  return message.content
    .flatMap((block) => (block.type === 'text' ? [block.text] : []))
    .join('\n')
    .trim();
}

/** The last `count` turns' exchanges, oldest first: the turn's user text and its last answer text. */
export function lastExchanges(messages: readonly StoredMessage[], count: number): Exchange[] {
  const byTurn = new Map<string, Exchange>();
  for (const message of messages) {
    if (message.turnId === null || message.kind !== 'normal') continue;
    const text = textOf(message);
    if (text === '') continue;
    const exchange = byTurn.get(message.turnId);
    if (message.role === 'user') {
      if (exchange) exchange.user = `${exchange.user}\n${text}`;
      else byTurn.set(message.turnId, { user: text, answer: null });
    } else if (message.role === 'assistant' && exchange) {
      exchange.answer = text;
    }
  }
  return [...byTurn.values()].slice(-count);
}

/** `text` cut to `maxLines` lines of at most `width` characters, with a mark where it was cut. */
export function shorten(text: string, maxLines: number, width: number): string[] {
  const lines = text.split('\n');
  const kept = lines.slice(0, maxLines).map((l) => (l.length > width ? `${l.slice(0, width - 1)}…` : l));
  if (lines.length > maxLines) kept.push(`… (${lines.length - maxLines} more lines)`);
  return kept;
}
