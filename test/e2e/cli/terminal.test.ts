/**
 * The terminal side of `openwork chat` (issue 17, "The terminal"), in real processes against the
 * fake OpenAI server (real `openai` client, real wire format) and a real store: on a pseudo-terminal
 * (`script`) the spinner, Markdown, the coloured diff and the usage line; piped, the same run in
 * plain text; the slash commands /mode /compact /rewind /status; `--session` restoring the model,
 * API and base URL with the last exchanges; sessions without a turn left out; the config files and
 * `openwork config`; the demo asking its card the way chat does.
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFakeOpenAI, type FakeOpenAIServer, type RecordedRequest } from '../../support/fake-openai-server.js';
import { ROOT, cleanEnv, ensureBuilt, runCli, type CliRun } from '../../support/cli-process.js';
import { createTestDatabase } from '../../support/databases.js';
import { validSummary } from '../../support/summaries.js';

let server: FakeOpenAIServer;
let databaseUrl: string;
const dirs: string[] = [];
const running: Array<{ child: { exitCode: number | null; kill(signal?: NodeJS.Signals): boolean } }> = [];

beforeAll(async () => {
  ensureBuilt();
  server = await startFakeOpenAI();
  databaseUrl = await createTestDatabase();
}, 180_000);
afterEach(async () => {
  for (const run of running.splice(0)) if (run.child.exitCode === null) run.child.kill('SIGKILL');
  const leftover = { unexpected: server.unexpected.length, remaining: server.remaining };
  server.reset();
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
  expect(leftover).toEqual({ unexpected: 0, remaining: 0 });
});
afterAll(async () => {
  await server.close();
});

async function workspace(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'openwork-term-'));
  dirs.push(dir);
  return dir;
}

const ESC = '\u001b[';
const SPINNER_FRAME = /[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] (waiting for the model|retry in \d+s|writing the answer|running \w+)[^\r\n]* · \d+\.\ds/;

/** A command on a pseudo-terminal 100x30 with colour (no NO_COLOR): what is written to stdin is typed. */
function onTerminal(cwd: string, args: string[], env: NodeJS.ProcessEnv = {}) {
  const quoted = [process.execPath, join(ROOT, 'bin', 'openwork.js'), ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
  const base = cleanEnv({ TERM: 'xterm-256color' });
  delete base.NO_COLOR;
  Object.assign(base, env);
  const child = spawn('script', ['-qfec', `stty rows 30 cols 100; exec ${quoted}`, '/dev/null'], { cwd, env: base, stdio: 'pipe' });
  running.push({ child });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
  const exit = new Promise<number | null>((resolve) => child.on('close', resolve));
  return {
    child,
    exit,
    out: () => out,
    waitFor: (pattern: RegExp) => expect.poll(() => out, { timeout: 60_000, interval: 50 }).toMatch(pattern),
    type: (line: string) => child.stdin.write(`${line}\r`),
  };
}

function chat(cwd: string, args: string[], env?: NodeJS.ProcessEnv): CliRun {
  const run = runCli(['chat', '--database-url', databaseUrl, ...args], { cwd, ...(env ? { env } : {}) });
  running.push(run);
  return run;
}

/** A 60-line file, and the content the model writes over it: every other line changed (91 diff lines). */
const OLD_LINES = Array.from({ length: 60 }, (_, i) => `line ${i + 1}`).join('\n') + '\n';
const NEW_LINES = Array.from({ length: 60 }, (_, i) => (i % 2 === 0 ? `LINE ${i + 1}` : `line ${i + 1}`)).join('\n') + '\n';
const MARKDOWN = '# Plan\n\nSome **bold** words.\n\n```js\nconst answer = 42;\n```\n\nDone.';

/** The model's script for one turn that rewrites big.txt, then one that answers in Markdown. */
function scriptRewriteThenMarkdown() {
  server.script(
    {
      toolCalls: [{ name: 'read', arguments: { path: 'big.txt' }, callId: 'rd' }, { name: 'write', arguments: { path: 'big.txt', content: NEW_LINES }, callId: 'wr' }],
      usage: { inputTokens: 300, outputTokens: 20, cachedInputTokens: 100, reasoningTokens: 0 },
    },
    (request: RecordedRequest) => {
      const result = (request.body.messages as Array<{ tool_call_id?: string; content: string }>).find((m) => m.tool_call_id === 'wr');
      expect(result?.content).toMatch(/^Wrote /);
      return { text: 'Rewritten.', usage: { inputTokens: 300, outputTokens: 20, cachedInputTokens: 100, reasoningTokens: 0 } };
    },
    { status: 429, headers: { 'retry-after-ms': '1500' } },
    { text: MARKDOWN, chunk: 6, delayMs: 20, usage: { inputTokens: 120, outputTokens: 30, cachedInputTokens: 64, reasoningTokens: 8 } },
  );
}

describe('openwork chat on a terminal and piped', { timeout: 120_000 }, () => {
  it('on a TTY: spinner frames (retry in N s included), Markdown rendered, a coloured truncated diff, the usage line', async () => {
    const cwd = await workspace();
    await writeFile(join(cwd, 'big.txt'), OLD_LINES);
    scriptRewriteThenMarkdown();
    const tty = onTerminal(cwd, ['chat', '--base-url', server.url, '--model', 'fake-model', '--database-url', databaseUrl]);
    // readline on a real terminal follows its prompt with cursor codes.
    await tty.waitFor(/Ctrl-D\) exits\.[\s\S]*> /);
    tty.type('rewrite big.txt');
    await tty.waitFor(/Rewritten\.[\s\S]*tokens 600 in/);
    tty.type('and explain');
    await tty.waitFor(/Done\.[\s\S]*tokens 120 in/);
    tty.child.stdin.write('\u0004');
    expect(await tty.exit).toBe(0);
    const out = tty.out();
    expect(await readFile(join(cwd, 'big.txt'), 'utf8')).toBe(NEW_LINES);

    // The spinner: frames with what the turn waits for and the elapsed time, the retry counting down.
    expect(out).toMatch(SPINNER_FRAME);
    expect(out).toMatch(/retry in [12]s \(attempt 2\)/);
    // Every frame is cleared before output: what follows a frame is the next frame or a clear (both
    // start with a carriage return), never text on the frame's line.
    expect(out).not.toMatch(/· \d+\.\ds\u001b\[22m[^\r]/);
    expect(out).toMatch(/· \d+\.\ds\u001b\[22m\r\u001b\[2K(\u001b\[0m)?Rewritten\./);

    // Markdown: no raw markers, bold as bold, the code block highlighted.
    expect(out).not.toContain('**bold**');
    expect(out).not.toContain('```');
    expect(out).toContain(`${ESC}1mbold${ESC}22m`);
    expect(out).toMatch(new RegExp(`\\u001b\\[\\d+mconst\\u001b\\[\\d+m answer`));

    // The diff: header, red and green lines, cut at a screenful (30 rows - 6) with the rest counted.
    expect(out).toContain('changed big.txt (+30 -30)');
    expect(out).toContain(`${ESC}31m-line 1${ESC}39m`);
    expect(out).toContain(`${ESC}32m+LINE 1${ESC}39m`);
    expect(out).toMatch(/… \d+ more lines/);
    // 24 diff lines shown (the hunk header and 23 more), the other 67 counted.
    expect(out).toContain('… 67 more lines');
    expect(out).not.toContain('+LINE 59');

    // The usage line of each turn, dim: two model calls and two tool calls, then the Markdown turn.
    expect(out).toMatch(new RegExp(`${ESC.replace('[', '\\[')}2mtokens 600 in \\(200 cached\\) · 40 out \\(0 reasoning\\) · 2 model calls · 2 tool calls · \\d+\\.\\ds`));
    expect(out).toContain('tokens 120 in (64 cached) · 30 out (8 reasoning) · 1 model call · 0 tool calls');
  });

  it('piped: no spinner, raw Markdown, a plain diff, the same usage line', async () => {
    const cwd = await workspace();
    await writeFile(join(cwd, 'big.txt'), OLD_LINES);
    scriptRewriteThenMarkdown();
    const run = chat(cwd, ['--base-url', server.url, '--model', 'fake-model', 'rewrite big.txt']);
    await run.waitFor(/tokens 600 in/);
    run.type('and explain');
    run.child.stdin.end();
    expect(await run.exit).toBe(0);
    expect(run.stdout).not.toContain('\u001b');
    expect(run.stdout).not.toContain('\r');
    expect(run.stdout).not.toMatch(/waiting for the model/);
    expect(run.stdout).toContain(MARKDOWN);
    expect(run.stdout).toContain('changed big.txt (+30 -30)\n  @@ -1,60 +1,60 @@\n  -line 1\n  +LINE 1\n   line 2\n  -line 3\n');
    // Piped there is no screen height: 40 diff lines, then the count of the rest (91 lines in all).
    expect(run.stdout).toContain('  … 51 more lines\n');
    expect(run.stdout).toMatch(/^tokens 600 in \(200 cached\) · 40 out \(0 reasoning\) · 2 model calls · 2 tool calls · \d+\.\ds$/m);
    expect(run.stdout).toMatch(/^tokens 120 in \(64 cached\) · 30 out \(8 reasoning\) · 1 model call · 0 tool calls · \d+\.\ds$/m);
  });
});

describe('slash commands /mode /compact /rewind /status', { timeout: 120_000 }, () => {
  it('show and set the mode, compact through the model, list and rewind checkpoints, show usage and context fill', async () => {
    const cwd = await workspace();
    server.script(
      { text: 'First answer.', usage: { inputTokens: 50, outputTokens: 5, cachedInputTokens: 0, reasoningTokens: 0 } },
      (request) => {
        // The manual compaction's summary request: no tools, the summary instruction last.
        expect(request.body.tools ?? []).toEqual([]);
        expect(JSON.stringify(request.body.messages)).toContain('durable continuation summary');
        return { text: validSummary('the first prompt') };
      },
    );
    const run = chat(cwd, ['--base-url', server.url, '--model', 'fake-model', '--context-window', '100000', 'first prompt']);
    await run.waitFor(/First answer\.[\s\S]*tokens 50 in/);
    run.type('/help');
    await run.waitFor(/\/rewind \[n\|checkpoint-id\] +list the checkpoints/);
    expect(run.stdout).toMatch(/^ {2}\/mode \[auto\|accept_edits\] +show the permission mode, or set it/m);
    expect(run.stdout).toMatch(/^ {2}\/compact +compact the conversation now/m);
    run.type('/mode');
    await run.waitFor(/^mode auto \(/m);
    run.type('/mode accept_edits');
    await run.waitFor(/^mode accept_edits \(from the next tool call\)$/m);
    run.type('/mode sometimes');
    await run.waitFor(/\/mode takes auto or accept_edits, not "sometimes"/);
    run.type('/status');
    await run.waitFor(/^context: .+$/m);
    expect(run.stdout).toMatch(/· mode accept_edits$/m);
    expect(run.stdout).toContain('usage so far: 1 turn(s), 50 tokens in (0 cached), 5 out (0 reasoning), 1 model call(s), 0 tool call(s)');
    expect(run.stdout).toMatch(/^context: about \d+ tokens in the next request; \d+% of the compaction line \(\d+ of a 100000-token window\)$/m);
    run.type('/rewind');
    await run.waitFor(/no checkpoints yet \(\/compact writes one\)/);
    run.type('/compact');
    await run.waitFor(/^compacted: \d+ → \d+ tokens \(checkpoint (\S+); \/rewind lists the checkpoints\)$/m);
    const checkpoint = /checkpoint (\S+);/.exec(run.stdout)![1]!;
    run.type('/rewind');
    await run.waitFor(new RegExp(`^ {2}1\\. ${checkpoint} {2}manual {2}through message \\d+`, 'm'));
    run.type('/rewind 7');
    await run.waitFor(/no checkpoint 7 \(there is 1; \/rewind lists them\)/);
    run.type('/rewind 1');
    await run.waitFor(new RegExp(`^rewound to ${checkpoint}: \\d+ → \\d+ tokens$`, 'm'));
    run.child.stdin.end();
    expect(await run.exit).toBe(0);
    // The mode was stored with the session: /mode went through setPermissionMode.
    expect(server.requests).toHaveLength(2);
  });
});

describe('--session and the session list', { timeout: 120_000 }, () => {
  it('--session restores the model, API and base URL of the session, shows the last exchanges; sessions without a turn are not listed', async () => {
    const cwd = await workspace();
    server.script({ text: 'Hello over Responses.' });
    const first = chat(cwd, ['--base-url', server.url, '--model', 'fake-model', '--api', 'responses', 'say hello']);
    first.child.stdin.end();
    expect(await first.exit).toBe(0);
    const sessionId = /session (ses_\S+)/.exec(first.stdout)![1]!;
    // A chat that ends before any turn leaves a session with no turn: not worth listing.
    const empty = chat(cwd, ['--base-url', server.url, '--model', 'fake-model']);
    empty.child.stdin.end();
    expect(await empty.exit).toBe(0);
    const emptyId = /session (ses_\S+)/.exec(empty.stdout)![1]!;

    server.script((request) => {
      expect(request.path).toBe('/v1/responses');
      expect(request.body.model).toBe('fake-model');
      return { text: 'Hello again.' };
    });
    // No --base-url, --model or --api, and the environment names another model: the session's win.
    const second = chat(cwd, ['--session', sessionId], cleanEnv({ OPENAI_MODEL: 'other-model' }));
    await second.waitFor(/^ {2}Hello over Responses\.$/m);
    second.type('and again');
    second.type('/sessions');
    await second.waitFor(/continue one with/);
    second.child.stdin.end();
    expect(await second.exit).toBe(0);
    expect(second.stdout).toContain(`model openai/fake-model over responses at ${server.url}`);
    expect(second.stdout).toMatch(/^last exchange:\n> say hello\n {2}Hello over Responses\.$/m);
    expect(second.stdout).toContain('Hello again.');
    expect(second.stdout).toMatch(new RegExp(`^${sessionId} .+say hello \\(this one\\)$`, 'm'));
    expect(second.stdout).not.toContain(emptyId);

    const list = runCli(['sessions', '--database-url', databaseUrl], { cwd });
    running.push(list);
    expect(await list.exit).toBe(0);
    expect(list.stdout).toContain(sessionId);
    expect(list.stdout).not.toContain(emptyId);

    // A flag given now overrides what the session stored.
    server.script((request) => {
      expect(request.path).toBe('/v1/chat/completions');
      return { text: 'Over chat now.' };
    });
    const third = chat(cwd, ['--session', sessionId, '--api', 'chat', 'once more']);
    third.child.stdin.end();
    expect(await third.exit).toBe(0);
    expect(third.stdout).toContain(`model openai/fake-model over chat at ${server.url}`);
  });
});

describe('config files and openwork config', { timeout: 60_000 }, () => {
  it('precedence flag > env > ./.openwork/config.json > ~/.openwork/config.json > default, each value with its source', async () => {
    const cwd = await workspace();
    const home = join(cwd, 'home');
    const project = join(cwd, 'project');
    await mkdir(join(home, '.openwork'), { recursive: true });
    await mkdir(join(project, '.openwork'), { recursive: true });
    const userFile = join(home, '.openwork', 'config.json');
    const projectFile = join(project, '.openwork', 'config.json');
    await writeFile(userFile, JSON.stringify({ model: 'user-model', api: 'chat', mode: 'accept_edits', contextWindow: 64000, mcpServers: { fs: { command: 'mcp-server-filesystem', args: ['.'] }, web: { url: 'http://127.0.0.1:9/mcp' } } }));
    await writeFile(projectFile, JSON.stringify({ model: 'project-model', baseUrl: 'http://127.0.0.1:1/v1', mcpServers: { fs: { command: 'mcp-server-filesystem', args: ['src'] } } }));
    const run = runCli(['config', '--api', 'responses'], { cwd: project, env: cleanEnv({ HOME: home, OPENWORK_MODE: 'auto' }) });
    running.push(run);
    expect(await run.exit).toBe(0);
    expect(run.stderr).toBe('');
    const row = (key: string, value: string, source: string) => new RegExp(`^ {2}${key} +${value.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')} +${source.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}$`, 'm');
    expect(run.stdout).toContain(`  ${userFile} (read)`);
    expect(run.stdout).toContain(`  ${projectFile} (read)`);
    expect(run.stdout).toMatch(row('model', 'project-model', projectFile));
    expect(run.stdout).toMatch(row('api', 'responses', 'flag --api'));
    expect(run.stdout).toMatch(row('baseUrl', 'http://127.0.0.1:1/v1', projectFile));
    expect(run.stdout).toMatch(row('mode', 'auto', 'env OPENWORK_MODE'));
    expect(run.stdout).toMatch(row('contextWindow', '64000', userFile));
    expect(run.stdout).toMatch(row('store', 'pglite .openwork/db', 'default'));
    expect(run.stdout).toMatch(row('  fs', 'mcp-server-filesystem src', projectFile));
    expect(run.stdout).toMatch(row('  web', 'http://127.0.0.1:9/mcp', userFile));

    // Nothing set anywhere: every value is the default.
    const bare = runCli(['config'], { cwd, env: cleanEnv({ HOME: join(cwd, 'nohome') }) });
    running.push(bare);
    expect(await bare.exit).toBe(0);
    expect(bare.stdout).toMatch(row('model', 'gpt-5-mini', 'default'));
    expect(bare.stdout).toMatch(row('api', 'responses', 'default'));
    expect(bare.stdout).toMatch(row('mcpServers', '(none)', 'default'));
  });

  it('a bad config file is one line naming the file and the problem, exit 2, for config, chat and exec', async () => {
    const cwd = await workspace();
    await mkdir(join(cwd, '.openwork'));
    const file = join(cwd, '.openwork', 'config.json');
    const env = cleanEnv({ HOME: join(cwd, 'nohome') });
    await writeFile(file, JSON.stringify({ modle: 'typo' }));
    for (const args of [['config'], ['chat', 'hello'], ['exec', 'hello']]) {
      const run = runCli(args, { cwd, env });
      running.push(run);
      expect(await run.exit).toBe(2);
      expect(run.stderr).toMatch(new RegExp(`^openwork: bad config file: ${file.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}: \\(top level\\): Unrecognized key: "modle"\\n$`));
    }
    await writeFile(file, '{ "model": ');
    const notJson = runCli(['config'], { cwd, env });
    running.push(notJson);
    expect(await notJson.exit).toBe(2);
    expect(notJson.stderr).toMatch(/^openwork: bad config file: .+config\.json is not valid JSON: /);
    await writeFile(file, JSON.stringify({ mcpServers: { fs: { command: 'x', url: 'http://h' } } }));
    const badServer = runCli(['config'], { cwd, env });
    running.push(badServer);
    expect(await badServer.exit).toBe(2);
    expect(badServer.stderr).toMatch(/^openwork: bad config file: .+config\.json: mcpServers\.fs: /);
    expect(server.requests).toHaveLength(0);
  });
});

describe('openwork demo on a terminal', { timeout: 120_000 }, () => {
  it('asks its card the way chat does: the same question, an unknown answer asks again, "o" allows once', async () => {
    const cwd = await workspace();
    const tty = onTerminal(cwd, ['demo'], { NO_COLOR: '1' });
    await tty.waitFor(/allow \[o\]nce \/ this \[t\]urn \/ this \[s\]ession \/ \[d\]eny\? /);
    expect(tty.out()).toMatch(/\? write_note asks: /);
    tty.type('maybe');
    await tty.waitFor(/please answer allow \[o\]nce/);
    tty.type('o');
    expect(await tty.exit).toBe(0);
    expect(tty.out()).toMatch(/permission allow_once/);
    expect(tty.out()).toMatch(/turn finished: completed/);
  });
});
