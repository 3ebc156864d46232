#!/usr/bin/env node
// The `openwork` command: runs the compiled CLI from dist/ (built by `npm ci` through `prepare`).
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const entry = new URL('../dist/cli/main.js', import.meta.url);
if (!existsSync(fileURLToPath(entry))) {
  process.stderr.write('openwork: dist/ is missing; run `npm run build` (npm ci does it) first\n');
  process.exit(1);
}
const { main } = await import(entry.href);
main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error) => {
    process.stderr.write(`openwork: ${error?.message ?? error}\n`);
    process.exit(1);
  },
);
