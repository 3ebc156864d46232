/**
 * @module inspection/server
 * `startInspectorServer`: the loopback-only HTTP server behind the inspector page. It serves the
 * page (no outside resource), one Server-Sent Events stream (every SessionUpdate envelope of the
 * core and every change of the actor trees), the statecharts, the snapshot and replay for
 * reconnects, the session commands (start, steer, cancel, answer a card, compact, rewind), the
 * checkpoints of a session, the sub-agents of a root session, and the stored trace of each turn
 * (`/api/sessions/<id>/turns`, `/api/sessions/<id>/turns/<turnId>/trace`, read from the trace tables).
 *
 * Every request needs the server's per-launch secret (see `auth.ts`): the address it prints
 * carries it once (`/?token=…`), the page keeps it in an HttpOnly cookie, and other clients send
 * `Authorization: Bearer <token>`. A tool in the sandbox that reaches the port still cannot read
 * anything or decide a card. A decision names its session, turn and tool call, and the session's
 * machine applies it only to that session's pending card of that turn.
 *
 * Each loaded session handle gets an `epoch`: sequence numbers restart when a session is loaded
 * again, so a page that remembers a sequence of another epoch must take the snapshot instead.
 */
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { dirname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Subscription } from 'rxjs';
import type { AnyStateMachine } from 'xstate';
import { z } from 'zod';
import type { Core } from '../../core.js';
import { InspectionError } from '../../errors.js';
import { sessionMachine } from '../../machines/session/machine.js';
import { toolCallMachine } from '../../machines/tool-call/machine.js';
import { turnMachine } from '../../machines/turn/machine.js';
import { permissionDecisionSchema } from '../../protocol/input.js';
import { userInputAnswersSchema } from '../../protocol/user-input.js';
import type { SessionHandle } from '../../session-handle.js';
import type { CompactionResult } from '../../services/compaction/compaction.js';
import type { CheckpointRecord } from '../../storage/storage.js';
import type { ActorTracker, TrackerChange } from './actor-tracker.js';
import { machineChart, type MachineChart } from './charts.js';
import { layoutChart, type ChartLayout } from './chart-layout.js';
import { turnSummary, turnTrace } from './trace.js';
import { checkToken, newInspectorToken, tokenCookie, tokenMatches } from './auth.js';
import { HttpError, LOOPBACK_HOSTS, allowedHosts, checkCommandRequest, checkHost, checkOrigin, pathSegments, readJson, sendError, sendJson, writeHead } from './http.js';

export interface InspectorServerOptions {
  core: Core;
  /** The tracker whose `inspect` observer was given to `createCore`. */
  tracker: ActorTracker;
  /** A loopback address (default `127.0.0.1`); anything else is refused with `inspector_not_loopback`. */
  host?: string;
  /** Default 0: any free port. */
  port?: number;
  /** Where index.html, app.js and the rest live (default: the package's `inspector/page`). */
  pageDir?: string;
  /** The working directory of sessions created from the page (default `process.cwd()`). */
  workingDirectory?: string;
  /** Creates a session for the page's "New session" button; defaults to `core.createSession`. */
  createSession?: (options: { title?: string }) => Promise<SessionHandle>;
  /** Shown in the page header, e.g. which model the runtime uses. */
  label?: string;
  /** The machines drawn on the page (default: session, turn, tool call). */
  machines?: AnyStateMachine[];
  /** Comment lines that keep idle event streams open (default 15 s). */
  heartbeatMs?: number;
}

export interface InspectorServer {
  /** The address to open: it carries the secret (`http://127.0.0.1:<port>/?token=…`). Show it only to the user. */
  readonly url: string;
  /** The bare address (`http://127.0.0.1:<port>/`), for building API paths. */
  readonly origin: string;
  readonly port: number;
  /** The per-launch secret; API clients send it as `Authorization: Bearer <token>`. */
  readonly token: string;
  /** Ends every event stream and stops listening. The core is left running. */
  close(): Promise<void>;
}

/** The page: copied into `dist/inspector/page` by the build; in a clone, `inspector/page` beside `src/`. */
const HERE = dirname(fileURLToPath(import.meta.url));
const DEFAULT_PAGE_DIR = [resolve(HERE, '..', 'page'), resolve(HERE, '..', '..', '..', 'inspector', 'page')].find((dir) => existsSync(join(dir, 'index.html'))) ?? resolve(HERE, '..', '..', '..', 'inspector', 'page');
const ASSET = /^[a-z0-9][a-z0-9-]*\.(html|js|css|png|svg)$/;
const CONTENT_TYPES: Record<string, string> = {
  html: 'text/html; charset=utf-8',
  js: 'text/javascript; charset=utf-8',
  css: 'text/css; charset=utf-8',
  png: 'image/png',
  svg: 'image/svg+xml',
};
/** A client that reads this far behind is dropped; it reconnects and resynchronises. */
const MAX_PENDING_BYTES = 8 * 1024 * 1024;

const createSessionBody = z.strictObject({ title: z.string().trim().min(1).max(200).optional() });
const startTurnBody = z.strictObject({ clientRequestId: z.string().trim().min(1).max(200), text: z.string().max(200_000) });
const steerBody = z.strictObject({ text: z.string().max(200_000) });
const decisionBody = z.strictObject({ decision: permissionDecisionSchema });
const answersBody = z.strictObject({ answers: userInputAnswersSchema });
const rewindBody = z.strictObject({ compactionId: z.string().trim().min(1).max(200) });
const emptyBody = z.strictObject({});

/** What the page shows of a checkpoint: its boundaries and summary (the runtime state stays server-side). */
function checkpointJson(c: CheckpointRecord) {
  return {
    compactionId: c.id,
    sequence: c.sequence,
    kind: c.kind,
    throughMessageSequence: c.throughMessageSequence,
    replacedThroughMessageSequence: c.replacedThroughMessageSequence,
    sourceMessageCount: c.sourceMessageCount,
    parentCompactionId: c.parentCompactionId,
    triggerTurnId: c.triggerTurnId,
    summary: c.summary,
    createdAt: c.createdAt,
  };
}

function compactionJson(result: CompactionResult) {
  return {
    kind: result.kind,
    summarized: result.summarized,
    compactionId: result.checkpoint?.id ?? null,
    conversationTokensBefore: result.conversationTokensBefore,
    conversationTokensAfter: result.conversationTokensAfter,
  };
}

/**
 * Serves the inspector page for `core` on a loopback address.
 *
 * @example
 * const tracker = createActorTracker();
 * const core = await createCore({ storage, model, inspect: tracker.inspect });
 * const server = await startInspectorServer({ core, tracker, port: 4477 });
 * console.log(`open ${server.url}`);
 */
export async function startInspectorServer(options: InspectorServerOptions): Promise<InspectorServer> {
  const host = options.host ?? '127.0.0.1';
  if (!LOOPBACK_HOSTS.has(host)) {
    throw new InspectionError('inspector_not_loopback', `the inspector binds only to loopback addresses, not ${JSON.stringify(host)}`);
  }
  const { core, tracker } = options;
  const pageDir = options.pageDir ?? DEFAULT_PAGE_DIR;
  const instanceId = randomUUID();
  // Kept in memory only: never in a file, the environment or a command line a tool could read.
  const token = newInspectorToken();
  const charts: MachineChart[] = (options.machines ?? [sessionMachine, turnMachine, toolCallMachine]).map(machineChart);
  // Laid out once, in a worker, on the first request (not at start: it would compete with the start-up).
  let layouts: Promise<Array<MachineChart & { layout: ChartLayout }>> | null = null;
  const laidOutCharts = () => {
    layouts ??= Promise.all(charts.map(async (c) => ({ ...c, layout: await layoutChart(c) })));
    layouts.catch(() => {
      layouts = null;
    });
    return layouts;
  };
  const epochs = new WeakMap<SessionHandle, string>();
  const streams = new Set<ServerResponse>();
  const heartbeatMs = options.heartbeatMs ?? 15_000;
  let hosts = new Set<string>();
  let port = 0;

  function epochOf(handle: SessionHandle): string {
    let epoch = epochs.get(handle);
    if (!epoch) {
      epoch = randomUUID().slice(0, 8);
      epochs.set(handle, epoch);
    }
    return epoch;
  }

  async function handleOf(sessionId: string): Promise<SessionHandle> {
    return core.session(sessionId) ?? core.loadSession(sessionId);
  }

  function broadcast(event: string, data: unknown): void {
    const frame = `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
    for (const res of streams) {
      if (res.writableLength > MAX_PENDING_BYTES) {
        res.destroy();
        streams.delete(res);
        continue;
      }
      res.write(frame);
    }
  }

  const subscriptions: Subscription[] = [
    core.updates$.subscribe((envelope) => {
      const handle = core.session(envelope.sessionId);
      // A sub-agent's updates carry its own session id; the page files them under their root.
      broadcast('update', { epoch: handle ? epochOf(handle) : null, parentSessionId: handle?.info.parentSessionId ?? null, envelope });
    }),
    tracker.changes$.subscribe((change: TrackerChange) => {
      broadcast(change.type, change);
    }),
  ];

  async function sessionsList() {
    const records = await core.listSessions({ limit: 200 });
    return records.map((r) => {
      const handle = core.session(r.id);
      return {
        sessionId: r.id,
        title: r.title,
        workingDirectory: r.workingDirectory,
        createdAt: r.createdAt,
        lastTurnAt: r.lastTurnAt,
        status: core.status(r.id),
        epoch: handle ? epochOf(handle) : null,
      };
    });
  }

  function openStream(req: IncomingMessage, res: ServerResponse): void {
    writeHead(res, 200, { 'content-type': 'text/event-stream; charset=utf-8', connection: 'keep-alive' });
    res.write(`retry: 1000\n`);
    res.write(`event: hello\ndata: ${JSON.stringify({ instanceId, label: options.label ?? null, actors: tracker.actors() })}\n\n`);
    streams.add(res);
    const heartbeat = setInterval(() => res.write(': ping\n\n'), heartbeatMs);
    heartbeat.unref();
    const close = () => {
      clearInterval(heartbeat);
      streams.delete(res);
    };
    req.on('close', close);
    res.on('error', close);
  }

  async function serveAsset(res: ServerResponse, name: string): Promise<void> {
    if (!ASSET.test(name)) throw new HttpError(404, 'not_found', `no asset ${name}`);
    const path = join(pageDir, name);
    if (!path.startsWith(pageDir + sep)) throw new HttpError(404, 'not_found', `no asset ${name}`);
    let body: Buffer;
    try {
      body = await readFile(path);
    } catch {
      throw new HttpError(404, 'not_found', `no asset ${name}`);
    }
    const ext = name.slice(name.lastIndexOf('.') + 1);
    writeHead(res, 200, { 'content-type': CONTENT_TYPES[ext] ?? 'application/octet-stream', 'content-length': String(body.length) });
    res.end(body);
  }

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    checkHost(req, hosts);
    checkOrigin(req, hosts);
    const url = new URL(req.url ?? '/', 'http://inspector.invalid');
    const method = req.method ?? 'GET';
    const isGet = method === 'GET' || method === 'HEAD';
    // The printed address: its token becomes the page's cookie, and the address bar loses it.
    if (isGet && url.pathname === '/' && url.searchParams.has('token')) {
      if (!tokenMatches(url.searchParams.get('token') ?? '', token)) {
        throw new HttpError(403, 'token_invalid', 'the token in this address is not this inspector\'s: open the address it printed');
      }
      writeHead(res, 303, { location: '/', 'set-cookie': tokenCookie(port, token), 'content-length': '0' });
      res.end();
      return;
    }
    checkToken(req, port, token);
    const parts = pathSegments(url.pathname);
    if (!isGet && method !== 'POST') throw new HttpError(405, 'method_not_allowed', `${method} is not supported`);
    if (!isGet) checkCommandRequest(req);

    if (isGet && parts.length === 0) return serveAsset(res, 'index.html');
    if (isGet && parts[0] === 'assets' && parts.length === 2) return serveAsset(res, parts[1]!);
    if (parts[0] !== 'api') throw new HttpError(404, 'not_found', `nothing at ${url.pathname}`);

    const [, resource, sessionId, sub, turnId, action, toolCallId] = parts;
    if (isGet && resource === 'events' && parts.length === 2) return openStream(req, res);
    if (isGet && resource === 'info' && parts.length === 2) {
      return sendJson(res, 200, { instanceId, label: options.label ?? null, machines: charts.map((c) => c.id) });
    }
    if (isGet && resource === 'machines' && parts.length === 2) return sendJson(res, 200, { machines: await laidOutCharts() });
    if (resource !== 'sessions') throw new HttpError(404, 'not_found', `nothing at ${url.pathname}`);

    if (parts.length === 2) {
      if (isGet) return sendJson(res, 200, { sessions: await sessionsList() });
      const body = await readJson(req, createSessionBody);
      const handle = options.createSession
        ? await options.createSession(body.title !== undefined ? { title: body.title } : {})
        : await core.createSession({ workingDirectory: options.workingDirectory ?? process.cwd(), ...(body.title !== undefined ? { title: body.title } : {}) });
      broadcast('sessions', { reason: 'created', sessionId: handle.sessionId });
      return sendJson(res, 201, { sessionId: handle.sessionId, epoch: epochOf(handle) });
    }

    const handle = await handleOf(sessionId!);
    const epoch = epochOf(handle);
    if (isGet && parts.length === 4 && sub === 'state') {
      return sendJson(res, 200, {
        epoch,
        parentSessionId: handle.info.parentSessionId,
        taskName: handle.info.taskName,
        snapshot: handle.snapshot(),
        status: handle.status(),
        actors: tracker.actors(handle.sessionId),
        transitions: tracker.transitions(handle.sessionId),
      });
    }
    if (isGet && parts.length === 4 && sub === 'updates') {
      const after = url.searchParams.get('after') ?? '0';
      if (!/^\d+$/.test(after)) throw new HttpError(400, 'invalid_request', 'after must be a non-negative integer');
      return sendJson(res, 200, { epoch, updates: handle.replayUpdates(Number(after)) });
    }
    if (isGet && parts.length === 4 && sub === 'messages') {
      const messages = await handle.messages();
      return sendJson(res, 200, { epoch, messages: messages.slice(-200) });
    }
    if (isGet && parts.length === 4 && sub === 'checkpoints') {
      const checkpoints = await handle.checkpoints();
      return sendJson(res, 200, { epoch, checkpoints: checkpoints.map(checkpointJson) });
    }
    if (isGet && parts.length === 4 && sub === 'agents') {
      const children = await core.listChildSessions(handle.sessionId);
      return sendJson(res, 200, {
        epoch,
        agents: children.map((c) => {
          const loaded = core.session(c.id);
          return { sessionId: c.id, taskName: c.taskName, agentRole: c.agentRole, createdAt: c.createdAt, status: core.status(c.id), epoch: loaded ? epochOf(loaded) : null };
        }),
      });
    }
    if (isGet && parts.length === 5 && sub === 'actors') {
      // The key names its session: a page cannot read another session's actors through this address.
      const key = parts[4]!;
      const detail = key.startsWith(`${handle.sessionId}/`) ? tracker.detail(key) : null;
      if (!detail) throw new HttpError(404, 'not_found', `no tracked actor ${key} in session ${handle.sessionId}`);
      return sendJson(res, 200, { epoch, ...detail });
    }
    if (isGet && parts.length === 4 && sub === 'turns') {
      const turns = await core.storage.listTurns(handle.sessionId);
      return sendJson(res, 200, { epoch, turns: turns.map(turnSummary) });
    }
    if (isGet && parts.length === 6 && sub === 'turns' && action === 'trace') {
      // Spans still queued in the recorder would be missing from a turn that just ended.
      await core.flushTrace(1_000);
      return sendJson(res, 200, { epoch, ...(await turnTrace(core.storage, handle.sessionId, turnId!)) });
    }
    if (!isGet && parts.length === 4 && sub === 'compact') {
      await readJson(req, emptyBody);
      const result = await handle.compactConversation();
      return sendJson(res, 200, { epoch, ...compactionJson(result) });
    }
    if (!isGet && parts.length === 4 && sub === 'rewind') {
      const body = await readJson(req, rewindBody);
      const result = await handle.rewindConversation(body.compactionId);
      return sendJson(res, 200, { epoch, ...compactionJson(result) });
    }
    if (!isGet && parts.length === 4 && sub === 'turns') {
      const body = await readJson(req, startTurnBody);
      const { turnId: started } = await handle.startTurn({ clientRequestId: body.clientRequestId, input: [{ type: 'text', text: body.text }] });
      return sendJson(res, 202, { epoch, turnId: started });
    }
    if (!isGet && parts.length === 6 && sub === 'turns' && action === 'cancel') {
      await readJson(req, emptyBody);
      await handle.cancelTurn(turnId!);
      return sendJson(res, 202, { epoch });
    }
    if (!isGet && parts.length === 6 && sub === 'turns' && action === 'steer') {
      const body = await readJson(req, steerBody);
      await handle.steerTurn(turnId!, [{ type: 'text', text: body.text }]);
      return sendJson(res, 202, { epoch });
    }
    if (!isGet && parts.length === 7 && sub === 'turns' && action === 'permissions') {
      const body = await readJson(req, decisionBody);
      await handle.resolvePermission(turnId!, toolCallId!, body.decision);
      return sendJson(res, 202, { epoch });
    }
    if (!isGet && parts.length === 7 && sub === 'turns' && action === 'user-input') {
      const body = await readJson(req, answersBody);
      await handle.answerUserInput(turnId!, toolCallId!, body.answers);
      return sendJson(res, 202, { epoch });
    }
    throw new HttpError(404, 'not_found', `nothing at ${method} ${url.pathname}`);
  }

  const server: Server = createServer((req, res) => {
    route(req, res).catch((error: unknown) => sendError(res, error));
  });

  await new Promise<void>((resolvePromise, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      resolvePromise();
    });
  });
  const address = server.address();
  port = typeof address === 'object' && address ? address.port : 0;
  hosts = allowedHosts(port);
  const urlHost = host === '::1' ? '[::1]' : host;
  const origin = `http://${urlHost}:${port}/`;

  return {
    url: `${origin}?token=${token}`,
    origin,
    port,
    token,
    async close() {
      for (const sub of subscriptions) sub.unsubscribe();
      for (const res of streams) res.end();
      streams.clear();
      await new Promise<void>((resolvePromise) => {
        server.close(() => resolvePromise());
        server.closeAllConnections();
      });
    },
  };
}
