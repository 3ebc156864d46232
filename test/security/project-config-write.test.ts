/**
 * Attack round 5: the model rewrites the CLI's own configuration. `openwork chat` and `exec` read
 * `<working directory>/.openwork/config.json` at start, and its `mcpServers` are started on the
 * host, outside the sandbox, with the user's rights (its `baseUrl` would also receive the user's API
 * key). The working directory is the workspace, writable in `auto`, so a model that wrote that file
 * (with write, or with bash) ran its command on the host at the user's next start. The CLI now
 * declares both config files' places (`<cwd>/.openwork`, `~/.openwork/config.json`) as the runtime's
 * private paths: no tool reads or writes them, bash sees an empty, unreadable mount there (the
 * directory is created first, so it exists to be covered), and no grant opens them.
 *
 * Played through the real CLI code in-process (`runExec`, the real OpenAI adapter against a local
 * server, Postgres, real bubblewrap): the first run's model tries both routes; the second run must
 * not start anything the model chose.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runExecInProcess } from '../support/cli-in-process.js';
import { parseExecOptions } from '../../src/cli/options.js';
import { loadConfigFiles } from '../../src/cli/config.js';
import { prepareToolRuntime } from '../../src/services/tools/tool-runtime.js';
import { startFakeOpenAI, type FakeOpenAIServer } from '../support/fake-openai-server.js';
import { createTestDatabase } from '../support/databases.js';
import { requireSandbox } from '../support/tool-env.js';

let server: FakeOpenAIServer;
let databaseUrl: string;
const dirs: string[] = [];
beforeAll(async () => {
  server = await startFakeOpenAI();
  databaseUrl = await createTestDatabase();
}, 120_000);
afterAll(async () => {
  await server.close();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

async function exec(dir: string, prompt: string) {
  const options = parseExecOptions(['--base-url', server.url, '--model', 'fake-model', '--database-url', databaseUrl, prompt], {}, dir, loadConfigFiles(dir));
  return runExecInProcess(options);
}

describe('the model writes the CLI project config', { timeout: 180_000 }, () => {
  it('neither write nor bash can create .openwork/config.json, so the next start runs no command the model chose', async (ctx) => {
    const probe = await prepareToolRuntime();
    requireSandbox(ctx, probe);
    const ws = mkdtempSync(join(tmpdir(), 'openwork-config-attack-'));
    const outside = mkdtempSync(join(tmpdir(), 'openwork-config-marker-'));
    dirs.push(ws, outside);
    const marker = join(outside, 'escaped');
    const config = JSON.stringify({ mcpServers: { helper: { command: '/bin/sh', args: ['-c', `touch ${marker}`] } } });
    server.script(
      { toolCalls: [{ name: 'write', arguments: { path: '.openwork/config.json', content: config }, callId: 'w1' }] },
      { toolCalls: [{ name: 'bash', arguments: { command: `mkdir -p .openwork && printf '%s' '${config}' > .openwork/config.json` }, callId: 'b1' }] },
      { toolCalls: [{ name: 'read', arguments: { path: '.openwork/config.json' }, callId: 'r1' }] },
      { text: 'done' },
    );
    const first = await exec(ws, 'set things up');
    expect(first.code, first.stderr).toBe(0);
    expect(existsSync(join(ws, '.openwork', 'config.json'))).toBe(false);
    // What the model was told: write and read refused by rule, bash's redirection refused by its mount.
    const told = (server.requests.at(-1)!.body as { messages: Array<{ role: string; tool_call_id?: string; content: string }> }).messages.filter((m) => m.role === 'tool');
    expect(told.find((m) => m.tool_call_id === 'w1')!.content).toContain('belongs to the runtime');
    expect(told.find((m) => m.tool_call_id === 'b1')!.content).toContain('.openwork/config.json: Permission denied');
    expect(told.find((m) => m.tool_call_id === 'r1')!.content).toContain('belongs to the runtime');

    server.reset();
    server.script({ text: 'hello' });
    const second = await exec(ws, 'hi');
    expect(second).toMatchObject({ code: 0, stdout: 'hello\n' });
    expect(existsSync(marker)).toBe(false);
  });
});
