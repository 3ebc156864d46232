/**
 * A first run as the README tells it (issue 17): every command answers `--help` and `--version`
 * with exit 0 and does nothing else; `openwork` put on PATH the way the README says
 * (`npm i -g .`, here into a temporary prefix) runs from any directory; and the README's list of
 * the tools `openwork chat` offers the model is exactly what the model gets.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, readdir, realpath, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, cleanEnv, ensureBuilt, runCli } from '../../support/cli-process.js';
import { createTestDatabase } from '../../support/databases.js';
import { startFakeOpenAI, type FakeOpenAIServer } from '../../support/fake-openai-server.js';

const run = promisify(execFile);
const VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;

let dir: string;

beforeAll(async () => {
  ensureBuilt();
  dir = await mkdtemp(join(tmpdir(), 'openwork-first-run-'));
}, 180_000);
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function openwork(args: string[], cwd = dir) {
  const child = runCli(args, { cwd });
  child.child.stdin.end();
  const code = await child.exit;
  return { code, stdout: child.stdout, stderr: child.stderr };
}

describe('every command answers --help and --version', { timeout: 120_000 }, () => {
  it('--version, -V and `version`, alone or after any command, print the version and exit 0', async () => {
    for (const args of [['--version'], ['-V'], ['version'], ['demo', '--version'], ['chat', '--version'], ['chat', 'a prompt', '-V'], ['sessions', '--version']]) {
      const out = await openwork(args);
      expect([args.join(' '), out.code, out.stdout, out.stderr]).toEqual([args.join(' '), 0, `openwork ${VERSION}\n`, '']);
    }
  });

  it('--help, -h and `help [command]` print the usage of that command and exit 0, starting nothing', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['--help'], /^usage: openwork <command> \[options\]\n/],
      [['-h'], /^usage: openwork <command> \[options\]\n/],
      [['help'], /^usage: openwork <command> \[options\]\n/],
      [['help', 'chat'], /^usage: openwork chat \[prompt\] \[options\]\n/],
      [['demo', '--help'], /^usage: openwork demo \[--yes\]\n/],
      [['chat', '--help'], /^usage: openwork chat \[prompt\] \[options\]\n[\s\S]*--base-url <url>/],
      [['chat', '--model', 'x', '-h'], /^usage: openwork chat /],
      [['sessions', '--help'], /^usage: openwork sessions \[options\]\n[\s\S]*--limit <n>/],
    ];
    for (const [args, usage] of cases) {
      const out = await openwork(args);
      expect([args.join(' '), out.code, out.stderr]).toEqual([args.join(' '), 0, '']);
      expect(out.stdout, args.join(' ')).toMatch(usage);
    }
    // No key was asked for, no demo ran, no store was opened.
    expect(existsSync(join(dir, '.openwork'))).toBe(false);
    // Without a command it is still a usage error; an unknown command stays one, --help or not.
    expect((await openwork([])).code).toBe(1);
    const unknown = await openwork(['bogus', '--help']);
    expect([unknown.code, unknown.stderr.split('\n')[0]]).toEqual([2, 'openwork: unknown command "bogus"']);
  });
});

describe('openwork on PATH, as the README says', { timeout: 180_000 }, () => {
  it('`npm i -g .` into a prefix puts `openwork` on PATH; it runs from any directory', async () => {
    const prefix = await mkdtemp(join(tmpdir(), 'openwork-prefix-'));
    try {
      // --ignore-scripts --offline: a local folder is linked, not fetched (dist/ is built above).
      await run('npm', ['install', '--global', '--prefix', prefix, '--ignore-scripts', '--offline', '--no-audit', '--no-fund', ROOT], { cwd: dir, timeout: 120_000 });
      expect(await readdir(join(prefix, 'bin'))).toEqual(['openwork']);
      expect(await realpath(join(prefix, 'bin', 'openwork'))).toBe(await realpath(join(ROOT, 'bin', 'openwork.js')));
      const env = cleanEnv({ PATH: `${join(prefix, 'bin')}:${process.env.PATH ?? ''}` });
      const version = await run('openwork', ['--version'], { cwd: dir, env });
      expect(version.stdout).toBe(`openwork ${VERSION}\n`);
      const help = await run('openwork', ['chat', '--help'], { cwd: dir, env });
      expect(help.stdout).toMatch(/^usage: openwork chat /);
    } finally {
      await rm(prefix, { recursive: true, force: true });
    }
  });
});

/** The tool names of the README's table under "## The `openwork` command". */
function readmeCliTools(): string[] {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const start = readme.indexOf('## The `openwork` command');
  const section = readme.slice(start, readme.indexOf('\n## ', start + 1));
  return [...section.matchAll(/^\| `([a-z_]+)` \|/gm)].map((m) => m[1]!);
}

describe("the README's CLI tools are the model's", { timeout: 120_000 }, () => {
  let server: FakeOpenAIServer;
  let databaseUrl: string;
  beforeAll(async () => {
    server = await startFakeOpenAI();
    // The suite's Postgres server: a child process starts on it much faster than on PGlite.
    databaseUrl = await createTestDatabase();
  });
  afterAll(() => server.close());

  it('`openwork chat` offers the model exactly the tools the README lists', async () => {
    server.script({ text: 'hi' });
    const out = await openwork(['chat', '--base-url', server.url, '--model', 'fake-model', '--database-url', databaseUrl, 'hello']);
    expect(out.code, out.stderr).toBe(0);
    const offered = (server.requests[0]!.body.tools as Array<{ function: { name: string } }>).map((t) => t.function.name);
    const documented = readmeCliTools();
    expect(documented.length).toBeGreaterThan(0);
    expect([...offered].sort()).toEqual([...documented].sort());
  });
});
