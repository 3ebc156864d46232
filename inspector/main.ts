/**
 * @module inspector/main
 * `npm run inspector -- [options]` in a clone: the same command as `openwork inspect`, run from the
 * sources through tsx. The code is `src/inspector/command.ts`.
 */
import { errorMessage } from '../src/errors.js';
import { runInspect } from '../src/inspector/command.js';

runInspect(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`inspector: ${errorMessage(error)}\n`);
    process.exitCode = 1;
  },
);
