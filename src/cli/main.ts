/**
 * @module cli/main
 * The `openwork` command: `demo`, `chat`, `sessions`.
 */
import { runChat } from './chat.js';
import { runDemo } from './demo.js';
import { UsageError, parseChatOptions, parseSessionsOptions, DEFAULT_MODEL } from './options.js';
import { runSessions } from './sessions.js';

export const USAGE = `usage: openwork <command> [options]

commands:
  demo                 an offline session with a SCRIPTED model through the real runtime
                       (a tool call, an approval card, a plan; PGlite under .openwork/)
  chat [prompt]        a conversation with a real model in the current directory
  sessions             the stored sessions (continue one with chat --session <id>)

chat options:
  --model <name>           model name (default: OPENWORK_MODEL, OPENAI_MODEL, or ${DEFAULT_MODEL})
  --api responses|chat     OpenAI API to speak (default: responses; chat when a base URL is set)
  --base-url <url>         an OpenAI-compatible server, e.g. http://localhost:11434/v1 (Ollama),
                           http://localhost:8000/v1 (vLLM), http://localhost:8080/v1 (llama.cpp),
                           http://localhost:1234/v1 (LM Studio); default OPENAI_BASE_URL
  --reasoning-effort <e>   minimal | low | medium | high, for models that reason
  --max-output-tokens <n>  cap on each response
  --session <id>           continue a stored session

storage options (chat, sessions):
  --data-dir <dir>         PGlite directory (default .openwork/db)
  --database-url <url>     Postgres instead of PGlite (default DATABASE_URL)

environment: OPENAI_API_KEY (not needed for a local --base-url), OPENAI_BASE_URL, DATABASE_URL
`;

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'demo':
        return await runDemo({ ...(rest.includes('--yes') ? { autoApprove: true } : {}) });
      case 'chat':
        return await runChat(parseChatOptions(rest), { input: process.stdin, output: process.stdout, error: process.stderr });
      case 'sessions':
        return await runSessions(parseSessionsOptions(rest), process.stdout, process.stderr);
      case undefined:
      case 'help':
      case '--help':
      case '-h':
        process.stdout.write(USAGE);
        return command === undefined ? 1 : 0;
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
