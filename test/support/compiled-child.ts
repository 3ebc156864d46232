/**
 * A child process's TypeScript entry as plain JavaScript, so a test that starts many children (the
 * crash suite starts 51, the scale-out and store-lock suites a few each) boots each on `node` alone.
 * Under `node --import tsx` every module of the runtime went through tsx's loader thread: about
 * 1.8 s of CPU to import `src/core.ts` against 0.8 s for the same code from `dist/`, per child.
 *
 * The entry and the test-side files it imports (`test/**`) are transpiled once per test process
 * into a temporary directory laid out as the repository is, whose `src` is a link to `dist/` (built
 * from `src/` by `ensureBuilt` when any source file is newer) and whose `node_modules` is the
 * repository's. So `../../src/core.js` in a child is the built `dist/core.js`: the same code the
 * package ships, compiled by the same `tsc` settings, and one module instance per process, since
 * Node resolves the links to their real paths.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';
import { ensureBuilt, ROOT } from './cli-process.js';

let outRoot: string | undefined;
const compiled = new Map<string, string>();

/** The directory the compiled children live in, made once per test process. */
function root(): string {
  if (outRoot) return outRoot;
  ensureBuilt();
  const dir = mkdtempSync(join(tmpdir(), 'openwork-children-'));
  symlinkSync(join(ROOT, 'dist'), join(dir, 'src'), 'dir');
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'), 'dir');
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
  // The children run from it while the test process lives; it goes with that process.
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  outRoot = dir;
  return dir;
}

/** Relative module specifiers of a source file (static imports and exports, and `import()`). */
function relativeSpecifiers(source: string): string[] {
  const found: string[] = [];
  for (const match of source.matchAll(/(?:from\s+|import\s*\(\s*|import\s+)'(\.[^']+)'/g)) found.push(match[1]!);
  return found;
}

/**
 * The path of `entry` (an absolute path to a `.ts` file under `test/`) compiled to JavaScript, with
 * every `.ts` file under `test/` that it imports compiled beside it. Run it with `node <path>`.
 */
export function compiledChild(entry: string): string {
  const out = root();
  const pending = [resolve(entry)];
  while (pending.length > 0) {
    const file = pending.pop()!;
    if (compiled.has(file)) continue;
    const rel = relative(ROOT, file);
    if (!rel.startsWith('test/') || !file.endsWith('.ts')) throw new Error(`compiledChild: ${file} is not a TypeScript file under test/`);
    const source = readFileSync(file, 'utf8');
    const { outputText } = ts.transpileModule(source, {
      fileName: file,
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: true, sourceMap: false },
    });
    const target = join(out, rel.replace(/\.ts$/, '.js'));
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, outputText);
    compiled.set(file, target);
    for (const specifier of relativeSpecifiers(outputText)) {
      const imported = resolve(dirname(file), specifier);
      // Source modules come from dist/ through the link; test-side modules are compiled here too.
      if (relative(ROOT, imported).startsWith('test/')) pending.push(imported.replace(/\.js$/, '.ts'));
    }
  }
  return compiled.get(resolve(entry))!;
}
