/**
 * Issue 12.3, the attack "bash reaches the host's network": through the public API (createCore, a
 * scripted model driving the built-in bash, real bubblewrap), a host HTTP server on 127.0.0.1, a
 * host abstract unix socket (the X11/dbus route) and the suite's Postgres over TCP loopback are
 * out of reach by default, and reachable only for a call whose network card the user approved.
 * The grant scopes work for it as for paths: `allow_for_session` covers the next network-only
 * request in the same workspace; a call that does not ask still has no network.
 *
 * Unix sockets that are files (a Postgres socket directory, `docker.sock`, the session bus) are
 * the same reach: a read-only mount does not stop `connect()`. The seccomp filter refuses to
 * create unix sockets (and io_uring) for a call without the network grant; the grant opens them.
 */
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer as createNetServer, type Server as NetServer } from 'node:net';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { cardLines, NETWORK_CARD_NOTE, styleFor } from '../../src/cli/render.js';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createCore, type Core } from '../../src/core.js';
import type { PermissionDecision } from '../../src/protocol/input.js';
import type { PermissionCard, SessionUpdateEnvelope, TurnOutcome } from '../../src/protocol/updates.js';
import type { ModelRequest } from '../../src/services/model/port.js';
import { scriptedModel, type ScriptedStep } from '../../src/services/model/scripted.js';
import { networkDenialText } from '../../src/services/permissions/texts.js';
import { workspaceToolOptions } from '../../src/services/tools/workspace.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../support/tool-env.js';
import { usePglite } from '../support/databases.js';

let env: ToolEnv;
let storage: SqlSessionStorage;
let http: HttpServer;
let httpPort: number;
let httpHits = 0;
let abstract: NetServer;
let abstractConnections = 0;
const abstractName = `openwork-test-${randomUUID()}`;
let fileSocket: NetServer;
let fileSocketConnections = 0;
const fileSocketDir = mkdtempSync(join(tmpdir(), 'openwork-unix-'));
/** A socket file outside the workspace, like `/var/run/docker.sock` or a Postgres socket. */
const fileSocketPath = join(fileSocketDir, 'host.sock');
const cores: Core[] = [];

usePglite((s) => (storage = s));
useToolEnv((e) => (env = e));
beforeAll(async () => {
  http = createHttpServer((_req, res) => {
    httpHits += 1;
    res.end('host-secret-page\n');
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  httpPort = (http.address() as { port: number }).port;
  abstract = createNetServer((socket) => {
    abstractConnections += 1;
    socket.end('abstract-socket-hello\n');
  });
  // A leading NUL names a Linux abstract socket: no file, scoped to the network namespace.
  await new Promise<void>((resolve) => abstract.listen(`\0${abstractName}`, resolve));
  fileSocket = createNetServer((socket) => {
    fileSocketConnections += 1;
    socket.end('file-socket-hello\n');
  });
  await new Promise<void>((resolve) => fileSocket.listen(fileSocketPath, resolve));
});

afterAll(async () => {
  for (const core of cores) await core.shutdown();
  await new Promise((resolve) => http.close(resolve));
  await new Promise((resolve) => abstract.close(resolve));
  await new Promise((resolve) => fileSocket.close(resolve));
  rmSync(fileSocketDir, { recursive: true, force: true });
});

/**
 * bash's /dev/tcp: a raw HTTP request to the host's loopback server. The socket is opened with `<`
 * (a socket is two-way whatever the operator): tree-sitter-bash cannot parse `<>`, and an
 * unparsable command asks first (issue 12.10).
 */
const devTcp = (port: number) => `exec 3</dev/tcp/127.0.0.1/${port} && printf 'GET / HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n' >&3 && cat <&3`;
const curl = (port: number) => `curl -sS --max-time 5 http://127.0.0.1:${port}/`;
/** Node inside the sandbox connecting to the host's abstract unix socket. */
const abstractClient = () =>
  `node -e "require('net').connect('\\\\0${abstractName}').on('data', (d) => process.stdout.write(d)).on('error', (e) => { console.log('socket error', e.code); process.exit(3); })"`;

/** Node inside the sandbox connecting to the host's socket file. */
const fileSocketClient = () =>
  `node -e "require('net').connect('${fileSocketPath}').on('data', (d) => process.stdout.write(d)).on('error', (e) => { console.log('socket error', e.code); process.exit(3); })"`;
/** Python's own socket call, then a socketpair (which has no name and stays allowed). */
const pythonUnix = () =>
  `python3 -c "import socket
try:
    s = socket.socket(socket.AF_UNIX); s.connect('${fileSocketPath}'); print('py', s.recv(64))
except OSError as e:
    print('py error', e.errno)
a, b = socket.socketpair(); a.send(b'pair-ok'); print(b.recv(16).decode())"`;

interface Played {
  outcome: TurnOutcome;
  cards: PermissionCard[];
  results: Array<{ status: string; text: string }>;
}

/**
 * A session whose scripted model plays `calls` as bash calls, one per model step, then answers.
 * Every card is decided with `decide`; the results are the tool messages the model saw.
 */
async function session() {
  let steps: Array<Record<string, unknown>> = [];
  let index = 0;
  const model = scriptedModel((_request: ModelRequest) => {
    const args = steps[index++];
    return (args ? { toolCalls: [{ name: 'bash', arguments: args }] } : { text: 'done' }) as ScriptedStep;
  });
  const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, closeStorageOnShutdown: false, ...workspaceToolOptions(env.runtime), worldState: false });
  cores.push(core);
  const handle = await core.createSession({ workingDirectory: env.ws });
  let decide: (card: PermissionCard) => PermissionDecision = () => 'deny';
  const cards: PermissionCard[] = [];
  handle.updates$.subscribe((e: SessionUpdateEnvelope) => {
    if (e.update.type !== 'permission_requested') return;
    const { card, toolCallId } = e.update;
    cards.push(card);
    void handle.resolvePermission(e.turnId!, toolCallId, decide(card));
  });
  return {
    async turn(calls: Array<Record<string, unknown>>, decision: (card: PermissionCard) => PermissionDecision = () => 'deny'): Promise<Played> {
      steps = calls;
      index = 0;
      decide = decision;
      const before = cards.length;
      const requestsBefore = model.requests.length;
      const { turnId } = await handle.startTurn({ clientRequestId: randomUUID(), input: [{ type: 'text', text: 'use the network' }] });
      const outcome = await handle.waitForTurn(turnId);
      const results = model.requests
        .slice(requestsBefore + 1)
        .map((r) => r.messages.filter((m) => m.role === 'tool').at(-1) as unknown as { status: string; text: string });
      return { outcome, cards: cards.slice(before), results };
    },
  };
}

const networkRequest = { sandboxPermissions: { network: true }, justification: 'the command talks to a local server' };

describe('bash has no network by default (issue 12.3)', () => {
  it('a host HTTP server on 127.0.0.1 is unreachable through /dev/tcp and curl; no card is shown', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const s = await session();
    const hits = httpHits;
    const played = await s.turn([{ command: devTcp(httpPort) }, { command: curl(httpPort) }]);
    expect(played.outcome).toMatchObject({ status: 'completed' });
    expect(played.cards).toEqual([]);
    const [tcp, viaCurl] = played.results;
    expect(tcp!.text).toMatch(/Connection refused/);
    expect(tcp!.text).not.toContain('host-secret-page');
    expect(viaCurl!.text).toMatch(/Failed to connect|Couldn't connect/);
    expect(viaCurl!.text).not.toContain('host-secret-page');
    expect(httpHits).toBe(hits);
  });

  it('a host abstract unix socket is unreachable', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const s = await session();
    const connections = abstractConnections;
    const played = await s.turn([{ command: abstractClient() }]);
    // Two layers stop it: the network namespace (ECONNREFUSED) and, before that, the seccomp filter (EPERM).
    expect(played.results[0]!.text).toMatch(/socket error (EPERM|ECONNREFUSED)/);
    expect(played.results[0]!.text).not.toContain('abstract-socket-hello');
    expect(abstractConnections).toBe(connections);
  });

  it('a host unix socket file (the docker.sock route) cannot be connected: socket() is refused; socketpair still works', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const s = await session();
    const connections = fileSocketConnections;
    const played = await s.turn([{ command: fileSocketClient() }, { command: pythonUnix() }]);
    expect(played.outcome).toMatchObject({ status: 'completed' });
    expect(played.cards).toEqual([]);
    expect(played.results[0]!.text).toMatch(/socket error EPERM/);
    expect(played.results[0]!.text).not.toContain('file-socket-hello');
    expect(played.results[1]!.text).toMatch(/^py error 1\npair-ok\n/);
    expect(fileSocketConnections).toBe(connections);
  });

  it("the suite's Postgres over TCP loopback is unreachable", async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const port = new URL(inject('databaseUrl')).port;
    const s = await session();
    const played = await s.turn([{ command: `exec 3</dev/tcp/127.0.0.1/${port} && echo connected` }]);
    expect(played.results[0]!.text).toMatch(/Connection refused/);
    expect(played.results[0]!.text).not.toContain('connected\n');
  });

  it('the sandbox still has its own loopback: a server and a client inside one command talk', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const s = await session();
    const command = `node -e "const net=require('net'); const srv=net.createServer((c)=>c.end('inner-ok')).listen(0,'127.0.0.1',()=>{net.connect(srv.address().port,'127.0.0.1').on('data',(d)=>{console.log(String(d)); srv.close();});});"`;
    const played = await s.turn([{ command }]);
    expect(played.results[0]!.text).toMatch(/^inner-ok\n\[exit 0;/);
  });

  it('a failed name lookup carries the network hint, and the hint names the way forward', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const s = await session();
    const played = await s.turn([{ command: 'curl -sS --max-time 5 http://example.com/' }]);
    expect(played.results[0]!.text).toMatch(/Could not resolve host/);
    expect(played.results[0]!.text.endsWith(networkDenialText())).toBe(true);
  });
});

describe('the network card (issue 12.3)', () => {
  it('allow_once: the call reaches the HTTP server, the abstract socket and Postgres; the next call without the request does not', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const s = await session();
    const hits = httpHits;
    const connections = abstractConnections;
    const fileConnections = fileSocketConnections;
    const port = new URL(inject('databaseUrl')).port;
    const played = await s.turn(
      [
        { command: `${devTcp(httpPort)}; ${abstractClient()}; ${fileSocketClient()}; exec 4</dev/tcp/127.0.0.1/${port} && echo pg-connected`, ...networkRequest },
        { command: `${devTcp(httpPort)}; ${fileSocketClient()}` },
      ],
      () => 'allow_once',
    );
    expect(played.outcome).toMatchObject({ status: 'completed' });
    expect(played.cards).toHaveLength(1);
    expect(played.cards[0]).toMatchObject({
      kind: 'escalation',
      toolName: 'bash',
      network: true,
      requestedPaths: [],
      grantKey: 'network',
      environmentId: `workspace:${env.ws}`,
      reason: 'the command talks to a local server',
      summary: "this once, additionally allow network access (the internet and the host's services on 127.0.0.1 and unix sockets)",
    });
    // The CLI shows it to the user as "network".
    const plain = styleFor(new PassThrough(), { NO_COLOR: '1' });
    expect(cardLines(played.cards[0]!, plain)).toContain(`  network: ${NETWORK_CARD_NOTE}`);
    expect(played.results[0]!.text).toContain('host-secret-page');
    expect(played.results[0]!.text).toContain('abstract-socket-hello');
    expect(played.results[0]!.text).toContain('file-socket-hello');
    expect(played.results[0]!.text).toContain('pg-connected');
    expect(httpHits).toBe(hits + 1);
    expect(abstractConnections).toBe(connections + 1);
    expect(fileSocketConnections).toBe(fileConnections + 1);
    // The grant was for that one call.
    expect(played.results[1]!.text).toMatch(/Connection refused/);
    expect(played.results[1]!.text).toMatch(/socket error EPERM/);
    expect(httpHits).toBe(hits + 1);
    expect(fileSocketConnections).toBe(fileConnections + 1);
  });

  it('deny: the command does not run and the turn ends permission_denied', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const s = await session();
    const hits = httpHits;
    const played = await s.turn([{ command: devTcp(httpPort), ...networkRequest }], () => 'deny');
    expect(played.cards).toHaveLength(1);
    expect(played.outcome).toMatchObject({ status: 'failed', code: 'permission_denied' });
    expect(httpHits).toBe(hits);
  });

  it('allow_for_session covers the next network-only request without a card; allow_for_turn ends with the turn', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const perTurn = await session();
    const hits = httpHits;
    const first = await perTurn.turn([{ command: devTcp(httpPort), ...networkRequest }, { command: curl(httpPort), ...networkRequest }], () => 'allow_for_turn');
    expect(first.cards).toHaveLength(1);
    expect(first.results.map((r) => r.text.includes('host-secret-page'))).toEqual([true, true]);
    const second = await perTurn.turn([{ command: devTcp(httpPort), ...networkRequest }], () => 'allow_once');
    expect(second.cards).toHaveLength(1);
    expect(httpHits).toBe(hits + 3);

    const perSession = await session();
    const granted = await perSession.turn([{ command: devTcp(httpPort), ...networkRequest }], () => 'allow_for_session');
    expect(granted.cards).toHaveLength(1);
    const later = await perSession.turn([{ command: curl(httpPort), ...networkRequest }, { command: curl(httpPort) }]);
    expect(later.cards).toEqual([]);
    expect(later.results[0]!.text).toContain('host-secret-page');
    // A call that does not ask for the network has none, grant or not.
    expect(later.results[1]!.text).not.toContain('host-secret-page');
    expect(httpHits).toBe(hits + 5);
  });

  it('a network request with paths has its own key; a file tool cannot ask for the network', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const s = await session();
    const target = `${env.outside}/net-and-path.txt`;
    const played = await s.turn(
      [{ command: `${devTcp(httpPort)} > ${target}`, sandboxPermissions: { network: true, paths: [{ path: target, access: 'write', scope: 'exact' }] }, justification: 'save the page' }],
      () => 'allow_once',
    );
    expect(played.cards[0]).toMatchObject({ network: true, grantKey: `escalation:${JSON.stringify([[target, 'write', 'exact']])}|network` });
    expect(played.results[0]!.status).toBe('success');
    const write = env.tools.get('write')!;
    expect(write.parameters.safeParse({ path: 'x', content: 'y', sandboxPermissions: { paths: [], network: true }, justification: 'x' }).success).toBe(false);
  });
});
