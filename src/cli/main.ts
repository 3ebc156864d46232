/**
 * @module cli/main
 * The `openwork` command.
 */
import { runDemo } from './demo.js';

const USAGE = `usage: openwork <command>

commands:
  demo        run an offline scripted session through the real runtime (PGlite under .openwork/)
`;

export async function main(argv: string[]): Promise<number> {
  const [command] = argv;
  switch (command) {
    case 'demo':
      return runDemo({ ...(argv.includes('--yes') ? { autoApprove: true } : {}) });
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
}
