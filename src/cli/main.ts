/**
 * @module cli/main
 * The `openwork` command: `demo`, `chat`, `exec`, `sessions`, `config`. Every command answers `--help` (its own
 * usage) and `--version`, with exit code 0. The commands load the runtime only when they run, so
 * that help and version answer at once.
 */
import { isOpenworkError } from '../errors.js';
import { loadConfigFiles } from './config.js';
import { cliVersion } from './version.js';
import type { EarlyStore } from './early-store.js';
import { UsageError, parseChatOptions, parseExecOptions, parseSessionsOptions, DEFAULT_MODEL, type ChatOptions } from './options.js';

/** The model and session flags that chat and exec share, as both usages list them. */
const MODEL_FLAGS = `  --model <name>           model name (default: OPENWORK_MODEL, OPENAI_MODEL, config "model", or ${DEFAULT_MODEL})
  --api responses|chat     OpenAI API to speak (default: OPENWORK_API, config "api"; else responses,
                           or chat when a base URL is set)
  --base-url <url>         an OpenAI-compatible server, e.g. http://localhost:11434/v1 (Ollama),
                           http://localhost:8000/v1 (vLLM), http://localhost:8080/v1 (llama.cpp),
                           http://localhost:1234/v1 (LM Studio); default OPENAI_BASE_URL, config "baseUrl"
  --reasoning-effort <e>   minimal | low | medium | high, for models that reason
  --max-output-tokens <n>  cap on each response
  --context-window <n>     the model's context window in tokens (default: OPENWORK_CONTEXT_WINDOW,
                           config "contextWindow"): turns on automatic compaction, fills /status
  --mode auto|accept_edits permission mode of a new session (default: OPENWORK_MODE, config "mode",
                           or auto); with --session it changes the session's mode
  --session <id>           continue a stored session: its model, API and base URL come back with it
                           (a flag given now overrides them), and its last exchanges are shown
  --mcp <config.json>      also give the model the tools of these MCP servers
                           ({"mcpServers": {"name": {"command","args","env"} | {"url","headers"}}});
                           a server of the same name in a config file is replaced
`;

/** The config files, as every command that talks to a model reads them. */
const CONFIG_HELP = `config files (JSON; optional; see openwork config): ~/.openwork/config.json, then
./.openwork/config.json, with the keys model, baseUrl, api ("responses" | "chat"), mode ("auto" |
"accept_edits"), contextWindow and mcpServers ({ "<name>": { "command", "args", "env" } | { "url", "headers" } }).
Precedence, highest first: flag, environment, ./.openwork/config.json, ~/.openwork/config.json, default.
A file that is not valid JSON or has an unknown key stops the command (exit 2).
`;

const DEMO_USAGE = `usage: openwork demo [--yes]

  An offline session with a SCRIPTED model through the real runtime (a tool call, an approval card,
  a plan; PGlite under .openwork/). It needs no API key and no network.

  --yes                    approve the card without asking (the default when stdin is not a terminal)
`;

const CHAT_USAGE = `usage: openwork chat [prompt] [options]

  A conversation with a real model in the current directory. The model gets the built-in tools
  (read, write, edit, grep, glob, list, bash in the sandbox), conversation_history, update_plan,
  request_user_input and the sub-agent tools; risky calls ask first.

  On a terminal: a spinner with the elapsed time says what the turn waits for (the model, a retry,
  a tool, your approval); the answer is rendered as Markdown paragraph by paragraph; write and edit
  show a coloured diff; each turn ends with one dim line of usage. Piped, all of it is plain text.

${MODEL_FLAGS}  --data-dir <dir>         PGlite directory (default .openwork/db)
  --database-url <url>     Postgres instead of PGlite (default DATABASE_URL)

slash commands (typed at the prompt, never sent to the model):
  /help /status /mode [auto|accept_edits] /compact /rewind [n|checkpoint-id] /new /sessions /exit

${CONFIG_HELP}
environment: OPENAI_API_KEY (not needed for a local --base-url), OPENAI_BASE_URL, OPENAI_MODEL,
OPENWORK_MODEL, OPENWORK_API, OPENWORK_MODE, DATABASE_URL, NO_COLOR
`;

const EXEC_USAGE = `usage: openwork exec "<prompt>" [--json] [--approve never|on-request|full-auto] [options]

  One turn, headless, in the current directory: prints the answer (errors on stderr) and exits
  0 when the turn completed, 1 when it failed, 130 when interrupted (SIGINT), 2 when it could not start.

  --json                   print every session update as one JSON line instead of the answer
  --approve <policy>       how permission cards are answered (default: never):
                             never       deny every card
                             on-request  ask on the terminal (needs stdin to be a terminal)
                             full-auto   allow every card, once
  the chat options: --model, --api, --base-url, --reasoning-effort, --max-output-tokens, --mode,
  --session <id> (the turn continues that session, with its model, API and base URL),
  --mcp <config.json>, --data-dir, --database-url

${CONFIG_HELP}
environment: OPENAI_API_KEY (not needed for a local --base-url), OPENAI_BASE_URL, OPENAI_MODEL,
OPENWORK_MODEL, OPENWORK_API, OPENWORK_MODE, DATABASE_URL
`;

const SESSIONS_USAGE = `usage: openwork sessions [options]

  The stored sessions that have at least one turn, newest first (continue one with
  openwork chat --session <id>).

  --limit <n>              how many (default 50)
  --data-dir <dir>         PGlite directory (default .openwork/db)
  --database-url <url>     Postgres instead of PGlite (default DATABASE_URL)
`;

const CONFIG_USAGE = `usage: openwork config [chat options]

  Prints the settings chat and exec would use in this directory (model, api, baseUrl, mode, store,
  mcpServers), each with where it came from: a flag, an environment variable, a config file's path,
  or the default. It takes the chat options, so that a flag's effect can be checked.

${CONFIG_HELP}`;

export const USAGE = `usage: openwork <command> [options]

commands:
  demo                 an offline session with a SCRIPTED model through the real runtime
                       (a tool call, an approval card, a plan; PGlite under .openwork/)
  chat [prompt]        a conversation with a real model in the current directory
  exec "<prompt>"      one headless turn: prints the answer (--json: the updates), exits 0/1/130
                       (--approve never|on-request|full-auto answers the cards; default never)
  sessions             the stored sessions (continue one with chat --session <id>)
  config               the merged settings and where each came from (flag, env, file, default)
  inspect              the web inspector on 127.0.0.1 (openwork inspect --help)

chat options:
${MODEL_FLAGS}
storage options (chat, exec, sessions):
  --data-dir <dir>         PGlite directory (default .openwork/db)
  --database-url <url>     Postgres instead of PGlite (default DATABASE_URL)

${CONFIG_HELP}
every command: --help (-h) prints its usage, --version (-V) the version
environment: OPENAI_API_KEY (not needed for a local --base-url), OPENAI_BASE_URL, OPENAI_MODEL,
OPENWORK_MODEL, OPENWORK_API, OPENWORK_MODE, DATABASE_URL, NO_COLOR
`;

const COMMAND_USAGE: Record<string, string> = { demo: DEMO_USAGE, chat: CHAT_USAGE, exec: EXEC_USAGE, sessions: SESSIONS_USAGE, config: CONFIG_USAGE };

/** `--help`/`--version` among a command's arguments (before a `--`, after which all is a prompt). */
function metaFlag(args: string[]): 'help' | 'version' | null {
  for (const arg of args) {
    if (arg === '--') return null;
    if (arg === '--help' || arg === '-h') return 'help';
    if (arg === '--version' || arg === '-V') return 'version';
  }
  return null;
}

/**
 * chat and exec: the store starts opening while the runtime's modules load (issue 14.4), unless
 * the model cannot open anyway. Its module is imported first, on its own, so that PGlite starts
 * before the larger runtime graph is read.
 */
/**
 * The Markdown renderer colours through chalk, which decides by itself from the environment and
 * says no under `CI` whatever the terminal is. The CLI's own rule (a terminal, no NO_COLOR) decides
 * instead, so chalk is told before the chat modules load it. Tool commands never see it: bash gets
 * an environment of its own.
 */
function colourLikeTheCli(env: NodeJS.ProcessEnv = process.env): void {
  if (process.stdout.isTTY === true && !env.NO_COLOR && env.TERM !== 'dumb' && env.FORCE_COLOR === undefined) env.FORCE_COLOR = '1';
}

async function openEarly(options: ChatOptions): Promise<EarlyStore | undefined> {
  const { modelLikelyOpens, openStoreEarly } = await import('./early-store.js');
  return modelLikelyOpens(options) ? openStoreEarly(options) : undefined;
}

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  const known = command !== undefined && command in COMMAND_USAGE;
  const meta = known ? metaFlag(rest) : command !== undefined && command.startsWith('-') ? metaFlag([command]) : null;
  if (meta === 'version') {
    process.stdout.write(`openwork ${cliVersion()}\n`);
    return 0;
  }
  if (meta === 'help') {
    process.stdout.write(known ? COMMAND_USAGE[command]! : USAGE);
    return 0;
  }
  try {
    switch (command) {
      case 'demo': {
        const { runDemo } = await import('./demo.js');
        return await runDemo({ ...(rest.includes('--yes') ? { autoApprove: true } : {}) });
      }
      case 'chat': {
        const options = parseChatOptions(rest, process.env, process.cwd(), loadConfigFiles(process.cwd()));
        const early = await openEarly(options);
        colourLikeTheCli();
        const { runChat } = await import('./chat.js');
        return await runChat(options, { input: process.stdin, output: process.stdout, error: process.stderr }, early);
      }
      case 'exec': {
        const options = parseExecOptions(rest, process.env, process.cwd(), loadConfigFiles(process.cwd()));
        const early = await openEarly(options);
        const { runExec } = await import('./exec.js');
        return await runExec(options, { input: process.stdin, output: process.stdout, error: process.stderr }, early);
      }
      case 'sessions': {
        const options = parseSessionsOptions(rest);
        const { runSessions } = await import('./sessions.js');
        return await runSessions(options, process.stdout, process.stderr);
      }
      case 'config': {
        const files = loadConfigFiles(process.cwd());
        const { prompt, ...options } = parseChatOptions(rest, process.env, process.cwd(), files);
        if (prompt !== undefined) throw new UsageError(`unexpected argument ${JSON.stringify(prompt)}`);
        const { configLines } = await import('./config-command.js');
        process.stdout.write(`${configLines(options, files).join('\n')}\n`);
        return 0;
      }
      case 'inspect': {
        const { runInspect } = await import('../inspector/command.js');
        return await runInspect(rest);
      }
      case 'version':
        process.stdout.write(`openwork ${cliVersion()}\n`);
        return 0;
      case 'help': {
        const topic = rest[0];
        process.stdout.write(topic !== undefined && topic in COMMAND_USAGE ? COMMAND_USAGE[topic]! : USAGE);
        return 0;
      }
      case undefined:
        process.stdout.write(USAGE);
        return 1;
      default:
        process.stderr.write(`openwork: unknown command ${JSON.stringify(command)}\n${USAGE}`);
        return 2;
    }
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(`openwork: ${error.message} (see openwork --help)\n`);
      return 2;
    }
    if (isOpenworkError(error) && error.code === 'configuration_invalid') {
      process.stderr.write(`openwork: bad config file: ${error.message}\n`);
      return 2;
    }
    throw error;
  }
}
