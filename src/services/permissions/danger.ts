/**
 * @module services/permissions/danger
 * Danger-command detection (reference §4.10, tightened by issue 12 point 10) on a real bash parse
 * tree (tree-sitter-bash, loaded as WebAssembly so that nothing is compiled or downloaded at
 * install). A hit only asks the user first: the command still runs inside the current mode's
 * sandbox. The parse tree is used for this and nothing else: it never allows anything.
 *
 * The detector errs towards asking. Besides the closed list of deleting commands it counts as a hit
 * whatever it cannot see through: a command with a syntax error (bash runs the lines before the
 * error), `eval` and `exec`, a command substitution in command position, a shell that reads its
 * script from stdin or from a substitution (`| sh`, `bash <(…)`), and any program it does not
 * know to be harmless that carries a dangerous command among its operands (`busybox rm -rf x`,
 * `setsid rm -rf x`). Long options match by unique prefix, as GNU getopt and git do.
 */
import { createRequire } from 'node:module';
import { basename } from 'node:path';
import { Language, Parser, type Node, type Tree } from 'web-tree-sitter';
import { nextSlice, sliceDue } from '../host-slice.js';

export type DangerKey =
  | 'rm_recursive_or_force'
  | 'find_delete'
  | 'git_clean_force'
  | 'nesting_too_deep'
  /** The command (or a `bash -c` literal in it) has a syntax error, so it cannot be checked. */
  | 'unparsable'
  /** Code chosen at run time: `eval`, `exec`, `$(…)` as the program, a shell fed by stdin or a substitution. */
  | 'dynamic_command';

export interface DangerHit {
  key: DangerKey;
  /** The matched sub-command as written (inside a `bash -c` literal: the inner command). */
  match: string;
  /** Where the match (or the outermost command containing it) sits in the checked command. */
  span: { start: number; end: number };
}

/** Whether a hit's key names a command that deletes files (the others name a command that cannot be checked). */
export function deletesFiles(key: DangerKey): boolean {
  return key === 'rm_recursive_or_force' || key === 'find_delete' || key === 'git_clean_force';
}

/** `bash -c` literals are re-parsed up to this depth; one more level is itself a hit. */
export const MAX_NESTING = 8;

const SHELLS = new Set(['bash', 'sh', 'zsh', 'dash', 'ksh', 'ash', 'mksh', 'yash', 'posh', 'rbash']);

/**
 * Programs that never run their operands as a command: a dangerous word among their arguments is
 * data (`echo rm -rf x`, `grep -rf patterns .`). Every other program with such a word in its
 * operands is treated as a wrapper of it.
 */
const HARMLESS = new Set([
  'echo', 'printf', 'cat', 'tac', 'ls', 'grep', 'egrep', 'fgrep', 'rg', 'ag', 'head', 'tail', 'wc', 'sort', 'uniq', 'cut', 'tr',
  'mkdir', 'rmdir', 'touch', 'cp', 'mv', 'ln', 'chmod', 'chown', 'test', '[', '[[', 'true', 'false', 'cd', 'pwd', 'which', 'type',
  'whatis', 'man', 'help', 'file', 'stat', 'du', 'df', 'basename', 'dirname', 'realpath', 'readlink', 'diff', 'cmp', 'tee', 'less',
  'more', 'export', 'declare', 'typeset', 'local', 'readonly', 'unset', 'read', 'jq', 'hash', 'alias', 'unalias', 'compgen', 'complete',
]);

/**
 * Words that start a command this detector must look at when they appear among a wrapper's
 * operands (the wrapper is then checked as if it were that command).
 */
const HEADS = new Set(['rm', 'find', 'git', 'eval', 'exec', 'trap', 'xargs', 'env', 'command', ...SHELLS]);

/** Heads whose own check already covers every later operand. */
const SELF_SCANNING = new Set(['exec', 'xargs', 'env', 'command']);

interface Arg {
  /** The literal value, or `null` when it depends on an expansion. */
  value: string | null;
  /** The program name the value would run as (`/bin/rm` → `rm`), or null. */
  name: string | null;
  /** True when the word contains a command or process substitution. */
  substitution: boolean;
  /** True when the word is split at run time by an unquoted `$IFS` (`rm${IFS}-rf${IFS}x` is three words). */
  split?: boolean;
}

/**
 * A deleting `rm` written inside one string operand: the code of an interpreter (`awk
 * 'BEGIN{system("rm -rf x")}'`, `perl -e`, `python -c 'os.system(…)'`), a command string of a
 * program that runs one (`su -c`, `script -c`, `flock -c`, `vim -c ':!…'`), or a git setting that
 * runs a command (`git -c core.fsmonitor='rm -rf x' status`, `alias.x=!…`). It is a heuristic on
 * the text, so it errs towards asking: a commit message that mentions `rm -rf` asks too.
 */
const EMBEDDED_RM = /(?:^|[^\w./-])(?:[\w./-]*\/)?rm\s+(?:-[a-zA-Z]*\s+)*(?:-[a-zA-Z]*[rRf][a-zA-Z]*|--(?:recu|forc)[a-z]*)(?=[\s'")\];,`|&]|$)/;

/** Files that are a shell's standard input or an inherited pipe: `. /dev/stdin` runs what a pipe feeds it. */
const STDIN_FILES = /^(?:-|\/dev\/stdin|\/dev\/fd\/\d+|\/proc\/(?:self|\d+)\/fd\/\d+)$/;

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

function hasSubstitution(node: Node): boolean {
  if (node.type === 'command_substitution' || node.type === 'process_substitution') return true;
  return node.namedChildren.some((child) => child !== null && hasSubstitution(child));
}

function argOf(node: Node): Arg {
  const value = literal(node);
  // An unquoted `$IFS` inside a word splits it when it runs: the detector cannot know its words.
  const split = value === null && node.type !== 'string' && node.type !== 'raw_string' && /\$\{?IFS\b/.test(node.text);
  return { value, name: value === null ? null : basename(value), substitution: hasSubstitution(node), ...(split ? { split } : {}) };
}

function argvOf(command: Node): Arg[] | null {
  const name = command.childForFieldName('name');
  if (!name) return null;
  const argv: Arg[] = [argOf(name)];
  for (const arg of command.childrenForFieldName('argument')) {
    if (arg) argv.push(argOf(arg));
  }
  return argv;
}

function words(values: string[]): Arg[] {
  return values.map((value) => ({ value, name: basename(value), substitution: false }));
}

/**
 * Whether `value` names the long option `option` as GNU getopt_long reads it: the full name or an
 * unambiguous prefix of it (`--recur`), optionally followed by `=value`. `others` are the program's
 * other long options, which make a shared prefix ambiguous (getopt then refuses it).
 */
function longOption(value: string, option: string, others: readonly string[]): boolean {
  if (!value.startsWith('--') || value.length < 3) return false;
  const name = value.split('=')[0]!;
  if (name === option) return true;
  if (!option.startsWith(name)) return false;
  return !others.some((other) => other !== option && other.startsWith(name));
}

/** GNU rm's long options. */
const RM_LONG = ['--force', '--interactive', '--one-file-system', '--no-preserve-root', '--preserve-root', '--recursive', '--dir', '--verbose', '--help', '--version'];
/** git clean's long options (git's parse-options also takes unique prefixes). */
const GIT_CLEAN_LONG = ['--force', '--dry-run', '--quiet', '--interactive', '--exclude', '--no-force', '--no-dry-run', '--no-quiet', '--no-interactive', '--no-exclude'];

const GIT_VALUE = new Set(['-C', '-c', '--git-dir', '--work-tree', '--namespace', '--config-env', '--super-prefix', '--exec-path']);
const SHELL_VALUE = new Set(['-o', '+o', '-O', '+O', '--rcfile', '--init-file']);

function isShortCluster(value: string): boolean {
  return value.startsWith('-') && !value.startsWith('--') && value.length > 1;
}

function rmHit(args: Arg[]): boolean {
  for (const { value } of args) {
    if (value === null) continue;
    if (value === '--') return false;
    if (longOption(value, '--recursive', RM_LONG) || longOption(value, '--force', RM_LONG)) return true;
    if (isShortCluster(value) && /[rRf]/.test(value.slice(1))) return true;
  }
  return false;
}

function gitCleanHit(args: Arg[]): boolean {
  let i = 0;
  let noRequireForce = false;
  // Git's own options come before the subcommand; `-c clean.requireForce=false` makes a bare `git clean` delete.
  while (i < args.length) {
    const value = args[i]!.value;
    if (value === null || !value.startsWith('-')) break;
    if (value === '-c' && /^clean\.requireforce/i.test(args[i + 1]?.value ?? '')) noRequireForce = true;
    i += GIT_VALUE.has(value) ? 2 : 1;
  }
  if (args[i]?.value !== 'clean') return false;
  const rest = args.slice(i + 1);
  if (noRequireForce) return !rest.some((a) => a.value !== null && (a.value === '-n' || longOption(a.value, '--dry-run', GIT_CLEAN_LONG)));
  for (const { value } of rest) {
    if (value === null) continue;
    if (value === '--') return false;
    if (longOption(value, '--force', GIT_CLEAN_LONG)) return true;
    if (isShortCluster(value) && value.slice(1).includes('f')) return true;
  }
  return false;
}

/** The first operand carrying a deleting `rm` in its text (see `EMBEDDED_RM`). */
function embeddedHit(args: Arg[], text: string, span: { start: number; end: number }): DangerHit | null {
  return args.some((a) => a.value !== null && EMBEDDED_RM.test(a.value)) ? { key: 'rm_recursive_or_force', match: text, span } : null;
}

/** `env -S 'a b'` splits its string into words that continue the command line. */
function expandEnvSplit(args: Arg[]): Arg[] {
  const out: Arg[] = [];
  for (let i = 0; i < args.length; i += 1) {
    const value = args[i]!.value;
    if ((value === '-S' || (value !== null && longOption(value, '--split-string', ['--split-string', '--ignore-environment']) && !value.includes('='))) && i + 1 < args.length) {
      const split = args[i + 1]!.value;
      if (split === null) return [...out, ...args.slice(i + 1)];
      out.push(...words(split.split(/\s+/).filter((w) => w !== '')));
      i += 1;
      continue;
    }
    if (value?.startsWith('--split-string=') || (value?.startsWith('-S') && value.length > 2)) {
      const split = value.startsWith('-S') ? value.slice(2) : value.slice('--split-string='.length);
      out.push(...words(split.split(/\s+/).filter((w) => w !== '')));
      continue;
    }
    out.push(args[i]!);
  }
  return out;
}

export interface DangerDetector {
  /** The first hit in document order, or null. A syntax error is itself a hit (`unparsable`). */
  detect(command: string): DangerHit | null;
  /**
   * The same answer, worked out in slices of the host's main thread (services/host-slice) so that
   * a long command does not hold every other session while it is parsed and walked (trust-stall).
   * Detections made this way run one at a time. Optional for a host's own detector: without it the
   * runtime calls `detect`.
   */
  detectSliced?(command: string): Promise<DangerHit | null>;
}

type Span = { start: number; end: number };

/**
 * Words looked at per `detect` at most; a command that needs more (thousands of nested wrappers)
 * is not checked through and counts as `unparsable`, so the check itself stays cheap.
 */
export const MAX_CHECKS = 100_000;

/**
 * Parser time per `detect` at most, in milliseconds, a backstop behind bash's own bounds (length,
 * pipes, nesting; branch attack5b): a command that takes longer to parse is not checked through and
 * counts as `unparsable` (the user is asked), so danger detection never holds the host much longer.
 */
export const MAX_PARSE_MS = 1_000;

/** One detection's state: the words looked at, the parser time spent, whether it may yield. */
type Step = Generator<void, DangerHit | null, void>;

/**
 * One detection's walk, as a generator that yields where it may let the host run (trust-stall): in
 * a sliced detection, a parse past its slice is cancelled by tree-sitter's progress callback and
 * resumed where it stopped after the yield (the parser keeps its state until it is reset), and the
 * walk yields between nodes. A synchronous detection never yields. Parser time is counted without
 * the yields, so `MAX_PARSE_MS` bounds the parse whatever else the host does meanwhile.
 */
class DangerScan {
  private checks = 0;
  private parseMs = 0;

  constructor(
    private readonly parser: Parser,
    private readonly sliced: boolean,
  ) {}

  *run(command: string): Step {
    try {
      return yield* this.scan(command, 0, null);
    } catch (error) {
      // Nesting deep enough to overflow the walk's stack (`$(((…)))` 20,000 deep, when a caller
      // skipped bash's own bound) is as unknowable as a syntax error, with a key of its own: ask.
      if (error instanceof RangeError) return { key: 'nesting_too_deep', match: command, span: { start: 0, end: command.length } };
      throw error;
    }
  }

  /** Whether a sliced detection should let the host run now. */
  private due(): boolean {
    return this.sliced && sliceDue();
  }

  /** The parse of `script`, in slices when sliced; null when it ran past `MAX_PARSE_MS`. */
  private *parse(script: string): Generator<void, Tree | null, void> {
    for (;;) {
      const start = performance.now();
      const spent = this.parseMs;
      const tree = this.parser.parse(script, null, { progressCallback: () => spent + (performance.now() - start) > MAX_PARSE_MS || this.due() });
      this.parseMs += performance.now() - start;
      if (tree) return tree;
      // Past its time budget the parse is cancelled for good; a cancelled parse would otherwise
      // resume on the next call, with another command's text.
      if (this.parseMs > MAX_PARSE_MS) {
        this.parser.reset();
        return null;
      }
      // Cancelled for the slice: the next call with the same text resumes it.
      yield;
    }
  }

  /** `outer` is the span of the top-level command a nested literal came from. */
  private *scan(script: string, depth: number, outer: Span | null): Step {
    const tree = yield* this.parse(script);
    // No tree at all is as unknowable as a syntax error.
    if (!tree) return { key: 'unparsable', match: script, span: outer ?? { start: 0, end: script.length } };
    try {
      // bash runs every complete command before the one it cannot parse (`rm -rf build\n)`), so a
      // syntax error anywhere leaves the whole command unchecked: ask.
      if (tree.rootNode.hasError) return { key: 'unparsable', match: script, span: outer ?? { start: 0, end: script.length } };
      const stack: Node[] = [tree.rootNode];
      // Depth-first, in document order: the first hit is the leftmost.
      while (stack.length > 0) {
        if (this.due()) yield;
        const node = stack.pop()!;
        if (node.type === 'command') {
          const argv = argvOf(node);
          const span = outer ?? { start: node.startIndex, end: node.endIndex };
          const hit = argv ? yield* this.checkArgv(argv, node.text, depth, span) : null;
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

  private *checkArgv(argv: Arg[], text: string, depth: number, span: Span): Step {
    const head = argv[0];
    if (head === undefined) return null;
    // Each check looks at the words after the head at most a few times.
    this.checks += argv.length;
    if (this.checks > MAX_CHECKS) return { key: 'unparsable', match: text, span };
    const dynamic: DangerHit = { key: 'dynamic_command', match: text, span };
    if (head.value === null) {
      // `$(…)` as the program runs whatever the substitution prints. A variable (`$CMD -rf x`) is
      // not checked (reference §4.10 acc 28): it runs in the sandbox like any command.
      return head.substitution || head.split ? dynamic : null;
    }
    const name = head.name!;
    const args = argv.slice(1);
    switch (name) {
      case 'rm':
        return rmHit(args) ? { key: 'rm_recursive_or_force', match: text, span } : null;
      case 'find':
        return (yield* this.checkFind(args, text, depth, span));
      case 'git':
        return gitCleanHit(args) ? { key: 'git_clean_force', match: text, span } : embeddedHit(args, text, span);
      case 'alias': {
        // With `shopt -s expand_aliases` the value runs wherever the name is used later.
        for (const { value } of args) {
          const eq = value?.indexOf('=') ?? -1;
          if (value === null || eq <= 0) continue;
          const hit = (yield* this.nested(value.slice(eq + 1), text, depth, span));
          if (hit && hit.key !== 'unparsable') return hit;
        }
        return null;
      }
      case 'source':
      case '.': {
        // `… | . /dev/stdin` is `… | sh`; a script file is not checked, like `bash script.sh`.
        const file = args.find((a) => a.value === null || !a.value.startsWith('-') || a.value === '-');
        if (file === undefined) return null;
        if (file.value === null) return file.substitution ? dynamic : null;
        return STDIN_FILES.test(file.value) ? dynamic : null;
      }
      case 'eval': {
        if (args.length === 0) return null;
        // The joined words are what eval runs; a more specific hit inside is reported as such.
        const script = args.every((a) => a.value !== null) ? args.map((a) => a.value).join(' ') : null;
        return (script !== null ? (yield* this.nested(script, text, depth, span)) : null) ?? dynamic;
      }
      case 'exec': {
        // `exec 2>&1` only redirects; `exec cmd` replaces the shell with cmd (options like `-a name` included).
        if (args.length === 0) return null;
        return (yield* this.wrapped(args, text, depth, span)) ?? dynamic;
      }
      case 'trap': {
        const operands = args.filter((a) => a.value === null || !a.value.startsWith('-'));
        const action = operands[0];
        if (action === undefined || operands.length < 2) return null;
        if (action.value === null) return dynamic;
        return (yield* this.nested(action.value, text, depth, span));
      }
      case 'command': {
        // `command -v` / `-V` only describes a command; it does not run it.
        if (args.some((o) => o.value !== null && /^-[a-zA-Z]*[vV]/.test(o.value))) return null;
        return (yield* this.wrapped(args, text, depth, span));
      }
      case 'env':
        return (yield* this.wrapped(expandEnvSplit(args), text, depth, span));
      case 'xargs': {
        // xargs builds the command line from its input: a shell under it runs text nobody can see here.
        if (args.some((a) => a.name !== null && SHELLS.has(a.name))) return dynamic;
        return (yield* this.wrapped(args, text, depth, span));
      }
      default:
        if (SHELLS.has(name)) return (yield* this.checkShell(args, text, depth, span));
        if (HARMLESS.has(name)) return null;
        return (yield* this.wrapped(args, text, depth, span));
    }
  }

  /**
   * Any other program is treated as a possible wrapper (`sudo`, `busybox`, `setsid`, `stdbuf`,
   * `ionice`, `nice`, `timeout`, ...): every operand that names a command this detector checks is
   * checked with the words after it. Options are not parsed, so an unknown option syntax cannot
   * hide the inner command.
   */
  private *wrapped(args: Arg[], text: string, depth: number, span: Span): Step {
    for (let i = 0; i < args.length; i += 1) {
      const value = args[i]!.value;
      if (value === null) {
        // `sudo $(which rm) -rf x`: the inner program is chosen at run time; `sudo rm${IFS}-rf${IFS}x` splits at run time.
        if (args[i]!.substitution || args[i]!.split) return { key: 'dynamic_command', match: text, span };
        continue;
      }
      if (EMBEDDED_RM.test(value)) return { key: 'rm_recursive_or_force', match: text, span };
      const name = args[i]!.name!;
      if (!HEADS.has(name)) continue;
      const hit = (yield* this.checkArgv(args.slice(i), text, depth, span));
      // These check every operand after them themselves; looking again would only repeat that work.
      if (hit || SELF_SCANNING.has(name)) return hit;
    }
    return null;
  }

  /** `-delete`, or `-exec`/`-execdir`/`-ok`/`-okdir` running `rm` or any other dangerous command. */
  private *checkFind(args: Arg[], text: string, depth: number, span: Span): Step {
    for (let i = 0; i < args.length; i += 1) {
      const value = args[i]!.value;
      if (value === '-delete') return { key: 'find_delete', match: text, span };
      if (value !== '-exec' && value !== '-execdir' && value !== '-ok' && value !== '-okdir') continue;
      let end = i + 1;
      while (end < args.length && args[end]!.value !== ';' && args[end]!.value !== '+') end += 1;
      const command = args.slice(i + 1, end);
      const program = command[0];
      if (program === undefined) continue;
      if (program.name === 'rm') return { key: 'find_delete', match: text, span };
      const hit = (yield* this.checkArgv(command, text, depth, span));
      if (hit) return hit;
      i = end;
    }
    return null;
  }

  private *checkShell(args: Arg[], text: string, depth: number, span: Span): Step {
    const dynamic: DangerHit = { key: 'dynamic_command', match: text, span };
    let readsString = false;
    for (let i = 0; i < args.length; i += 1) {
      const arg = args[i]!;
      const value = arg.value;
      if (value === null) {
        // `bash -c "$(curl …)"`, `bash <(curl …)`: the script is produced at run time. A plain
        // variable (`bash -c "$SCRIPT"`) is not checked, like a variable program name.
        return arg.substitution ? dynamic : null;
      }
      if (value === '--' || value === '-') {
        const script = args[i + 1];
        if (!readsString) return script === undefined || value === '-' ? dynamic : script.substitution ? dynamic : null;
        if (script === undefined) return null;
        if (script.value === null) return script.substitution ? dynamic : null;
        return (yield* this.nested(script.value, text, depth, span));
      }
      if ((value.startsWith('-') || value.startsWith('+')) && value.length > 1) {
        if (SHELL_VALUE.has(value)) {
          i += 1;
          continue;
        }
        if (!value.startsWith('--') && value.slice(1).includes('c')) readsString = true;
        // `-s` reads the script from stdin even when operands follow.
        if (!value.startsWith('--') && !readsString && value.slice(1).includes('s')) return dynamic;
        continue;
      }
      // The first operand: the command string under -c, otherwise a script file (not checked).
      return readsString ? (yield* this.nested(value, text, depth, span)) : null;
    }
    // No operand: the shell runs whatever arrives on stdin (`curl … | sh`, `sh <<< "…"`).
    return readsString ? null : dynamic;
  }

  private *nested(script: string, text: string, depth: number, span: Span): Step {
    if (depth + 1 > MAX_NESTING) return { key: 'nesting_too_deep', match: text, span };
    return (yield* this.scan(script, depth + 1, span));
  }
}

/** The detector: a synchronous detection on one parser, sliced ones one at a time on another. */
class TreeSitterDangerDetector implements DangerDetector {
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly parser: Parser,
    private readonly slicedParser: Parser,
  ) {}

  detect(command: string): DangerHit | null {
    const steps = new DangerScan(this.parser, false).run(command);
    for (;;) {
      const step = steps.next();
      if (step.done) return step.value;
    }
  }

  detectSliced(command: string): Promise<DangerHit | null> {
    const run = this.queue.then(async () => {
      const steps = new DangerScan(this.slicedParser, true).run(command);
      for (;;) {
        const step = steps.next();
        if (step.done) return step.value;
        await nextSlice();
      }
    });
    this.queue = run.catch(() => undefined);
    return run;
  }
}

let loading: Promise<Required<DangerDetector>> | null = null;

/** Loads the bash grammar once per process; resolves to a synchronous detector. */
export function loadDangerDetector(): Promise<Required<DangerDetector>> {
  loading ??= (async () => {
    const require = createRequire(import.meta.url);
    await Parser.init();
    const language = await Language.load(require.resolve('tree-sitter-bash/tree-sitter-bash.wasm'));
    const parser = new Parser();
    parser.setLanguage(language);
    const slicedParser = new Parser();
    slicedParser.setLanguage(language);
    return new TreeSitterDangerDetector(parser, slicedParser);
  })();
  loading.catch(() => {
    loading = null;
  });
  return loading;
}
