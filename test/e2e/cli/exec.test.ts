/**
 * `openwork exec`, the headless one-turn command, as a spawned process against the fake OpenAI
 * server: the answer on stdout, JSON Lines with --json, the three --approve policies, and the exit
 * codes 0 (completed), 1 (failed), 130 (SIGINT), 2 (cannot start).
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, type TestContext } from 'vitest';
import { prepareToolRuntime, type ToolRuntime } from '../../../src/services/tools/tool-runtime.js';
import { requireSandbox } from '../../support/tool-env.js';
import { startFakeOpenAI, type FakeOpenAIServer } from '../../support/fake-openai-server.js';
import { spawn } from 'node:child_process';
import { ROOT, cleanEnv, ensureBuilt, runCli, type CliRun } from '../../support/cli-process.js';
import { createTestDatabase } from '../../support/databases.js';

let server: FakeOpenAIServer;
let databaseUrl: string;
let dir: string | undefined;
const running: CliRun[] = [];
/** Whether bubblewrap works here: escalation cards (and so the --approve card tests) need it. */
let sandboxProbe: ToolRuntime;

beforeAll(async () => {
  const probeHome = await mkdtemp(join(tmpdir(), 'openwork-exec-probe-'));
  sandboxProbe = await prepareToolRuntime({ home: probeHome, tempDirs: [probeHome] });
  ensureBuilt();
  server = await startFakeOpenAI();
  databaseUrl = await createTestDatabase();
}, 180_000);
afterEach(async () => {
  for (const run of running.splice(0)) {
    if (run.child.exitCode === null) run.child.kill('SIGKILL');
  }
  const leftover = { unexpected: server.unexpected.length, remaining: server.remaining };
  server.reset();
  if (dir) await rm(dir, { recursive: true, force: true });
  expect(leftover).toEqual({ unexpected: 0, remaining: 0 });
});
afterAll(async () => {
  await server.close();
});

async function workspace(): Promise<string> {
  dir = await mkdtemp(join(tmpdir(), 'openwork-exec-'));
  return dir;
}

function exec(cwd: string, ...args: string[]): CliRun {
  const run = runCli(['exec', '--base-url', server.url, '--model', 'fake-model', '--database-url', databaseUrl, ...args], { cwd });
  running.push(run);
  return run;
}

/** A call that writes `.env` with escalation (sensitive: it always asks). */
function escalatedEnvWrite(cwd: string, content: string, callId: string) {
  return {
    name: 'write',
    callId,
    arguments: {
      path: '.env',
      content,
      sandboxPermissions: { paths: [{ path: join(cwd, '.env'), access: 'write', scope: 'exact' }] },
      justification: 'The user asked to set the token in .env.',
    },
  };
}

/** `openwork exec` on a pseudo-terminal (`script`): what is written to the child's stdin is typed on it. */
function onTerminal(cwd: string, args: string[]) {
  const command = [process.execPath, join(ROOT, 'bin', 'openwork.js'), 'exec', '--base-url', server.url, '--model', 'fake-model', '--database-url', databaseUrl, ...args]
    .map((a) => `'${a.replace(/'/g, `'\\''`)}'`)
    .join(' ');
  const child = spawn('script', ['-qfec', command, '/dev/null'], { cwd, env: cleanEnv({ TERM: 'dumb' }), stdio: 'pipe' });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
  const exit = new Promise<number | null>((resolve) => child.on('close', resolve));
  return { child, exit, out: () => out };
}

describe('openwork exec', { timeout: 120_000 }, () => {
  it('prints only the answer on stdout and exits 0', async () => {
    const cwd = await workspace();
    server.script({ text: 'The answer is 42.', chunk: 4 });
    const run = exec(cwd, 'what is the answer?');
    run.child.stdin.end();
    expect(await run.exit).toBe(0);
    expect(run.stdout).toBe('The answer is 42.\n');
    expect(run.stderr).toBe('');
    expect(server.requests).toHaveLength(1);
  });

  it('--json prints the session updates as JSON Lines, ending with the completed turn', async () => {
    const cwd = await workspace();
    server.script({ text: 'Streamed.', chunk: 3 });
    const run = exec(cwd, '--json', 'stream it');
    run.child.stdin.end();
    expect(await run.exit).toBe(0);
    const lines = run.stdout.trimEnd().split('\n').map((l) => JSON.parse(l) as { sequence: number; update: { type: string; outcome?: unknown } });
    expect(lines.length).toBeGreaterThan(2);
    const sequences = lines.map((l) => l.sequence);
    expect(sequences).toEqual([...sequences].sort((a, b) => a - b));
    const types = lines.map((l) => l.update.type);
    expect(types).toContain('turn_started');
    expect(lines.at(-1)!.update).toMatchObject({ type: 'turn_finished', outcome: { status: 'completed', finalText: 'Streamed.' } });
  });

  it('--approve never (the default) denies the card: the file is untouched and the exit code is 1', async (ctx: TestContext) => {
    // Escalation cards exist only where the sandbox works: skipped with the reason elsewhere.
    requireSandbox(ctx, sandboxProbe);
    const cwd = await workspace();
    await writeFile(join(cwd, '.env'), 'TOKEN=old\n');
    server.script({ toolCalls: [{ name: 'read', arguments: { path: '.env' }, callId: 'rd' }, escalatedEnvWrite(cwd, 'TOKEN=new\n', 'w')] });
    const run = exec(cwd, 'set the token');
    run.child.stdin.end();
    expect(await run.exit).toBe(1);
    expect(run.stderr).toContain('permission for write: deny (--approve never)');
    expect(run.stderr).toMatch(/^openwork: the turn failed \(permission_denied\): .+$/m);
    expect(await readFile(join(cwd, '.env'), 'utf8')).toBe('TOKEN=old\n');
  });

  it('--approve full-auto allows the card once: the file is written and the exit code is 0', async (ctx: TestContext) => {
    // Escalation cards exist only where the sandbox works: skipped with the reason elsewhere.
    requireSandbox(ctx, sandboxProbe);
    const cwd = await workspace();
    await writeFile(join(cwd, '.env'), 'TOKEN=old\n');
    server.script(
      { toolCalls: [{ name: 'read', arguments: { path: '.env' }, callId: 'rd' }, escalatedEnvWrite(cwd, 'TOKEN=new\n', 'w')] },
      { text: 'Done.' },
    );
    const run = exec(cwd, '--approve', 'full-auto', 'set the token');
    run.child.stdin.end();
    expect(await run.exit).toBe(0);
    expect(run.stderr).toContain('permission for write: allow_once (--approve full-auto)');
    expect(run.stdout).toBe('Done.\n');
    expect(await readFile(join(cwd, '.env'), 'utf8')).toBe('TOKEN=new\n');
  });

  it('--approve on-request without a terminal is one clear line, exit 2, and no model call', async () => {
    const cwd = await workspace();
    const run = exec(cwd, '--approve', 'on-request', 'set the token');
    run.child.stdin.end();
    expect(await run.exit).toBe(2);
    expect(run.stderr).toBe('openwork: --approve on-request asks on the terminal, but stdin is not a terminal; use --approve never or --approve full-auto\n');
    expect(server.requests).toHaveLength(0);
  });

  it('--approve on-request asks on the terminal: another answer asks again, "y" allows once', async (ctx: TestContext) => {
    // Escalation cards exist only where the sandbox works: skipped with the reason elsewhere.
    requireSandbox(ctx, sandboxProbe);
    const cwd = await workspace();
    await writeFile(join(cwd, '.env'), 'TOKEN=old\n');
    server.script(
      { toolCalls: [{ name: 'read', arguments: { path: '.env' }, callId: 'rd' }, escalatedEnvWrite(cwd, 'TOKEN=new\n', 'w')] },
      { text: 'Written.' },
    );
    const tty = onTerminal(cwd, ['--approve', 'on-request', 'set the token']);
    const asked = (run: typeof tty) => run.out().match(/allow once \[y\] \/ deny \[n\]\? /g)?.length ?? 0;
    try {
      await expect.poll(() => asked(tty), { timeout: 60_000 }).toBe(1);
      expect(tty.out()).toContain(`? write asks: this once, additionally allow writing ${join(cwd, '.env')} (file)`);
      tty.child.stdin.write('maybe\r');
      await expect.poll(() => asked(tty), { timeout: 60_000 }).toBe(2);
      expect(await readFile(join(cwd, '.env'), 'utf8')).toBe('TOKEN=old\n');
      tty.child.stdin.write('y\r');
      expect(await tty.exit).toBe(0);
      expect(tty.out()).toContain('permission for write: allow_once (--approve on-request)');
      expect(tty.out()).toContain('Written.');
      expect(await readFile(join(cwd, '.env'), 'utf8')).toBe('TOKEN=new\n');
    } finally {
      if (tty.child.exitCode === null) tty.child.kill('SIGKILL');
    }
  });

  it('SIGINT during the turn cancels it and exits 130', async () => {
    const cwd = await workspace();
    server.script({ text: 'I will talk for a very long time about everything', chunk: 2, hangAfterEvents: 8 });
    const abortsBefore = server.clientAborts;
    const run = exec(cwd, '--json', 'talk forever');
    await run.waitFor(/"text_delta"|"delta"/);
    run.child.kill('SIGINT');
    expect(await run.exit).toBe(130);
    expect(run.stdout).toMatch(/"status":"cancelled"/);
    expect(server.clientAborts).toBeGreaterThan(abortsBefore);
  });

  it('a failed turn exits 1 with one line on stderr', async () => {
    const cwd = await workspace();
    server.script({ status: 400, body: { error: { message: 'bad things', type: 'invalid_request_error' } } });
    const run = exec(cwd, 'fail please');
    run.child.stdin.end();
    expect(await run.exit).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(/^openwork: the turn failed \(\w+\): .+\n$/);
  });

  it('--help answers like the other commands; a bad --approve or a missing prompt is a usage error', async () => {
    const cwd = await workspace();
    const help = runCli(['exec', '--help'], { cwd });
    running.push(help);
    expect(await help.exit).toBe(0);
    expect(help.stdout).toMatch(/^usage: openwork exec "<prompt>" \[--json\] \[--approve never\|on-request\|full-auto\]/);
    const bad = runCli(['exec', '--approve', 'sometimes', 'hi'], { cwd });
    running.push(bad);
    expect(await bad.exit).toBe(2);
    expect(bad.stderr).toBe('openwork: --approve must be "never", "on-request" or "full-auto", not "sometimes" (see openwork --help)\n');
    const empty = runCli(['exec'], { cwd });
    running.push(empty);
    expect(await empty.exit).toBe(2);
    expect(empty.stderr).toBe('openwork: exec needs a prompt: openwork exec "<prompt>" (see openwork --help)\n');
  });
});
