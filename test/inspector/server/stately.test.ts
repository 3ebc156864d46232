/**
 * The bridge to a `@statelyai/inspect` WebSocket relay: every actor's events arrive, ids are kept
 * apart per session, an absent relay answers `inspector_unreachable`, an absent optional package
 * answers `inspector_unavailable` (also through `npm run inspector -- --stately`), and nothing keeps
 * the process alive afterwards (the package's own WebSocket inspector retries forever).
 */
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { connectStatelyInspector } from '../../../src/inspector/server/stately.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { harness } from '../../support/harness.js';
import { usePglite } from '../../support/databases.js';

const CHILD = fileURLToPath(new URL('../../support/stately-child.ts', import.meta.url));
const INSPECTOR_MAIN = fileURLToPath(new URL('../../../inspector/main.ts', import.meta.url));
/** `--import` this to make the packages in OPENWORK_ABSENT_PACKAGES unresolvable, as if not installed. */
const ABSENT_PACKAGES = fileURLToPath(new URL('./fixtures/absent-packages-register.mjs', import.meta.url));

/** Runs a Node script under tsx with some packages made absent; resolves with its output and exit code. */
function runWithout(absent: string[], args: string[]): Promise<{ stdout: string; stderr: string; code: number | null }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--import', ABSENT_PACKAGES, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, OPENWORK_ABSENT_PACKAGES: absent.join(',') },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += String(d)));
    child.stderr.on('data', (d: Buffer) => (stderr += String(d)));
    const killer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the child did not exit by itself; stdout: ${stdout} stderr: ${stderr}`));
    }, 90_000);
    child.on('exit', (code) => {
      clearTimeout(killer);
      resolve({ stdout, stderr, code });
    });
  });
}

interface Relay {
  url: string;
  messages: Array<Record<string, unknown>>;
  closed: Promise<void>;
  stop(): Promise<void>;
}

async function startRelay(): Promise<Relay> {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise<void>((resolve) => server.once('listening', () => resolve()));
  const messages: Array<Record<string, unknown>> = [];
  let onClosed!: () => void;
  const closed = new Promise<void>((resolve) => (onClosed = resolve));
  server.on('connection', (socket) => {
    socket.on('message', (data) => messages.push(JSON.parse(String(data)) as Record<string, unknown>));
    socket.on('close', () => onClosed());
  });
  const port = (server.address() as { port: number }).port;
  return {
    url: `ws://127.0.0.1:${port}`,
    messages,
    closed,
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

async function until(check: () => boolean, timeoutMs = 5_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Runs the child script; resolves with its output and how long its event loop stayed alive after it
 * printed `done` (both times from the child's clock: `done`, and `exit` when the loop emptied). The
 * process's teardown after that is not counted: it is the part a loaded machine stretches (the
 * bound below failed once at load 10-25 while the loop itself had emptied), and nothing of ours.
 */
function runChild(args: string[]): Promise<{ lines: string[]; code: number | null; afterDoneMs: number }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += String(d)));
    child.stderr.on('data', (d: Buffer) => (err += String(d)));
    const killer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the child did not exit by itself; stdout: ${out} stderr: ${err}`));
    }, 90_000);
    child.on('exit', (code) => {
      clearTimeout(killer);
      const doneAt = /^done (\d+)$/m.exec(out)?.[1];
      const exitAt = /^exit (\d+)$/m.exec(out)?.[1];
      if (doneAt === undefined || exitAt === undefined) reject(new Error(`the child exited ${code} without finishing; stdout: ${out} stderr: ${err}`));
      else resolve({ lines: out.trim().split('\n'), code, afterDoneMs: Number(exitAt) - Number(doneAt) });
    });
  });
}

describe('connectStatelyInspector', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  it('sends the session, turn and tool-call actors to the relay, with ids kept apart per session', async () => {
    const relay = await startRelay();
    const stately = await connectStatelyInspector({ url: relay.url });
    expect(stately.connected).toBe(true);
    // A control tool: the Turn spawns a tool-call machine for it (an echo would run as the Turn's own actors).
    const h = await harness(
      storage,
      [{ toolCalls: [{ name: 'update_plan', arguments: { explanation: 'why', plan: [{ step: 'one', status: 'in_progress' }] } }] }, { text: 'done' }],
      { inspect: stately.inspect },
    );
    await h.run('go');
    const sid = h.session.sessionId;
    await until(() => relay.messages.some((m) => m.type === '@xstate.snapshot' && (m.snapshot as { value?: unknown })?.value === 'completed'));
    const actors = relay.messages.filter((m) => m.type === '@xstate.actor');
    expect(actors.map((m) => m.name)).toEqual(expect.arrayContaining([`session:${sid}`, 'turn', 'toolCall']));
    const root = actors.find((m) => m.name === `session:${sid}`)!;
    const turn = actors.find((m) => m.name === 'turn')!;
    const toolCall = actors.find((m) => m.name === 'toolCall')!;
    expect(root.sessionId).toMatch(new RegExp(`^${sid}/x:\\d+$`));
    expect(turn.parentId).toBe(root.sessionId);
    expect(toolCall.rootId).toBe(root.sessionId);
    expect(JSON.parse(turn.definition as string)).toMatchObject({ id: 'turn', initial: 'starting' });
    for (const m of relay.messages) expect(String(m.sessionId).startsWith(`${sid}/`)).toBe(true);
    await stately.stop();
    await relay.closed;
    expect(stately.connected).toBe(false);
    const count = relay.messages.length;
    h.model.push({ text: 'after stop' });
    await h.run('again');
    await new Promise((r) => setTimeout(r, 50));
    expect(relay.messages).toHaveLength(count);
    await relay.stop();
  });

  it('answers inspector_unreachable when no relay listens, without retrying', async () => {
    const port = await freePort();
    const started = Date.now();
    await expect(connectStatelyInspector({ url: `ws://127.0.0.1:${port}` })).rejects.toMatchObject({ code: 'inspector_unreachable' });
    expect(Date.now() - started).toBeLessThan(3_000);
    await expect(connectStatelyInspector({ url: 'not a url' })).rejects.toMatchObject({ code: 'inspector_unreachable' });
  });

  it('leaves nothing that keeps Node alive: after a refused connection, and after a turn and stop()', async () => {
    const port = await freePort();
    const refused = await runChild(['unreachable', `ws://127.0.0.1:${port}`]);
    expect(refused.lines[0]).toBe('error inspector_unreachable');
    expect(refused.code).toBe(0);
    expect(refused.afterDoneMs).toBeLessThan(2_500);

    const relay = await startRelay();
    const connected = await runChild(['connected', relay.url]);
    expect(connected.lines[0]).toBe('outcome completed');
    expect(connected.code).toBe(0);
    expect(connected.afterDoneMs).toBeLessThan(2_500);
    // The child's echo runs in the Turn's effects actor (no tool-call machine): the start of its run reached the relay.
    expect(relay.messages.some((m) => m.type === '@xstate.actor' && m.name === 'turn')).toBe(true);
    expect(relay.messages.some((m) => m.type === '@xstate.actor' && m.name === 'effects')).toBe(true);
    expect(relay.messages.some((m) => m.type === '@xstate.event' && (m.event as { type?: string } | undefined)?.type === 'effects.tool.start')).toBe(true);
    await relay.stop();
  }, 180_000);

  it('answers inspector_unavailable when @statelyai/inspect or ws is not installed; npm run inspector -- --stately says so and exits 1', async () => {
    const port = await freePort();
    const url = `ws://127.0.0.1:${port}`;
    // With every package present the same child only misses the relay (inspector_unreachable, above).
    for (const absent of ['@statelyai/inspect', 'ws']) {
      const child = await runWithout([absent], [CHILD, 'unreachable', url]);
      expect(child.stdout.split('\n')[0], child.stderr).toBe('error inspector_unavailable');
      expect(child.code).toBe(0);
    }
    const main = await runWithout(['@statelyai/inspect'], [INSPECTOR_MAIN, '--port', '0', '--stately', url]);
    expect(main.code).toBe(1);
    expect(main.stderr).toContain("inspector: @statelyai/inspect is not installed; install @statelyai/inspect and ws to use Stately's inspector (npm i -D @statelyai/inspect ws)");
    expect(main.stdout).not.toContain('open http');
  }, 180_000);
});
