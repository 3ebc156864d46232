// Builds dist/ from src/ with tsc, copies the SQL migrations beside the compiled storage code and the
// inspector's page into dist/inspector/page, and writes the PGlite seed (a migrated data directory) there.
import { execFileSync } from 'node:child_process';
import { cpSync, rmSync, existsSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

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
// The inspector's page (plain HTML, CSS and ES modules) is served from dist/ by `openwork inspect`.
cpSync(join(root, 'inspector', 'page'), join(root, 'dist', 'inspector', 'page'), {
  recursive: true,
  filter: (source) => !source.endsWith('.d.ts'),
});

// The seed a new PGlite store starts from (src/storage/pglite.ts): initdb and the migrations run
// here once instead of on every user's first start.
const { createPgliteSeed } = await import(pathToFileURL(join(root, 'dist', 'storage', 'pglite.js')).href);
writeFileSync(join(root, 'dist', 'storage', 'pglite-seed.tar.gz'), await createPgliteSeed());
