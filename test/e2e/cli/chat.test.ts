/**
 * The `openwork` command end to end as a spawned process against the fake OpenAI server: a
 * conversation turn continued with --session, an approval and the model's questions answered on stdin, a Ctrl-C (SIGINT)
 * cancel, the one-line failures, `sessions`, and the offline demo.
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, type TestContext } from 'vitest';
import { closedPort, startFakeOpenAI, type FakeOpenAIServer, type RecordedRequest } from '../../support/fake-openai-server.js';
import { spawn } from 'node:child_process';
import { ROOT, cleanEnv, ensureBuilt, runCli, type CliRun } from '../../support/cli-process.js';
import { createTestDatabase } from '../../support/databases.js';
import { sandboxUnavailableText } from '../../../src/services/permissions/texts.js';
import { pgliteStorage } from '../../../src/storage/pglite.js';

let server: FakeOpenAIServer;
let dir: string;
const running: CliRun[] = [];

let databaseUrl: string;

beforeAll(async () => {
  ensureBuilt();
  server = await startFakeOpenAI();
  // Most runs use the suite's Postgres server (a child process starts on it in well under a second);
  // the first test and the demo use the PGlite default under .openwork/.
  databaseUrl = await createTestDatabase();
}, 180_000);
afterEach(async () => {
  for (const run of running.splice(0)) {
    if (run.child.exitCode === null) run.child.kill('SIGKILL');
  }
  const leftover = { unexpected: server.unexpected.length, remaining: server.remaining };
  // A failed test must not leave its replies to the next one.
  server.reset();
  if (dir) await rm(dir, { recursive: true, force: true });
  expect(leftover).toEqual({ unexpected: 0, remaining: 0 });
});
afterAll(async () => {
  await server.close();
});

async function workspace(): Promise<string> {
  dir = await mkdtemp(join(tmpdir(), 'openwork-cli-'));
  return dir;
}

/** `openwork chat` on the fake server; storage on Postgres unless `pglite` is asked for. */
function chat(cwd: string, ...args: string[]): CliRun {
  const storage = args[0] === '--pglite' ? [] : ['--database-url', databaseUrl];
  const run = runCli(['chat', '--base-url', server.url, '--model', 'fake-model', ...storage, ...args.filter((a) => a !== '--pglite')], { cwd });
  running.push(run);
  return run;
}

/** The user's own words: World State sections (also user-role) left out. */
function userTexts(request: RecordedRequest): string[] {
  return (request.body.messages as Array<{ role: string; content: string }>)
    .filter((m) => m.role === 'user' && !/^(<user_project_context|<sandbox_policy>|<project_instructions>|<available_skills>|The following )/.test(m.content))
    .map((m) => m.content);
}

/** A call that writes `.env` (sensitive: not writable without escalation), asking for it. */
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

const QUESTION = /allow \[o\]nce \/ this \[t\]urn \/ this \[s\]ession \/ \[d\]eny\?/;

/**
 * Waits for the first card's question. Escalation cards need the sandbox (the escalation parameters
 * exist only when bubblewrap works): where it does not, the test is skipped with the reason, unless
 * OPENWORK_REQUIRE_SANDBOX=1 (set by .ci/run where bubblewrap works) says it must run, which fails it.
 */
async function cardAsked(ctx: TestContext, run: CliRun): Promise<void> {
  // The header says at once whether the sandbox works (reference §4.6: the UI shows it).
  await run.waitFor(/^(sandbox: \w+, bash runs inside it|sandbox unavailable, bash disabled: .+)$/m);
  const asked = !/^sandbox unavailable, bash disabled/m.test(run.stdout);
  if (asked) return run.waitFor(QUESTION);
  run.child.kill('SIGKILL');
  await run.exit;
  server.reset();
  const reason = 'the escalation card needs the sandbox (bubblewrap), which is unavailable here';
  if (process.env.OPENWORK_REQUIRE_SANDBOX === '1') {
    throw new Error(`${reason}, but OPENWORK_REQUIRE_SANDBOX=1 says it must work here\n--- stdout\n${run.stdout}\n--- stderr\n${run.stderr}`);
  }
  console.warn(`[sandbox] "${ctx.task.name}" cannot run: ${reason}`);
  ctx.skip(reason);
}

/** How many cards the run has asked so far. */
const questions = (run: CliRun) => run.stdout.match(new RegExp(QUESTION.source, 'g'))?.length ?? 0;

/** The tool result the model got for `callId`. */
function resultFor(request: RecordedRequest, callId: string): string | undefined {
  return (request.body.messages as Array<{ tool_call_id?: string; content: string }>).find((m) => m.tool_call_id === callId)?.content;
}

describe('openwork chat', { timeout: 120_000 }, () => {
  it('a conversation turn streams the answer, and --session continues the stored session', async () => {
    const cwd = await workspace();
    server.script({ text: 'Hello from the fake model.', chunk: 3, delayMs: 2 });
    const first = chat(cwd, '--pglite', 'say hello');
    first.child.stdin.end();
    expect(await first.exit).toBe(0);
    expect(first.stdout).toContain('Hello from the fake model.');
    expect(first.stderr).toBe('');
    const sessionId = /session (ses_\S+)/.exec(first.stdout)?.[1];
    expect(sessionId).toBeDefined();
    expect(server.requests).toHaveLength(1);
    expect(server.requests[0]!.path).toBe('/v1/chat/completions');
    expect(userTexts(server.requests[0]!)).toEqual(['say hello']);

    const list = runCli(['sessions'], { cwd });
    running.push(list);
    expect(await list.exit).toBe(0);
    expect(list.stdout).toContain(sessionId);
    expect(list.stdout).toContain('openai/fake-model');
    expect(list.stdout).toContain('say hello');

    server.script((request) => {
      // The stored conversation comes back: the first question and answer, then the new one.
      expect(userTexts(request)).toEqual(['say hello', 'and again']);
      expect(request.body.messages).toContainEqual({ role: 'assistant', content: 'Hello from the fake model.' });
      return { text: 'Hello again.' };
    });
    const second = chat(cwd, '--pglite', '--session', sessionId!);
    second.type('and again');
    second.child.stdin.end();
    expect(await second.exit).toBe(0);
    expect(second.stdout).toContain(`session ${sessionId}`);
    expect(second.stdout).toContain('Hello again.');
  });

  it('shows tool calls in brief and asks a permission card on stdin', async (ctx) => {
    const cwd = await workspace();
    await writeFile(join(cwd, '.env'), 'TOKEN=old\n');
    await writeFile(join(cwd, 'notes.txt'), 'plain notes\n');
    server.script(
      { toolCalls: [{ name: 'list', arguments: {}, callId: 'ls' }] },
      (request) => {
        const listing = (request.body.messages as Array<{ role: string; tool_call_id?: string; content: string }>).find((m) => m.tool_call_id === 'ls');
        expect(listing?.content).toContain('notes.txt');
        // A file is read before it is edited (read-before-edit).
        return { toolCalls: [{ name: 'read', arguments: { path: '.env' }, callId: 'rd' }] };
      },
      // Without sandboxPermissions the write would be refused; with them the user is asked.
      { toolCalls: [escalatedEnvWrite(cwd, 'TOKEN=swordfish\n', 'env')] },
      (request) => {
        const written = (request.body.messages as Array<{ tool_call_id?: string; content: string }>).find((m) => m.tool_call_id === 'env');
        expect(written?.content).not.toMatch(/^\[/);
        return { text: 'The token is set.' };
      },
    );
    const run = chat(cwd, 'set the token in .env');
    await cardAsked(ctx, run);
    expect(run.stdout).toContain('→ list');
    expect(run.stdout).toContain(`? write asks: this once, additionally allow writing ${join(cwd, '.env')} (file)`);
    run.type('maybe');
    await run.waitFor(/please answer/);
    run.type('o');
    await run.waitFor(/The token is set\./);
    run.child.stdin.end();
    expect(await run.exit).toBe(0);
    expect(run.stdout).toContain('permission: allow_once');
    expect(await readFile(join(cwd, '.env'), 'utf8')).toBe('TOKEN=swordfish\n');
  });

  it('"t" allows for the rest of the turn: the same request runs again without a card, and the next turn asks anew', async (ctx) => {
    const cwd = await workspace();
    await writeFile(join(cwd, '.env'), 'TOKEN=0\n');
    server.script(
      { toolCalls: [{ name: 'read', arguments: { path: '.env' }, callId: 'rd' }, escalatedEnvWrite(cwd, 'TOKEN=1\n', 'w1')] },
      { toolCalls: [escalatedEnvWrite(cwd, 'TOKEN=2\n', 'w2')] },
      (request) => {
        expect(resultFor(request, 'w2')).toMatch(/^Wrote /);
        return { text: 'Turn one done.' };
      },
      { toolCalls: [escalatedEnvWrite(cwd, 'TOKEN=3\n', 'w3')] },
      (request) => {
        expect(resultFor(request, 'w3')).toMatch(/^Wrote /);
        return { text: 'Turn two done.' };
      },
    );
    const run = chat(cwd, 'set the token twice');
    await cardAsked(ctx, run);
    run.type('t');
    await run.waitFor(/Turn one done\./);
    expect(questions(run)).toBe(1);
    expect(await readFile(join(cwd, '.env'), 'utf8')).toBe('TOKEN=2\n');
    // The turn grant went with its turn: the identical request in the next turn asks again.
    run.type('and once more');
    await run.waitFor(new RegExp(`(${QUESTION.source}[\\s\\S]*){2}`));
    run.type('o');
    await run.waitFor(/Turn two done\./);
    run.child.stdin.end();
    expect(await run.exit).toBe(0);
    expect(questions(run)).toBe(2);
    expect(run.stdout.match(/permission: \w+/g)).toEqual(['permission: allow_for_turn', 'permission: allow_once']);
    expect(await readFile(join(cwd, '.env'), 'utf8')).toBe('TOKEN=3\n');
  });

  it('"s" allows for the session: the same request in the next turn runs without a card', async (ctx) => {
    const cwd = await workspace();
    await writeFile(join(cwd, '.env'), 'TOKEN=0\n');
    server.script(
      { toolCalls: [{ name: 'read', arguments: { path: '.env' }, callId: 'rd' }, escalatedEnvWrite(cwd, 'TOKEN=1\n', 'w1')] },
      { text: 'Set for now.' },
      { toolCalls: [escalatedEnvWrite(cwd, 'TOKEN=2\n', 'w2')] },
      (request) => {
        expect(resultFor(request, 'w2')).toMatch(/^Wrote /);
        return { text: 'Set again.' };
      },
    );
    const run = chat(cwd, 'set the token');
    await cardAsked(ctx, run);
    run.type('s');
    await run.waitFor(/Set for now\./);
    // With stdin closed, a second card would be denied and the turn would fail (exit 1).
    run.type('set it again');
    run.child.stdin.end();
    expect(await run.exit).toBe(0);
    expect(run.stdout).toContain('Set again.');
    expect(questions(run)).toBe(1);
    expect(run.stdout.match(/permission: \w+/g)).toEqual(['permission: allow_for_session']);
    expect(await readFile(join(cwd, '.env'), 'utf8')).toBe('TOKEN=2\n');
  });

  it('--api responses talks the Responses API end to end, a tool call included', async () => {
    const cwd = await workspace();
    await writeFile(join(cwd, 'notes.txt'), 'plain notes\n');
    server.script({ toolCalls: [{ name: 'list', arguments: {}, callId: 'ls' }] }, (request) => {
      const output = (request.body.input as Array<{ type: string; call_id?: string; output?: string }>).find((i) => i.type === 'function_call_output' && i.call_id === 'ls');
      expect(output?.output).toContain('notes.txt');
      return { text: 'One file: notes.txt.', chunk: 3 };
    });
    const run = chat(cwd, '--api', 'responses', 'what is here?');
    run.child.stdin.end();
    expect(await run.exit).toBe(0);
    expect(run.stderr).toBe('');
    expect(run.stdout).toContain(`model openai/fake-model over responses at ${server.url}`);
    expect(run.stdout).toContain('→ list');
    expect(run.stdout).toContain('One file: notes.txt.');
    expect(server.requests.map((r) => r.path)).toEqual(['/v1/responses', '/v1/responses']);
    expect(server.requests[0]!.body).toMatchObject({ model: 'fake-model', stream: true, store: false });
    expect(server.requests[0]!.body.messages).toBeUndefined();
  });

  it('a denied card ends the turn with one line naming permission_denied', async (ctx) => {
    const cwd = await workspace();
    await writeFile(join(cwd, '.env'), 'SECRET=1\n');
    server.script({ toolCalls: [{ name: 'read', arguments: { path: '.env' }, callId: 'rd' }, escalatedEnvWrite(cwd, 'SECRET=2\n', 'env')] });
    const run = chat(cwd, 'change .env');
    await cardAsked(ctx, run);
    run.type('d');
    run.child.stdin.end();
    expect(await run.exit).toBe(1);
    expect(run.stdout).toMatch(/^openwork: the turn failed \(permission_denied\): .+$/m);
  });

  it('Ctrl-C cancels the running turn; a second Ctrl-C exits', async () => {
    const cwd = await workspace();
    server.script({ text: 'I will talk for a very long time about everything', chunk: 2, hangAfterEvents: 8 });
    const abortsBefore = server.clientAborts;
    const run = chat(cwd, 'talk forever');
    await run.waitFor(/I will/);
    run.child.kill('SIGINT');
    await run.waitFor(/turn cancelled/);
    expect(run.stdout).toContain('cancelling the turn');
    await expect.poll(() => server.clientAborts).toBeGreaterThan(abortsBefore);
    expect(run.child.exitCode).toBeNull();
    run.child.kill('SIGINT');
    expect(await run.exit).toBe(130);
    expect(run.stderr).toBe('');
  });

  it('a piped run whose turn SIGINT cancelled exits 130, not 0', async () => {
    const cwd = await workspace();
    server.script({ text: 'I will talk for a very long time about everything', chunk: 2, hangAfterEvents: 8 });
    const run = chat(cwd);
    run.type('talk forever');
    await run.waitFor(/I will/);
    run.child.kill('SIGINT');
    await run.waitFor(/turn cancelled/);
    // The input ends after the interrupted turn: the run is over, and it was interrupted.
    run.child.stdin.end();
    expect(await run.exit).toBe(130);
    expect(run.stderr).toBe('');
  });

  it('slash commands are never sent to the model: /help, /status, /sessions, /new, an unknown /x, /exit', async () => {
    const cwd = await workspace();
    server.script({ text: 'First answer.', usage: { inputTokens: 120, outputTokens: 30, cachedInputTokens: 64, reasoningTokens: 8 } }, (request) => {
      // After /new the conversation starts afresh: only the new prompt, nothing of the first session.
      expect(userTexts(request)).toEqual(['second prompt']);
      return { text: 'Second answer.' };
    });
    const run = chat(cwd, 'first prompt');
    await run.waitFor(/First answer\./);
    const first = /session (ses_\S+)/.exec(run.stdout)![1]!;
    run.type('/help');
    await run.waitFor(/\/sessions +the stored sessions/);
    expect(run.stdout).toMatch(/^ {2}\/status +the session, model, permission mode, token usage so far and context window fill$/m);
    run.type('/status');
    await run.waitFor(/usage so far: .+\n/);
    expect(run.stdout).toContain(`session ${first} · model openai/fake-model over chat · mode `);
    // The usage the provider reported for the one turn so far, as stored with it.
    expect(run.stdout).toContain('usage so far: 1 turn(s), 120 tokens in (64 cached), 30 out (8 reasoning), 1 model call(s), 0 tool call(s)');
    run.type('/frobnicate now');
    await run.waitFor(/unknown command/);
    expect(run.stdout).toMatch(/^openwork: unknown command \/frobnicate \(type \/help for the list\)$/m);
    run.type('/new');
    await run.waitFor(/new session (ses_\S+)/);
    const second = /new session (ses_\S+)/.exec(run.stdout)![1]!;
    expect(second).not.toBe(first);
    run.type('/sessions');
    await run.waitFor(/continue one with: openwork chat --session <id>/);
    expect(run.stdout).toMatch(new RegExp(`^${first} .+first prompt$`, 'm'));
    run.type('second prompt');
    await run.waitFor(/Second answer\./);
    run.type('/exit');
    run.type('never sent');
    expect(await run.exit).toBe(0);
    // Two model calls in all: the slash commands and the line after /exit reached no model.
    expect(server.requests).toHaveLength(2);
    expect(server.requests.flatMap(userTexts)).toEqual(['first prompt', 'second prompt']);
    expect(run.stdout).not.toContain('> never sent');
  });

  it('Ctrl-C while a card is asked cancels the turn, and the next line is the next prompt', async (ctx) => {
    const cwd = await workspace();
    await writeFile(join(cwd, '.env'), 'A=1\n');
    server.script({ toolCalls: [{ name: 'read', arguments: { path: '.env' }, callId: 'rd' }, escalatedEnvWrite(cwd, 'A=2\n', 'env')] });
    const run = chat(cwd, 'change .env');
    await cardAsked(ctx, run);
    run.child.kill('SIGINT');
    await run.waitFor(/turn cancelled/);
    server.script((request) => {
      expect(userTexts(request).at(-1)).toBe('something else');
      return { text: 'Sure, something else.' };
    });
    run.type('something else');
    await run.waitFor(/Sure, something else\./);
    run.child.stdin.end();
    expect(await run.exit).toBe(0);
  });

  it('without bubblewrap the header says the sandbox is unavailable and why; bash answers sandbox_unavailable and the turn goes on', async () => {
    const cwd = await workspace();
    // A PATH without bwrap: the self-check of the spawned process finds none.
    const emptyPath = join(cwd, 'no-bin');
    await mkdir(emptyPath);
    const reason = 'bubblewrap (bwrap) is not installed; install it (Debian/Ubuntu: apt-get install bubblewrap)';
    server.script({ toolCalls: [{ name: 'bash', arguments: { command: 'ls' }, callId: 'sh' }] }, (request) => {
      // Chat Completions results carry their status as a prefix (seed §5 status mapping).
      expect(resultFor(request, 'sh')).toBe(`[denied] ${sandboxUnavailableText(reason)}`);
      return { text: 'Please run ls yourself.' };
    });
    const run = runCli(['chat', '--base-url', server.url, '--model', 'fake-model', '--database-url', databaseUrl, 'list the files'], { cwd, env: cleanEnv({ PATH: emptyPath }) });
    running.push(run);
    run.child.stdin.end();
    expect(await run.exit).toBe(0);
    expect(run.stdout.split('\n')).toContain(`sandbox unavailable, bash disabled: ${reason}`);
    expect(run.stdout).toContain('✗ bash denied: [sandbox: unavailable, so bash cannot run commands in this session');
    expect(run.stdout).toContain('Please run ls yourself.');
    expect(questions(run)).toBe(0);
  });

  it('asks the model\'s questions (request_user_input) inline and sends the answers back as the tool result', async () => {
    const cwd = await workspace();
    server.script(
      (request) => {
        const tools = (request.body.tools as Array<{ function: { name: string } }>).map((t) => t.function.name);
        expect(tools).toContain('request_user_input');
        return {
          toolCalls: [
            {
              name: 'request_user_input',
              callId: 'ask',
              arguments: {
                questions: [
                  { id: 'indent', header: 'Style', question: 'Tabs or spaces?', options: [{ label: 'tabs' }, { label: 'spaces', description: 'two of them' }] },
                  { id: 'scope', question: 'Which directory?' },
                ],
              },
            },
          ],
        };
      },
      (request) => {
        const result = (request.body.messages as Array<{ tool_call_id?: string; content: string }>).find((m) => m.tool_call_id === 'ask');
        expect(result?.content).toBe('{"answers":{"indent":"spaces","scope":"src/lib"}}');
        return { text: 'Reformatting src/lib with spaces.' };
      },
    );
    const run = chat(cwd, 'format the code');
    await run.waitFor(/\? Style: Tabs or spaces\?[\s\S]*answer> /);
    expect(run.stdout).toContain('  1. tabs');
    expect(run.stdout).toContain('  2. spaces (two of them)');
    run.type('2');
    await run.waitFor(/\? Which directory\?/);
    run.type('   ');
    await run.waitFor(/please type an answer/);
    run.type('src/lib');
    await run.waitFor(/Reformatting src\/lib with spaces\./);
    run.child.stdin.end();
    expect(await run.exit).toBe(0);
  });

  it('a missing key is one clear line', async () => {
    const cwd = await workspace();
    const run = runCli(['chat', 'hello'], { cwd, env: cleanEnv() });
    running.push(run);
    expect(await run.exit).toBe(2);
    expect(run.stderr).toBe(
      'openwork: no OpenAI API key: set OPENAI_API_KEY, or use --base-url with a local OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio)\n',
    );
  });

  it('an unreachable server is one clear line', async () => {
    const cwd = await workspace();
    const port = await closedPort();
    const run = runCli(['chat', '--base-url', `http://127.0.0.1:${port}/v1`, '--model', 'm', '--database-url', databaseUrl, 'hello'], { cwd });
    running.push(run);
    run.child.stdin.end();
    expect(await run.exit).toBe(1);
    const failures = run.stdout.split('\n').filter((l) => l.startsWith('openwork:'));
    expect(failures).toEqual([`openwork: the turn failed (model_error): cannot reach http://127.0.0.1:${port}/v1 (ECONNREFUSED)`]);
    expect(run.stdout + run.stderr).not.toMatch(/\n\s+at /);
  });

  it('bad options are one line with the usage hint', async () => {
    const cwd = await workspace();
    const run = runCli(['chat', '--api', 'soap'], { cwd });
    running.push(run);
    expect(await run.exit).toBe(2);
    expect(run.stderr).toBe('openwork: --api must be "responses" or "chat", not "soap" (see openwork --help)\n');
  });

  it('a second chat on the same PGlite directory is one line naming the holder (issue 13.5)', async () => {
    const cwd = await workspace();
    const first = chat(cwd, '--pglite');
    // The header comes after the store is open (and locked).
    await first.waitFor(/^(sandbox: \w+, bash runs inside it|sandbox unavailable, bash disabled: .+)$/m);
    const second = chat(cwd, '--pglite', 'hello');
    expect(await second.exit).toBe(2);
    expect(second.stderr).toBe(
      `openwork: pglite .openwork/db is in use by process ${first.child.pid}; PGlite allows one openwork process per directory (use --database-url <postgres-url> to run several)\n`,
    );
    expect(server.requests).toHaveLength(0);
    first.child.stdin.end();
    expect(await first.exit).toBe(0);
  });

  it('prompt first (issue 14.4): a new session\'s prompt comes before its store is ready, and a line typed at once is its first turn', async () => {
    const cwd = await workspace();
    server.script({ text: 'Answered after the store opened.' });
    const run = chat(cwd, '--pglite');
    await run.waitFor(/reading prompts from stdin/);
    // Typed the moment the prompt shows, while the store is still opening.
    run.type('typed before the store was ready');
    await run.waitFor(/Answered after the store opened\./);
    run.child.stdin.end();
    expect(await run.exit).toBe(0);
    expect(run.stderr).toBe('');
    const out = run.stdout;
    expect(out.indexOf('reading prompts from stdin')).toBeLessThan(out.indexOf('openwork chat · session ses_'));
    // Nothing typed was lost, and it went out once the session existed.
    expect(server.requests).toHaveLength(1);
    expect(userTexts(server.requests[0]!)).toEqual(['typed before the store was ready']);
    expect(out.indexOf('openwork chat · session ses_')).toBeLessThan(out.indexOf('> typed before the store was ready'));
  });

  it('prompt first: a store that fails to open after the prompt was shown is reported instead of the session, and nothing typed is sent', async () => {
    const cwd = await workspace();
    // A store whose first migration was changed after it was applied: migrate refuses it
    // (migration_error), which the chat can only learn once PGlite has started.
    const storage = pgliteStorage({ dataDir: join(cwd, '.openwork', 'db') });
    await storage.migrate();
    await storage.db.query("UPDATE openwork_migrations SET checksum = 'tampered' WHERE id = (SELECT min(id) FROM openwork_migrations)");
    await storage.close();
    const run = chat(cwd, '--pglite');
    await run.waitFor(/reading prompts from stdin/);
    run.type('this must not reach the model');
    expect(await run.exit).toBe(2);
    expect(run.stderr).toMatch(/^openwork: cannot open the session store \(pglite \.openwork\/db\): migration \S+ was changed after it was applied\n$/);
    expect(run.stdout).not.toContain('openwork chat · session');
    expect(server.requests).toHaveLength(0);
  });

  it('--session with an unknown id is one line', async () => {
    const cwd = await workspace();
    const run = chat(cwd, '--session', 'ses_nope');
    expect(await run.exit).toBe(2);
    expect(run.stderr).toBe(`openwork: no session ses_nope in postgres ${databaseUrl} (see \`openwork sessions\`)\n`);
  });
});

describe('openwork chat on a terminal', { timeout: 120_000 }, () => {
  it('Ctrl-D at the prompt leaves the shell prompt on a fresh line', async () => {
    const cwd = await workspace();
    // `script` gives the command a pseudo-terminal; what is written to its stdin is typed on it.
    const command = [process.execPath, join(ROOT, 'bin', 'openwork.js'), 'chat', '--base-url', server.url, '--model', 'fake-model', '--database-url', databaseUrl]
      .map((a) => `'${a}'`)
      .join(' ');
    const child = spawn('script', ['-qfec', command, '/dev/null'], { cwd, env: cleanEnv({ TERM: 'dumb' }), stdio: 'pipe' });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
    const exit = new Promise<number | null>((resolve) => child.on('close', resolve));
    try {
      await expect.poll(() => out, { timeout: 60_000 }).toMatch(/Ctrl-D\) exits\.[\s\S]*> $/);
      child.stdin.write('\u0004');
      expect(await exit).toBe(0);
      // Everything after the last prompt: the line break that ends it, then nothing on that line.
      const afterPrompt = out.slice(out.lastIndexOf('> ') + 2);
      expect(afterPrompt).toMatch(/^\r?\n/);
      expect(out.endsWith('> ')).toBe(false);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  });
});

describe('openwork demo', { timeout: 120_000 }, () => {
  it('runs offline and says the model is scripted; shows a tool call, a permission card and a plan', async () => {
    const cwd = await workspace();
    const run = runCli(['demo', '--yes'], { cwd });
    running.push(run);
    expect(await run.exit).toBe(0);
    expect(run.stdout).toMatch(/the model is SCRIPTED/);
    expect(run.stdout).toMatch(/tool list_directory/);
    expect(run.stdout).toMatch(/permission requested: write \.openwork\/demo\/hello\.txt/);
    expect(run.stdout).toMatch(/plan: .*\[completed\] Look at the working directory/);
    expect(run.stdout).toMatch(/turn finished: completed/);
    expect(server.requests).toEqual([]);
  });
});
