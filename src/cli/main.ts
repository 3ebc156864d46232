/**
 * @module cli/main
 * The `openwork` command: `demo`, `chat`, `exec`, `sessions`. Every command answers `--help` (its own
 * usage) and `--version`, with exit code 0. The commands load the runtime only when they run, so
 * that help and version answer at once.
 */
import { readFileSync } from 'node:fs';
import { UsageError, parseChatOptions, parseExecOptions, parseSessionsOptions, DEFAULT_MODEL } from './options.js';

/** The package's version: package.json sits two directories up from both src/cli and dist/cli. */
export function cliVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

/** The model and session flags that chat and exec share, as both usages list them. */
const MODEL_FLAGS = `  --model <name>           model name (default: OPENWORK_MODEL, OPENAI_MODEL, or ${DEFAULT_MODEL})
  --api responses|chat     OpenAI API to speak (default: responses; chat when a base URL is set)
  --base-url <url>         an OpenAI-compatible server, e.g. http://localhost:11434/v1 (Ollama),
                           http://localhost:8000/v1 (vLLM), http://localhost:8080/v1 (llama.cpp),
                           http://localhost:1234/v1 (LM Studio); default OPENAI_BASE_URL
  --reasoning-effort <e>   minimal | low | medium | high, for models that reason
  --max-output-tokens <n>  cap on each response
  --session <id>           continue a stored session
  --mcp <config.json>      also give the model the tools of these MCP servers
                           ({"mcpServers": {"name": {"command","args","env"} | {"url","headers"}}})
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

${MODEL_FLAGS}  --data-dir <dir>         PGlite directory (default .openwork/db)
  --database-url <url>     Postgres instead of PGlite (default DATABASE_URL)

environment: OPENAI_API_KEY (not needed for a local --base-url), OPENAI_BASE_URL, DATABASE_URL
`;

const EXEC_USAGE = `usage: openwork exec "<prompt>" [--json] [--approve never|on-request|full-auto] [options]

  One turn, headless, in the current directory: prints the answer (errors on stderr) and exits
  0 when the turn completed, 1 when it failed, 130 when interrupted (SIGINT), 2 when it could not start.

  --json                   print every session update as one JSON line instead of the answer
  --approve <policy>       how permission cards are answered (default: never):
                             never       deny every card
                             on-request  ask on the terminal (needs stdin to be a terminal)
                             full-auto   allow every card, once
  the chat options: --model, --api, --base-url, --reasoning-effort, --max-output-tokens,
  --session <id> (the turn continues that session), --mcp <config.json>, --data-dir, --database-url

environment: OPENAI_API_KEY (not needed for a local --base-url), OPENAI_BASE_URL, DATABASE_URL
`;

const SESSIONS_USAGE = `usage: openwork sessions [options]

  The stored sessions, newest first (continue one with openwork chat --session <id>).

  --limit <n>              how many (default 50)
  --data-dir <dir>         PGlite directory (default .openwork/db)
  --database-url <url>     Postgres instead of PGlite (default DATABASE_URL)
`;

export const USAGE = `usage: openwork <command> [options]

commands:
  demo                 an offline session with a SCRIPTED model through the real runtime
                       (a tool call, an approval card, a plan; PGlite under .openwork/)
  chat [prompt]        a conversation with a real model in the current directory
  exec "<prompt>"      one headless turn: prints the answer (--json: the updates), exits 0/1/130
                       (--approve never|on-request|full-auto answers the cards; default never)
  sessions             the stored sessions (continue one with chat --session <id>)

chat options:
${MODEL_FLAGS}
storage options (chat, exec, sessions):
  --data-dir <dir>         PGlite directory (default .openwork/db)
  --database-url <url>     Postgres instead of PGlite (default DATABASE_URL)

every command: --help (-h) prints its usage, --version (-V) the version
environment: OPENAI_API_KEY (not needed for a local --base-url), OPENAI_BASE_URL, DATABASE_URL
`;

const COMMAND_USAGE: Record<string, string> = { demo: DEMO_USAGE, chat: CHAT_USAGE, exec: EXEC_USAGE, sessions: SESSIONS_USAGE };

/** `--help`/`--version` among a command's arguments (before a `--`, after which all is a prompt). */
function metaFlag(args: string[]): 'help' | 'version' | null {
  for (const arg of args) {
    if (arg === '--') return null;
    if (arg === '--help' || arg === '-h') return 'help';
    if (arg === '--version' || arg === '-V') return 'version';
  }
  return null;
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
        const options = parseChatOptions(rest);
        const { runChat } = await import('./chat.js');
        return await runChat(options, { input: process.stdin, output: process.stdout, error: process.stderr });
      }
      case 'exec': {
        const options = parseExecOptions(rest);
        const { runExec } = await import('./exec.js');
        return await runExec(options, { input: process.stdin, output: process.stdout, error: process.stderr });
      }
      case 'sessions': {
        const options = parseSessionsOptions(rest);
        const { runSessions } = await import('./sessions.js');
        return await runSessions(options, process.stdout, process.stderr);
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
    throw error;
  }
}
