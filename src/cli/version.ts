/**
 * @module cli/version
 * The version `openwork --version` and `openwork inspect --version` print. A module of its own so
 * that the inspector's command, which `cli/main` dispatches to, need not import `cli/main` back.
 */
import { readFileSync } from 'node:fs';

/** The package's version: package.json sits two directories up from both src/cli and dist/cli. */
export function cliVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}
