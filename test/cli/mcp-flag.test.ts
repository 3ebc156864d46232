/**
 * `openwork exec --mcp <config.json>` (and chat, which shares the flag and the opening code): a
 * configuration in the format of other MCP hosts gives the model the servers' tools; a bad one is
 * refused with a typed, one-line error before any model call; the servers stop with the command.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runExecInProcess } from '../support/cli-in-process.js';
import { parseChatOptions, parseExecOptions } from '../../src/cli/options.js';
import { startFakeOpenAI, type FakeOpenAIServer } from '../support/fake-openai-server.js';
import { createTestDatabase } from '../support/databases.js';

const CHANGING = resolve('test/fixtures/mcp/changing-server.mjs');

let server: FakeOpenAIServer;
let databaseUrl: string;
let dir: string | undefined;
beforeAll(async () => {
  server = await startFakeOpenAI();
  databaseUrl = await createTestDatabase();
}, 120_000);
afterEach(() => {
  const leftover = { unexpected: server.unexpected.length, remaining: server.remaining };
  server.reset();
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
  expect(leftover).toEqual({ unexpected: 0, remaining: 0 });
});
afterAll(async () => {
  await server.close();
});

async function exec(config: unknown, prompt: string) {
  dir = mkdtempSync(join(tmpdir(), 'openwork-mcp-cli-'));
  const file = join(dir, 'mcp.json');
  writeFileSync(file, typeof config === 'string' ? config : JSON.stringify(config));
  const options = parseExecOptions(['--base-url', server.url, '--model', 'fake-model', '--database-url', databaseUrl, '--mcp', 'mcp.json', prompt], {}, dir);
  return runExecInProcess(options);
}

describe('--mcp', { timeout: 120_000 }, () => {
  it('is parsed by chat and exec as a path from the working directory', () => {
    expect(parseChatOptions(['--mcp', 'conf/mcp.json'], {}, '/work/x').mcpConfig).toBe('/work/x/conf/mcp.json');
    expect(parseExecOptions(['--mcp=/etc/mcp.json', 'hi'], {}, '/work/x').mcpConfig).toBe('/etc/mcp.json');
  });

  it('gives the model the tools of the configured servers, and stops them when the command ends', async () => {
    const logDir = mkdtempSync(join(tmpdir(), 'openwork-mcp-log-'));
    const log = join(logDir, 'log.txt');
    writeFileSync(log, '');
    server.script({ toolCalls: [{ name: 'fixture__note', arguments: { text: 'from exec' }, callId: 'n1' }] }, { text: 'Noted.' });
    const run = await exec({ mcpServers: { fixture: { command: process.execPath, args: [CHANGING], env: { MCP_FIXTURE_LOG: log }, trust: 'trusted', disabled: false } } }, 'note something');
    expect(run).toMatchObject({ code: 0, stdout: 'Noted.\n' });
    const lines = readFileSync(log, 'utf8').split('\n').filter(Boolean);
    expect(lines).toContain('note from exec');
    expect(JSON.stringify(server.requests[0]!.body)).toContain('fixture__note');
    // The server process went with the command.
    const pid = Number(lines.find((l) => l.startsWith('started '))!.split(' ')[1]);
    const alive = () => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    const deadline = Date.now() + 5_000;
    while (alive() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(alive()).toBe(false);
    rmSync(logDir, { recursive: true, force: true });
  });

  it.each([
    ['not JSON', '{"mcpServers": ', /^openwork: the MCP configuration .*mcp\.json is not JSON: /],
    ['no mcpServers map', { servers: {} }, /^openwork: invalid MCP configuration in .*mcp\.json: mcpServers: /],
    ['neither command nor url', { mcpServers: { x: { args: ['a'] } } }, /^openwork: invalid MCP configuration in .*mcp\.json: mcpServers\.x: needs "command" \(stdio\) or "url" \(HTTP\)$/m],
    ['both command and url', { mcpServers: { x: { command: 'a', url: 'http://127.0.0.1:1/mcp' } } }, /mcpServers\.x: give either "command" \(stdio\) or "url" \(HTTP\), not both/],
    ['args not strings', { mcpServers: { x: { command: 'a', args: [1] } } }, /mcpServers\.x\.args\.0: /],
    ['an unknown trust', { mcpServers: { x: { command: 'a', trust: 'always' } } }, /mcpServers\.x\.trust: /],
  ])('a bad configuration (%s) is refused before any model call, exit 2', async (_label, config, message) => {
    const run = await exec(config, 'hi');
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(message);
    expect(server.requests).toHaveLength(0);
  });

  it('a server that cannot start is refused with mcp_server_unavailable, exit 2', async () => {
    const run = await exec({ mcpServers: { gone: { command: '/nonexistent/mcp-server' } } }, 'hi');
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/^openwork: cannot connect to the MCP server "gone": /);
    expect(server.requests).toHaveLength(0);
  });
});
