/**
 * @module cli/slash-commands
 * The chat's own commands: a line that starts with `/` is one of them and is never sent to the
 * model. This module names them and parses a line; `chat` carries them out, since they act on its
 * session and its loop.
 */

export const SLASH_COMMANDS = {
  help: { usage: '/help', what: 'this list' },
  status: { usage: '/status', what: 'the session, model, permission mode, token usage so far and context window fill' },
  mode: { usage: '/mode [auto|accept_edits]', what: 'show the permission mode, or set it (from the next tool call)' },
  compact: { usage: '/compact', what: 'compact the conversation now (a summary checkpoint; nothing is deleted)' },
  rewind: { usage: '/rewind [n|checkpoint-id]', what: 'list the checkpoints, or rewind the conversation the model sees to one' },
  new: { usage: '/new', what: 'start a new session (the current one stays stored)' },
  sessions: { usage: '/sessions', what: 'the stored sessions, newest first' },
  exit: { usage: '/exit', what: 'leave the chat (Ctrl-D does too)' },
} as const;

export type SlashCommand = keyof typeof SLASH_COMMANDS;

export type SlashLine = { kind: 'command'; name: SlashCommand; args: string[] } | { kind: 'unknown'; name: string } | null;

/** The command a line asks for (with its arguments), `unknown` for a `/word` that is none, or null for a prompt. */
export function parseSlash(line: string): SlashLine {
  const trimmed = line.trim();
  if (!trimmed.startsWith('/')) return null;
  const [word, ...args] = trimmed.split(/\s+/);
  const name = word!.slice(1).toLowerCase();
  return Object.hasOwn(SLASH_COMMANDS, name) ? { kind: 'command', name: name as SlashCommand, args } : { kind: 'unknown', name: word! };
}

/** The lines `/help` prints. */
export function slashHelpLines(): string[] {
  return Object.values(SLASH_COMMANDS).map(({ usage, what }) => `  ${usage.padEnd(26)} ${what}`);
}
