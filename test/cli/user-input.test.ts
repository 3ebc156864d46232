/**
 * `openwork chat` answers the model's questions (request_user_input) on stdin: a number picks an
 * option, other text is the answer itself, a blank line asks again; the model reads the answers as
 * the call's result. A spawned process against the fake OpenAI server, storage on Postgres.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeOpenAI, type FakeOpenAIServer } from '../support/fake-openai-server.js';
import { ensureBuilt, runCli } from '../support/cli-process.js';
import { createTestDatabase } from '../support/databases.js';

let server: FakeOpenAIServer;
let databaseUrl: string;

beforeAll(async () => {
  ensureBuilt();
  server = await startFakeOpenAI();
  databaseUrl = await createTestDatabase();
}, 180_000);
afterAll(() => server.close());

describe('openwork chat: questions from the model', { timeout: 120_000 }, () => {
  it('asks each question inline and sends the answers back as the tool result', async () => {
    const cwd = await mkdtemp(join(tmpdir(), 'openwork-cli-ask-'));
    try {
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
      const run = runCli(['chat', '--base-url', server.url, '--model', 'fake-model', '--database-url', databaseUrl, 'format the code'], { cwd });
      try {
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
        expect(server.unexpected).toHaveLength(0);
        expect(server.remaining).toBe(0);
      } finally {
        if (run.child.exitCode === null) run.child.kill('SIGKILL');
      }
    } finally {
      server.reset();
      await rm(cwd, { recursive: true, force: true });
    }
  });
});
