/**
 * @module cli/slash-commands
 * The chat's own commands: a line that starts with `/` is one of them and is never sent to the
 * model. This module names them and parses a line; `chat` carries them out, since they act on its
 * session and its loop.
 */

export const SLASH_COMMANDS = {
  help: 'this list',
  status: 'the session, model, permission mode and token usage so far',
  new: 'start a new session (the current one stays stored)',
  sessions: 'the stored sessions, newest first',
  exit: 'leave the chat (Ctrl-D does too)',
} as const;

export type SlashCommand = keyof typeof SLASH_COMMANDS;

export type SlashLine = { kind: 'command'; name: SlashCommand } | { kind: 'unknown'; name: string } | null;

/** The command a line asks for, `unknown` for a `/word` that is none, or null for a prompt. */
export function parseSlash(line: string): SlashLine {
  const trimmed = line.trim();
  if (!trimmed.startsWith('/')) return null;
  const name = trimmed.slice(1).split(/\s+/)[0]!.toLowerCase();
  return Object.hasOwn(SLASH_COMMANDS, name) ? { kind: 'command', name: name as SlashCommand } : { kind: 'unknown', name: trimmed.split(/\s+/)[0]! };
}

/** The lines `/help` prints. */
export function slashHelpLines(): string[] {
  return Object.entries(SLASH_COMMANDS).map(([name, what]) => `  /${name.padEnd(10)} ${what}`);
}
