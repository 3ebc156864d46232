/**
 * The layers of `src/` import only downwards, and no module imports itself back through others
 * (issue 19): `errors` and `protocol` at the bottom; then `storage` and `machines`, which know
 * nothing of each other; then `services`; then the core (`core.ts`, `session-handle.ts`, `host/`);
 * then the entry points (`cli/`, `inspector/` with its server in `inspector/server/`, `testing/`, `index.ts`). The graph is
 * read from the import specifiers of the source text, type-only imports included: a type a lower
 * layer borrows from a higher one is the same coupling as a value.
 *
 * There are no exceptions left: the two lists below are empty, and an edge or cycle added later
 * fails the test. Should one ever be let in, it is listed there with the reason it exists; an entry
 * that no longer exists fails the test too, so whoever removes an edge removes its line.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

const SRC = join(import.meta.dirname, '..', '..', 'src');

/** Rank of each top-level unit of `src/`; a file may import its own rank or lower ones. */
const RANK: Record<string, number> = {
  errors: 0,
  protocol: 0,
  storage: 1,
  machines: 1,
  services: 2,
  core: 3,
  'session-handle': 3,
  host: 3,
  cli: 4,
  inspector: 4,
  testing: 4,
  index: 4,
};

/** Units of the same rank that must not import each other at all. */
const STRANGERS: ReadonlyArray<readonly [string, string]> = [['storage', 'machines']];

/* Edges against the layering that are let in, `from -> to` relative to src/: none (issue 19). */
const ALLOWED_VIOLATIONS: readonly string[] = [];

/* Import cycles that are let in, each as the sorted set of files that import each other in a ring: none. */
const ALLOWED_CYCLES: readonly string[] = [];

const SPECIFIER = /(?:^|[\s;])(?:import|export)\s+(?:type\s+)?(?:[^'";]*?\s+from\s+)?['"]([^'"]+)['"]|\bimport\(\s*['"]([^'"]+)['"]\s*\)/gm;

function sourceFiles(dir: string, out: string[] = []): string[] {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) sourceFiles(path, out);
    else if (entry.name.endsWith('.ts')) out.push(path);
  }
  return out;
}

/** The file a relative specifier names (`./x.js` is `./x.ts`; a folder is its `index.ts`). */
function resolve(from: string, specifier: string): string {
  const base = join(dirname(from), specifier).replace(/\.js$/, '');
  for (const candidate of [`${base}.ts`, join(base, 'index.ts')]) if (existsSync(candidate)) return candidate;
  throw new Error(`${relative(SRC, from)} imports ${specifier}, which resolves to no file`);
}

/** The import graph of src/: file → the src/ files it imports (relative to src/). */
export function importGraph(files: readonly string[]): Map<string, Set<string>> {
  const graph = new Map<string, Set<string>>();
  for (const file of files) {
    const targets = new Set<string>();
    for (const match of readFileSync(file, 'utf8').matchAll(SPECIFIER)) {
      const specifier = match[1] ?? match[2]!;
      if (specifier.startsWith('.')) targets.add(relative(SRC, resolve(file, specifier)));
    }
    graph.set(relative(SRC, file), targets);
  }
  return graph;
}

/** The unit a file belongs to: its top-level folder, or the file's own name at the top. */
export function unitOf(file: string): string {
  const [top, ...rest] = file.split('/');
  return rest.length > 0 ? top! : top!.replace(/\.ts$/, '');
}

/** Strongly connected components with more than one file (Tarjan), each sorted and joined. */
export function cycles(graph: ReadonlyMap<string, ReadonlySet<string>>): string[] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[] = [];
  const visit = (node: string): void => {
    index.set(node, next);
    low.set(node, next);
    next += 1;
    stack.push(node);
    onStack.add(node);
    for (const target of graph.get(node) ?? []) {
      if (!index.has(target)) {
        visit(target);
        low.set(node, Math.min(low.get(node)!, low.get(target)!));
      } else if (onStack.has(target)) {
        low.set(node, Math.min(low.get(node)!, index.get(target)!));
      }
    }
    if (low.get(node) === index.get(node)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        onStack.delete(member);
        component.push(member);
      } while (member !== node);
      if (component.length > 1) found.push(component.sort().join(' '));
    }
  };
  for (const node of graph.keys()) if (!index.has(node)) visit(node);
  return found.sort();
}

/** Edges that go up a rank, or between units that must not know each other. */
export function violations(graph: ReadonlyMap<string, ReadonlySet<string>>): string[] {
  const found: string[] = [];
  for (const [from, targets] of graph) {
    for (const to of targets) {
      const [a, b] = [unitOf(from), unitOf(to)];
      if (a === b) continue;
      const strangers = STRANGERS.some(([x, y]) => (x === a && y === b) || (x === b && y === a));
      if (RANK[b]! > RANK[a]! || strangers) found.push(`${from} -> ${to}`);
    }
  }
  return found.sort();
}

describe('layers of src/', () => {
  const graph = importGraph(sourceFiles(SRC));

  it('every top-level unit of src/ has a layer', () => {
    const units = [...new Set([...graph.keys()].map(unitOf))].sort();
    expect(units.filter((unit) => RANK[unit] === undefined)).toEqual([]);
  });

  it('imports go only downwards, and storage and machines know nothing of each other (known exceptions listed)', () => {
    expect(violations(graph)).toEqual([...ALLOWED_VIOLATIONS].sort());
  });

  it('no import cycles beyond the listed ones', () => {
    expect(cycles(graph)).toEqual([...ALLOWED_CYCLES].sort());
  });

  it('the checks see a violation and a cycle in a graph made for the purpose', () => {
    const made = new Map<string, Set<string>>([
      ['protocol/a.ts', new Set(['services/b.ts'])],
      ['services/b.ts', new Set(['protocol/a.ts'])],
      ['storage/c.ts', new Set(['machines/d.ts'])],
      ['machines/d.ts', new Set()],
      ['cli/e.ts', new Set(['core.ts'])],
      ['core.ts', new Set()],
    ]);
    expect(violations(made)).toEqual(['protocol/a.ts -> services/b.ts', 'storage/c.ts -> machines/d.ts']);
    expect(cycles(made)).toEqual(['protocol/a.ts services/b.ts']);
  });
});
