/**
 * @module services/permissions/danger
 * Danger-command detection (reference §4.10) on a real bash parse tree (tree-sitter-bash, loaded
 * as WebAssembly so that nothing is compiled or downloaded at install). The list is closed; a hit
 * only asks the user first: the command still runs inside the current mode's sandbox. The parse
 * tree is used for this and nothing else: it never allows anything.
 */
import { createRequire } from 'node:module';
import { basename } from 'node:path';
import { Language, Parser, type Node } from 'web-tree-sitter';

export type DangerKey = 'rm_recursive_or_force' | 'find_delete' | 'git_clean_force' | 'nesting_too_deep';

export interface DangerHit {
  key: DangerKey;
  /** The matched sub-command as written (inside a `bash -c` literal: the inner command). */
  match: string;
  /** Where the match (or the outermost command containing it) sits in the checked command. */
  span: { start: number; end: number };
}

/** `bash -c` literals are re-parsed up to this depth; one more level is itself a hit. */
export const MAX_NESTING = 8;

const SHELLS = new Set(['bash', 'sh', 'zsh', 'dash', 'ksh']);

interface Arg {
  /** The literal value, or `null` when it depends on an expansion. */
  value: string | null;
}

function unescapeWord(text: string): string {
  return text.replace(/\\(.)/gs, '$1');
}

function unescapeDoubleQuoted(text: string): string {
  return text.replace(/\\([$`"\\\n])/g, (_, c: string) => (c === '\n' ? '' : c));
}

/** The literal value of a word-like node, or null when it has expansions. */
function literal(node: Node): string | null {
  switch (node.type) {
    case 'word':
    case 'number':
      return unescapeWord(node.text);
    case 'raw_string':
      return node.text.slice(1, -1);
    case 'string': {
      let value = '';
      for (const child of node.namedChildren) {
        if (!child) return null;
        if (child.type !== 'string_content') return null;
        value += unescapeDoubleQuoted(child.text);
      }
      return value;
    }
    case 'concatenation': {
      let value = '';
      for (const child of node.namedChildren) {
        const part = child ? literal(child) : null;
        if (part === null) return null;
        value += part;
      }
      return value;
    }
    case 'command_name': {
      const inner = node.namedChildren[0];
      return inner ? literal(inner) : null;
    }
    default:
      return null;
  }
}

function argvOf(command: Node): Arg[] | null {
  const name = command.childForFieldName('name');
  if (!name) return null;
  const argv: Arg[] = [{ value: literal(name) }];
  for (const arg of command.childrenForFieldName('argument')) {
    if (arg) argv.push({ value: literal(arg) });
  }
  return argv;
}

const ASSIGNMENT = /^[A-Za-z_][A-Za-z0-9_]*=/;

/** Skips options (`withValue` take the next word unless written `--opt=value`) and assignments. */
function skipOptions(args: Arg[], withValue: Set<string>, options: { assignments?: boolean; stopAtFirst?: boolean } = {}): Arg[] {
  let i = 0;
  while (i < args.length) {
    const value = args[i]!.value;
    if (value === null) return args.slice(i);
    if (value === '--') return args.slice(i + 1);
    if (value.startsWith('-') && value.length > 1) {
      i += withValue.has(value) ? 2 : 1;
      continue;
    }
    if (options.assignments && ASSIGNMENT.test(value)) {
      i += 1;
      continue;
    }
    break;
  }
  return args.slice(i);
}

const SUDO_VALUE = new Set(['-u', '-g', '-C', '-D', '-h', '-p', '-r', '-t', '-U', '-T', '--user', '--group', '--close-from', '--chdir', '--host', '--prompt', '--role', '--type', '--other-user', '--command-timeout']);
const ENV_VALUE = new Set(['-u', '--unset', '-C', '--chdir']);
const XARGS_VALUE = new Set(['-I', '-L', '-n', '-P', '-s', '-d', '-E', '-a', '--arg-file', '--delimiter', '--max-args', '--max-procs', '--max-chars', '--max-lines', '--eof', '--process-slot-var']);
const TIMEOUT_VALUE = new Set(['-s', '--signal', '-k', '--kill-after']);
const NICE_VALUE = new Set(['-n', '--adjustment']);
const TIME_VALUE = new Set(['-o', '--output', '-f', '--format']);
const GIT_VALUE = new Set(['-C', '-c', '--git-dir', '--work-tree', '--namespace', '--config-env', '--super-prefix', '--exec-path']);
const SHELL_VALUE = new Set(['-o', '+o', '-O', '+O', '--rcfile', '--init-file']);

/** `env -S 'a b'` splits its string into words that continue the command line. */
function expandEnvSplit(args: Arg[]): Arg[] {
  const out: Arg[] = [];
  for (let i = 0; i < args.length; i += 1) {
    const value = args[i]!.value;
    if ((value === '-S' || value === '--split-string') && i + 1 < args.length) {
      const split = args[i + 1]!.value;
      if (split === null) return [...out, ...args.slice(i + 1)];
      out.push(...split.split(/\s+/).filter((w) => w !== '').map((w) => ({ value: w })));
      i += 1;
      continue;
    }
    if (value?.startsWith('--split-string=') || (value?.startsWith('-S') && value.length > 2)) {
      const split = value.startsWith('-S') ? value.slice(2) : value.slice('--split-string='.length);
      out.push(...split.split(/\s+/).filter((w) => w !== '').map((w) => ({ value: w })));
      continue;
    }
    out.push(args[i]!);
  }
  return out;
}

function isShortCluster(value: string): boolean {
  return value.startsWith('-') && !value.startsWith('--') && value.length > 1;
}

function rmHit(args: Arg[]): boolean {
  for (const { value } of args) {
    if (value === null) continue;
    if (value === '--') return false;
    if (value === '--recursive' || value === '--force') return true;
    if (isShortCluster(value) && /[rRf]/.test(value.slice(1))) return true;
  }
  return false;
}

function findHit(args: Arg[]): boolean {
  for (let i = 0; i < args.length; i += 1) {
    const value = args[i]!.value;
    if (value === '-delete') return true;
    if ((value === '-exec' || value === '-execdir') && i + 1 < args.length) {
      const program = args[i + 1]!.value;
      if (program !== null && basename(program) === 'rm') return true;
    }
  }
  return false;
}

function gitCleanHit(args: Arg[]): boolean {
  const rest = skipOptions(args, GIT_VALUE);
  if (rest[0]?.value !== 'clean') return false;
  for (const { value } of rest.slice(1)) {
    if (value === null) continue;
    if (value === '--') return false;
    if (value === '--force') return true;
    if (isShortCluster(value) && value.slice(1).includes('f')) return true;
  }
  return false;
}

export interface DangerDetector {
  /** The first hit in document order, or null. Syntax errors are never hits (reference §4.10). */
  detect(command: string): DangerHit | null;
}

class TreeSitterDangerDetector implements DangerDetector {
  constructor(private readonly parser: Parser) {}

  detect(command: string): DangerHit | null {
    return this.scan(command, 0, null);
  }

  /** `outer` is the span of the top-level command a nested literal came from. */
  private scan(script: string, depth: number, outer: { start: number; end: number } | null): DangerHit | null {
    const tree = this.parser.parse(script);
    if (!tree) return null;
    try {
      if (tree.rootNode.hasError) return null;
      const stack: Node[] = [tree.rootNode];
      // Depth-first, in document order: the first hit is the leftmost.
      while (stack.length > 0) {
        const node = stack.pop()!;
        if (node.type === 'command') {
          const argv = argvOf(node);
          const span = outer ?? { start: node.startIndex, end: node.endIndex };
          const hit = argv ? this.checkArgv(argv, node.text, depth, span) : null;
          if (hit) return hit;
        }
        const children = node.namedChildren;
        for (let i = children.length - 1; i >= 0; i -= 1) {
          const child = children[i];
          if (child) stack.push(child);
        }
      }
      return null;
    } finally {
      tree.delete();
    }
  }

  private checkArgv(argv: Arg[], text: string, depth: number, span: { start: number; end: number }): DangerHit | null {
    const program = argv[0]?.value;
    // A dynamic program name (`$CMD -rf x`) is not checked: it runs in the sandbox like any command.
    if (program === null || program === undefined) return null;
    const name = basename(program);
    const args = argv.slice(1);
    const inner = (rest: Arg[]) => (rest.length > 0 ? this.checkArgv(rest, text, depth, span) : null);
    switch (name) {
      case 'sudo':
        return inner(skipOptions(args, SUDO_VALUE, { assignments: true }));
      case 'env':
        return inner(skipOptions(expandEnvSplit(args), ENV_VALUE, { assignments: true }));
      case 'xargs':
        return inner(skipOptions(args, XARGS_VALUE));
      case 'timeout': {
        const rest = skipOptions(args, TIMEOUT_VALUE);
        return inner(rest.slice(1));
      }
      case 'nice':
        return inner(skipOptions(args, NICE_VALUE));
      case 'nohup':
      case 'time':
        return inner(skipOptions(args, TIME_VALUE));
      case 'command': {
        // `command -v` / `-V` only describes a command; it does not run it.
        const options = args.slice(0, args.length - skipOptions(args, new Set()).length);
        if (options.some((o) => o.value !== null && /^-[a-zA-Z]*[vV]/.test(o.value))) return null;
        return inner(skipOptions(args, new Set()));
      }
      case 'rm':
        return rmHit(args) ? { key: 'rm_recursive_or_force', match: text, span } : null;
      case 'find':
        return findHit(args) ? { key: 'find_delete', match: text, span } : null;
      case 'git':
        return gitCleanHit(args) ? { key: 'git_clean_force', match: text, span } : null;
      default:
        if (SHELLS.has(name)) return this.checkShell(args, text, depth, span);
        return null;
    }
  }

  private checkShell(args: Arg[], text: string, depth: number, span: { start: number; end: number }): DangerHit | null {
    let readsString = false;
    for (let i = 0; i < args.length; i += 1) {
      const value = args[i]!.value;
      if (value === null) return null;
      if (value === '--' || value === '-') {
        if (!readsString) return null;
        const script = args[i + 1]?.value;
        return script === undefined || script === null ? null : this.nested(script, text, depth, span);
      }
      if ((value.startsWith('-') || value.startsWith('+')) && value.length > 1) {
        if (SHELL_VALUE.has(value)) {
          i += 1;
          continue;
        }
        if (!value.startsWith('--') && value.slice(1).includes('c')) readsString = true;
        continue;
      }
      // The first operand: the command string under -c, otherwise a script file (not checked).
      return readsString ? this.nested(value, text, depth, span) : null;
    }
    return null;
  }

  private nested(script: string, text: string, depth: number, span: { start: number; end: number }): DangerHit | null {
    if (depth + 1 > MAX_NESTING) return { key: 'nesting_too_deep', match: text, span };
    return this.scan(script, depth + 1, span);
  }
}

let loading: Promise<DangerDetector> | null = null;

/** Loads the bash grammar once per process; resolves to a synchronous detector. */
export function loadDangerDetector(): Promise<DangerDetector> {
  loading ??= (async () => {
    const require = createRequire(import.meta.url);
    await Parser.init();
    const language = await Language.load(require.resolve('tree-sitter-bash/tree-sitter-bash.wasm'));
    const parser = new Parser();
    parser.setLanguage(language);
    return new TreeSitterDangerDetector(parser);
  })();
  loading.catch(() => {
    loading = null;
  });
  return loading;
}
