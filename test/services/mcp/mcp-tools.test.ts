/**
 * MCP tools in real turns: the reference servers from npm (`server-everything` over stdio and
 * Streamable HTTP, `server-filesystem` on a temp directory) and a small SDK server of our own
 * (test/fixtures/mcp/changing-server.mjs) as real processes, `createCore` with a scripted model on
 * PGlite. Each permission test is an attack through the public API: a denied or ungranted call must
 * not reach the server.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { PermissionCard, SessionUpdateEnvelope } from '../../../src/protocol/updates.js';
import { mcpTools, type McpTools, type McpToolsOptions } from '../../../src/services/mcp/tools.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { usePglite } from '../../support/databases.js';
import { harness, type Harness } from '../../support/harness.js';

const BIN = resolve('node_modules/.bin');
const EVERYTHING = join(BIN, 'mcp-server-everything');
const FILESYSTEM = join(BIN, 'mcp-server-filesystem');
const CHANGING = resolve('test/fixtures/mcp/changing-server.mjs');

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));

const servers: McpTools[] = [];
const processes: ChildProcess[] = [];
const dirs: string[] = [];
afterEach(async () => {
  // The harness shuts its cores down in its own afterEach; the servers go after them.
  while (servers.length > 0) await servers.pop()!.close();
  while (processes.length > 0) processes.pop()!.kill('SIGKILL');
});
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

async function connect(options: McpToolsOptions): Promise<McpTools> {
  const server = await mcpTools(options);
  servers.push(server);
  return server;
}

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'openwork-mcp-'));
  dirs.push(dir);
  return dir;
}

/** The fixture server with its log file. */
async function changing(trust: McpToolsOptions['trust']): Promise<{ server: McpTools; log: () => string[] }> {
  const logFile = join(tempDir(), 'log.txt');
  writeFileSync(logFile, '');
  const server = await connect({ name: 'fixture', command: process.execPath, args: [CHANGING], env: { MCP_FIXTURE_LOG: logFile }, trust });
  return { server, log: () => readFileSync(logFile, 'utf8').split('\n').filter(Boolean) };
}

function finished(h: Harness) {
  return h.updates.flatMap((e) => (e.update.type === 'tool_call_finished' ? [e.update] : []));
}

function cards(h: Harness): PermissionCard[] {
  return h.updates.flatMap((e) => (e.update.type === 'permission_requested' ? [e.update.card] : []));
}

async function waitUntil(check: () => boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

const is = (type: string) => (e: SessionUpdateEnvelope) => e.update.type === type;

describe('stdio server-everything through a full turn', { timeout: 60_000 }, () => {
  it('namespaces the tools, passes the JSON Schema through, and maps text, sum, image and structured results', async () => {
    const server = await connect({ name: 'everything', command: EVERYTHING, args: ['stdio'], trust: 'trusted' });
    const h = await harness(
      storage,
      [
        {
          toolCalls: [
            { name: 'everything__echo', arguments: { message: 'hello mcp' } },
            { name: 'everything__get-sum', arguments: { a: 2, b: 40 } },
            { name: 'everything__get-tiny-image', arguments: {} },
            { name: 'everything__get-structured-content', arguments: { location: 'New York' } },
          ],
        },
        { text: 'done' },
      ],
      { tools: [server] },
    );
    const { outcome } = await h.run('use the tools');
    expect(outcome).toEqual({ status: 'completed', finalText: 'done' });

    const echo = h.model.requests[0]!.tools.find((t) => t.name === 'everything__echo');
    expect(echo).toEqual({
      name: 'everything__echo',
      description: 'Echoes back the input string',
      parameters: { type: 'object', properties: { message: { type: 'string', description: 'Message to echo' } }, required: ['message'] },
    });
    const results = finished(h);
    expect(results.map((r) => [r.toolName, r.status])).toEqual([
      ['everything__echo', 'succeeded'],
      ['everything__get-sum', 'succeeded'],
      ['everything__get-tiny-image', 'succeeded'],
      ['everything__get-structured-content', 'succeeded'],
    ]);
    expect(results[0]!.text).toBe('Echo: hello mcp');
    expect(results[1]!.text).toBe('The sum of 2 and 40 is 42.');
    expect(results[2]!.text).toMatch(/\[image: image\/png, \d+ bytes; not shown to the model\]/);
    expect(results[3]!.text).toMatch(/temperature/);
    // The model's next request carries the same texts, and no base64 image data.
    const toolTexts = JSON.stringify(h.model.requests[1]!.messages);
    expect(toolTexts).toContain('The sum of 2 and 40 is 42.');
    expect(toolTexts).not.toMatch(/iVBORw0KGgo/);
  });

  it('streams notifications/progress as tool_call_progress', async () => {
    const server = await connect({ name: 'everything', command: EVERYTHING, args: ['stdio'], trust: 'trusted' });
    const h = await harness(storage, [{ toolCalls: [{ name: 'everything__trigger-long-running-operation', arguments: { duration: 0.4, steps: 4 } }] }, { text: 'ok' }], { tools: [server] });
    await h.run('run it');
    const progress = h.updates.flatMap((e) => (e.update.type === 'tool_call_progress' ? [e.update.progress] : []));
    // The SDK drops a progress notification that arrives in the same read as the result (it
    // handles notifications a microtask later), so the last one may be missing under load.
    expect(progress.length).toBeGreaterThanOrEqual(3);
    expect(progress).toEqual([1, 2, 3, 4].slice(0, progress.length).map((i) => ({ kind: 'message', message: `progress ${i}/4` })));
    expect(finished(h)[0]).toMatchObject({ status: 'succeeded', text: 'Long running operation completed. Duration: 0.4 seconds, Steps: 4.' });
  });

  it('maps isError to a failed result with code mcp_tool_error', async () => {
    const { server } = await changing('trusted');
    const h = await harness(storage, [{ toolCalls: [{ name: 'fixture__fail', arguments: {} }] }, { text: 'ok' }], { tools: [server] });
    await h.run('fail');
    expect(finished(h)[0]).toMatchObject({ status: 'failed', text: 'the disk is on fire', error: { code: 'mcp_tool_error', message: 'the disk is on fire', retryable: false } });
  });

  it('a server killed mid-call gives mcp_server_exited, and the next call runs on a restarted server', async () => {
    const server = await connect({ name: 'everything', command: EVERYTHING, args: ['stdio'], trust: 'trusted' });
    const firstPid = server.pid;
    expect(firstPid).toBeGreaterThan(0);
    const h = await harness(
      storage,
      [{ toolCalls: [{ name: 'everything__trigger-long-running-operation', arguments: { duration: 20, steps: 40 } }] }, { text: 'it died' }, { toolCalls: [{ name: 'everything__echo', arguments: { message: 'again' } }] }, { text: 'back' }],
      { tools: [server] },
    );
    const turnId = await h.start('run long');
    await h.waitFor(is('tool_call_progress'));
    process.kill(firstPid!, 'SIGKILL');
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'it died' });
    expect(finished(h)[0]).toMatchObject({ status: 'failed', error: { code: 'mcp_server_exited', retryable: true } });

    const second = await h.run('again');
    expect(second.outcome).toEqual({ status: 'completed', finalText: 'back' });
    expect(finished(h)[1]).toMatchObject({ status: 'succeeded', text: 'Echo: again' });
    expect(server.pid).not.toBe(firstPid);
  });
});

describe('cancel', () => {
  it('cancelling the turn mid-call sends notifications/cancelled to the server', async () => {
    const { server, log } = await changing('trusted');
    const h = await harness(storage, [{ toolCalls: [{ name: 'fixture__wait', arguments: {} }] }], { tools: [server] });
    const turnId = await h.start('wait');
    await h.waitFor(is('tool_call_progress'));
    expect(log()).toContain('wait started');
    await h.session.cancelTurn(turnId);
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
    expect(finished(h)[0]).toMatchObject({ status: 'cancelled', error: { code: 'cancelled' } });
    // The server saw the cancellation: its handler's signal was aborted by notifications/cancelled.
    await waitUntil(() => log().some((l) => l.startsWith('wait cancelled')));
  });
});

describe('permission policy', () => {
  it('asks with a card per call, showing the annotations; a denial never reaches the server', async () => {
    const { server, log } = await changing('ask');
    const h = await harness(storage, [{ toolCalls: [{ name: 'fixture__note', arguments: { text: 'secret' } }] }], { tools: [server] });
    const turnId = await h.start('note it');
    const asked = await h.waitFor(is('permission_requested'));
    const card = (asked.update as { card: PermissionCard }).card;
    expect(card).toEqual({
      toolName: 'fixture__note',
      kind: 'approval',
      summary: 'call the tool "note" of the MCP server "fixture" (the server says: not destructive)',
      mcp: { server: 'fixture', tool: 'note', readOnlyHint: false, destructiveHint: false, arguments: '{"text":"secret"}' },
      environmentId: 'mcp:fixture',
      grantKey: 'mcp:fixture:note',
      decisions: ['allow_once', 'deny', 'allow_for_turn', 'allow_for_session'],
    });
    await h.session.resolvePermission(turnId, (asked.update as { toolCallId: string }).toolCallId, 'deny');
    // A user's denial ends the turn (reference §4.1), and the call never ran.
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'failed', code: 'permission_denied', message: 'the user denied a tool call' });
    expect(finished(h)[0]).toMatchObject({ status: 'denied' });
    expect(log().filter((l) => l.startsWith('note'))).toEqual([]);
  });

  it('a session grant covers later calls of the same server tool only', async () => {
    const { server, log } = await changing('ask');
    const h = await harness(
      storage,
      [
        { toolCalls: [{ name: 'fixture__note', arguments: { text: 'one' } }] },
        { text: 'first' },
        { toolCalls: [{ name: 'fixture__note', arguments: { text: 'two' } }, { name: 'fixture__fail', arguments: {} }] },
        { text: 'second' },
      ],
      { tools: [server] },
    );
    const first = await h.start('one');
    const asked = await h.waitFor(is('permission_requested'));
    await h.session.resolvePermission(first, (asked.update as { toolCallId: string }).toolCallId, 'allow_for_session');
    expect(await h.session.waitForTurn(first)).toEqual({ status: 'completed', finalText: 'first' });

    const second = await h.start('two');
    // The note runs under the grant; the other tool of the same server still asks.
    const next = await h.waitFor((e) => e.update.type === 'permission_requested' && e.turnId === second);
    expect((next.update as { card: PermissionCard }).card.toolName).toBe('fixture__fail');
    expect(log().filter((l) => l.startsWith('note'))).toEqual(['note one', 'note two']);
    await h.session.resolvePermission(second, (next.update as { toolCallId: string }).toolCallId, 'allow_once');
    expect(await h.session.waitForTurn(second)).toEqual({ status: 'completed', finalText: 'second' });
    expect(finished(h).map((r) => [r.toolName, r.status])).toEqual([
      ['fixture__note', 'succeeded'],
      ['fixture__note', 'succeeded'],
      ['fixture__fail', 'failed'],
    ]);
    expect(cards(h).map((c) => c.toolName)).toEqual(['fixture__note', 'fixture__fail']);
    expect(log().filter((l) => l.startsWith('note'))).toEqual(['note one', 'note two']);
  });

  it('server-filesystem with read-only-auto: a read runs without a card, a write is asked for', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'hello.txt'), 'hello from disk\n');
    const server = await connect({ name: 'fs', command: FILESYSTEM, args: [dir], trust: 'read-only-auto' });
    const target = join(dir, 'out.txt');
    const h = await harness(
      storage,
      [
        { toolCalls: [{ name: 'fs__read_text_file', arguments: { path: join(dir, 'hello.txt') } }] },
        { toolCalls: [{ name: 'fs__write_file', arguments: { path: target, content: 'written' } }] },
        { text: 'done' },
      ],
      { tools: [server] },
    );
    const turnId = await h.start('read then write');
    const asked = await h.waitFor(is('permission_requested'));
    const card = (asked.update as { card: PermissionCard }).card;
    expect(card.toolName).toBe('fs__write_file');
    expect(card.mcp).toMatchObject({ server: 'fs', tool: 'write_file', readOnlyHint: false, destructiveHint: true });
    expect(card.summary).toContain('destructive');
    // Asked, not yet run.
    expect(existsSync(target)).toBe(false);
    expect(finished(h)[0]).toMatchObject({ toolName: 'fs__read_text_file', status: 'succeeded', text: 'hello from disk\n' });
    await h.session.resolvePermission(turnId, (asked.update as { toolCallId: string }).toolCallId, 'allow_once');
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'done' });
    expect(readFileSync(target, 'utf8')).toBe('written');
    expect(cards(h)).toHaveLength(1);
  });
});

describe('tools/list_changed', () => {
  it('the next model call sees the changed catalog, and the new tool runs', async () => {
    const { server } = await changing('trusted');
    const h = await harness(
      storage,
      [{ toolCalls: [{ name: 'fixture__grow', arguments: {} }] }, { toolCalls: [{ name: 'fixture__extra', arguments: { n: 21 } }] }, { text: 'grown' }],
      { tools: [server] },
    );
    await h.run('grow');
    const names = (i: number) => h.model.requests[i]!.tools.map((t) => t.name).filter((n) => n.startsWith('fixture__'));
    expect(names(0)).not.toContain('fixture__extra');
    expect(names(1)).toContain('fixture__extra');
    expect(finished(h).map((r) => [r.toolName, r.status, r.text])).toEqual([
      ['fixture__grow', 'succeeded', 'grown'],
      ['fixture__extra', 'succeeded', 'extra 42'],
    ]);
  });
});

async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolvePort(port));
    });
  });
}

/** Starts server-everything over HTTP (`streamableHttp` or `sse`) and waits until it listens. */
async function everythingOverHttp(mode: 'streamableHttp' | 'sse', port?: number): Promise<{ port: number; child: ChildProcess }> {
  port ??= await freePort();
  const child = spawn(EVERYTHING, [mode], { env: { ...process.env, PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] });
  processes.push(child);
  await new Promise<void>((ready, fail) => {
    let seen = '';
    const look = (chunk: Buffer) => {
      seen += chunk.toString();
      if (/listening|running on/i.test(seen)) ready();
    };
    child.stdout!.on('data', look);
    child.stderr!.on('data', look);
    child.once('exit', (code) => fail(new Error(`server-everything ${mode} exited (${code}): ${seen}`)));
  });
  return { port, child };
}

describe('HTTP servers', { timeout: 60_000 }, () => {
  it('Streamable HTTP server-everything through a full turn', async () => {
    const { port } = await everythingOverHttp('streamableHttp');
    const server = await connect({ name: 'web', url: `http://127.0.0.1:${port}/mcp`, trust: 'trusted' });
    expect(server.pid).toBeNull();
    const h = await harness(storage, [{ toolCalls: [{ name: 'web__echo', arguments: { message: 'over http' } }, { name: 'web__trigger-long-running-operation', arguments: { duration: 0.2, steps: 2 } }] }, { text: 'ok' }], { tools: [server] });
    await h.run('http');
    expect(finished(h).map((r) => [r.status, r.text])).toEqual([
      ['succeeded', 'Echo: over http'],
      ['succeeded', 'Long running operation completed. Duration: 0.2 seconds, Steps: 2.'],
    ]);
    expect(h.updates.filter(is('tool_call_progress'))).toHaveLength(2);
  });

  it('an HTTP server killed mid-call gives mcp_server_exited at once; later calls reach it again after restarts', { timeout: 120_000 }, async () => {
    const first = await everythingOverHttp('streamableHttp');
    const server = await connect({ name: 'web', url: `http://127.0.0.1:${first.port}/mcp`, trust: 'trusted' });
    const h = await harness(
      storage,
      [
        { toolCalls: [{ name: 'web__trigger-long-running-operation', arguments: { duration: 30, steps: 30 } }] },
        { text: 'it died' },
        { toolCalls: [{ name: 'web__echo', arguments: { message: 'one' } }] },
        { text: 'back' },
        { toolCalls: [{ name: 'web__echo', arguments: { message: 'two' } }] },
        { text: 'back again' },
      ],
      { tools: [server] },
    );
    const turnId = await h.start('run long');
    await h.waitFor(is('tool_call_progress'));
    const killedAt = Date.now();
    first.child.kill('SIGKILL');
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'it died' });
    // Not the 10-minute call timeout: the transport giving up on the stream ends the call.
    expect(Date.now() - killedAt).toBeLessThan(15_000);
    expect(finished(h)[0]).toMatchObject({ status: 'failed', error: { code: 'mcp_server_exited' } });

    const second = await everythingOverHttp('streamableHttp', first.port);
    expect((await h.run('again')).outcome).toEqual({ status: 'completed', finalText: 'back' });
    // Restarted between calls: the old session is refused, and the call goes through on a new one.
    second.child.kill('SIGKILL');
    await everythingOverHttp('streamableHttp', first.port);
    expect((await h.run('and again')).outcome).toEqual({ status: 'completed', finalText: 'back again' });
    expect(finished(h).slice(1).map((r) => [r.status, r.text])).toEqual([
      ['succeeded', 'Echo: one'],
      ['succeeded', 'Echo: two'],
    ]);
  });

  it('falls back to the HTTP+SSE transport for an SSE-only server', async () => {
    const { port } = await everythingOverHttp('sse');
    const server = await connect({ name: 'old', url: `http://127.0.0.1:${port}/sse`, trust: 'trusted' });
    const h = await harness(storage, [{ toolCalls: [{ name: 'old__get-sum', arguments: { a: 1, b: 2 } }] }, { text: 'ok' }], { tools: [server] });
    await h.run('sse');
    expect(finished(h)[0]).toMatchObject({ status: 'succeeded', text: 'The sum of 1 and 2 is 3.' });
  });
});

describe('connecting', () => {
  it('a server that cannot start is a typed mcp_server_unavailable error', async () => {
    await expect(mcpTools({ name: 'nope', command: join(tempDir(), 'missing-binary') })).rejects.toMatchObject({ name: 'McpServerError', code: 'mcp_server_unavailable', details: { server: 'nope' } });
  });

  it('bad options are a typed configuration_invalid error', async () => {
    await expect(mcpTools({ name: 'x', url: 'ftp://example.invalid' } as McpToolsOptions)).rejects.toMatchObject({ code: 'configuration_invalid' });
    await expect(mcpTools({ name: '', command: 'x' })).rejects.toMatchObject({ code: 'configuration_invalid' });
  });
});
