// Builds dist/ from src/ with tsc and copies the SQL migrations beside the compiled storage code.
import { execFileSync } from 'node:child_process';
import { cpSync, rmSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);
let tsc;
try {
  tsc = require.resolve('typescript/bin/tsc');
} catch {
  // Installed as a dependency without dev tools: the published package already ships dist/.
  if (existsSync(join(root, 'dist', 'index.js'))) process.exit(0);
  throw new Error('typescript is not installed and dist/ is missing');
}
rmSync(join(root, 'dist'), { recursive: true, force: true });
execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { stdio: 'inherit' });
cpSync(join(root, 'src', 'storage', 'migrations'), join(root, 'dist', 'storage', 'migrations'), { recursive: true });
