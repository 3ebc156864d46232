/**
 * The inspector server's HTTP edge: a per-launch secret on every request (the printed address's
 * token traded for an HttpOnly SameSite=Strict cookie, or a bearer header), loopback only (bind
 * address, Host, Origin), JSON commands
 * validated by zod, bodies over 1 MiB refused, the runtime's error codes mapped to statuses (a
 * core that has shut down answers core_closed), replay and snapshot for reconnects, compaction
 * and rewind with their checkpoints, the event stream, and the page served with no outside resource.
 */
import { request } from 'node:http';
import { connect } from 'node:net';
import { describe, expect, it } from 'vitest';
import { createActorTracker } from '../../../src/inspector/server/actor-tracker.js';
import { startInspectorServer, type InspectorServer } from '../../../src/inspector/server/server.js';
import type { SessionUpdateEnvelope } from '../../../src/protocol/updates.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { harness, type Harness } from '../../support/harness.js';
import { compactingModel } from '../../support/summaries.js';
import { usePglite } from '../../support/databases.js';

interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  json: { error?: { code: string; message: string }; [key: string]: unknown };
}

/** Sends the server's secret as a bearer token unless `token` says otherwise (`null`: none at all). */
function call(server: InspectorServer, method: string, path: string, options: { body?: unknown; headers?: Record<string, string>; token?: string | null } = {}): Promise<Reply> {
  const token = options.token === undefined ? server.token : options.token;
  return new Promise((resolve, reject) => {
    const body = options.body === undefined ? undefined : typeof options.body === 'string' ? options.body : JSON.stringify(options.body);
    const req = request(
      {
        host: '127.0.0.1',
        port: server.port,
        method,
        path,
        headers: {
          host: `127.0.0.1:${server.port}`,
          ...(token !== null ? { authorization: `Bearer ${token}` } : {}),
          ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
          ...options.headers,
        },
      },
      (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += String(d)));
        res.on('end', () => {
          let json = {};
          try {
            json = JSON.parse(text);
          } catch {
            json = {};
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text, json });
        });
      },
    );
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

/**
 * Sends a POST of `size` bytes, raw: `declared` sends only the headers with that Content-Length
 * (the answer must come without the body), `chunked` streams chunks until the server answers.
 */
function postLarge(server: InspectorServer, path: string, size: number, mode: 'declared' | 'chunked'): Promise<{ status: number; head: string; body: string; sentBytes: number }> {
  return new Promise((resolve, reject) => {
    const socket = connect(server.port, '127.0.0.1');
    let received = '';
    let sent = 0;
    let stopped = false;
    const headers = [
      `POST ${path} HTTP/1.1`,
      `host: 127.0.0.1:${server.port}`,
      `authorization: Bearer ${server.token}`,
      'content-type: application/json',
      mode === 'declared' ? `content-length: ${size}` : 'transfer-encoding: chunked',
    ];
    socket.on('error', (error: NodeJS.ErrnoException) => {
      // The server may close while we still write; what it answered is all that matters.
      if (error.code !== 'EPIPE' && error.code !== 'ECONNRESET') reject(error);
    });
    socket.on('data', (d: Buffer) => {
      received += String(d);
      stopped = true;
    });
    socket.on('close', () => {
      const [head = '', body = ''] = received.split('\r\n\r\n');
      resolve({ status: Number(/^HTTP\/1\.1 (\d+)/.exec(head)?.[1] ?? 0), head, body, sentBytes: sent });
    });
    socket.write(`${headers.join('\r\n')}\r\n\r\n`);
    // A declared length is judged from the header alone: no byte of the body is sent.
    if (mode === 'declared') return;
    const piece = 'x'.repeat(64 * 1024);
    const pump = () => {
      while (!stopped && sent < size && !socket.destroyed) {
        const n = Math.min(piece.length, size - sent);
        const data = piece.slice(0, n);
        sent += n;
        const ok = socket.write(mode === 'chunked' ? `${n.toString(16)}\r\n${data}\r\n` : data);
        if (!ok) {
          socket.once('drain', pump);
          return;
        }
      }
      if (!stopped && mode === 'chunked' && !socket.destroyed) socket.write('0\r\n\r\n');
    };
    pump();
  });
}

/** Opens the event stream and collects its events until `stop` is called. */
function openEvents(server: InspectorServer) {
  const events: Array<{ event: string; data: unknown }> = [];
  let buffer = '';
  const req = request({ host: '127.0.0.1', port: server.port, path: '/api/events', headers: { host: `localhost:${server.port}`, authorization: `Bearer ${server.token}` } }, (res) => {
    res.on('data', (d: Buffer) => {
      buffer += String(d);
      let end: number;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const event = /^event: (.*)$/m.exec(frame)?.[1];
        const data = /^data: (.*)$/m.exec(frame)?.[1];
        if (event && data) events.push({ event, data: JSON.parse(data) });
      }
    });
  });
  req.on('error', () => undefined);
  req.end();
  return { events, stop: () => req.destroy() };
}

async function until(check: () => boolean, timeoutMs = 5_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('inspector server', () => {
  let storage: SqlSessionStorage;
  let h: Harness;
  let server: InspectorServer;
  const tracker = createActorTracker();

  usePglite((s) => (storage = s));

  async function start(steps: Parameters<typeof harness>[1]) {
    h = await harness(storage, steps, { inspect: tracker.inspect });
    server = await startInspectorServer({ core: h.core, tracker, label: 'test runtime', heartbeatMs: 100 });
    return server;
  }

  it('binds only to loopback and answers only to loopback Host names', async () => {
    const core = (await harness(storage, [])).core;
    await expect(startInspectorServer({ core, tracker, host: '0.0.0.0' })).rejects.toMatchObject({ code: 'inspector_not_loopback' });
    await expect(startInspectorServer({ core, tracker, host: '192.168.1.10' })).rejects.toMatchObject({ code: 'inspector_not_loopback' });
    const s = await start([]);
    expect(s.origin).toBe(`http://127.0.0.1:${s.port}/`);
    expect(s.url).toBe(`http://127.0.0.1:${s.port}/?token=${s.token}`);
    const rebinding = await call(s, 'GET', '/api/info', { headers: { host: `evil.example:${s.port}` } });
    expect(rebinding.status).toBe(421);
    expect(rebinding.json.error?.code).toBe('forbidden_host');
    const info = await call(s, 'GET', '/api/info', { headers: { host: `localhost:${s.port}` } });
    expect(info.status).toBe(200);
    expect(info.json).toMatchObject({ label: 'test runtime', machines: ['session', 'turn', 'toolCall'] });
    // A request read to its end leaves the connection open for the next one.
    expect(info.headers.connection).toBe('keep-alive');
    await s.close();
  });

  it('every request needs the per-launch secret: printed once in the address, then a cookie or a bearer header', async () => {
    const s = await start([]);
    // 256 random bits, base64url, fresh for every server.
    expect(s.token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const other = await startInspectorServer({ core: h.core, tracker });
    expect(other.token).not.toBe(s.token);
    await other.close();
    const sessionsBefore = (await h.core.listSessions({ limit: 200 })).length;
    const paths = ['/', '/assets/app.js', '/api/info', '/api/machines', '/api/events', '/api/sessions', `/api/sessions/${h.session.sessionId}/state`, `/api/sessions/${h.session.sessionId}/updates?after=0`];
    for (const path of paths) {
      const none = await call(s, 'GET', path, { token: null });
      expect([path, none.status, none.json.error?.code]).toEqual([path, 401, 'token_required']);
      const wrong = await call(s, 'GET', path, { token: s.token.slice(0, -1) + (s.token.endsWith('A') ? 'B' : 'A') });
      expect([path, wrong.status, wrong.json.error?.code]).toEqual([path, 403, 'token_invalid']);
      // The token in a query string is accepted only at the entry address, never on the API.
      const query = await call(s, 'GET', `${path}${path.includes('?') ? '&' : '?'}token=${s.token}`, { token: null });
      expect(query.status, path).toBe(path === '/' ? 303 : 401);
    }
    // Commands too, before their body is even looked at; nothing was started.
    const base = `/api/sessions/${h.session.sessionId}`;
    for (const [path, body] of [
      [`${base}/turns`, { clientRequestId: 'c', text: 'hi' }],
      [`${base}/turns/turn_x/permissions/tc_x`, { decision: 'allow_once' }],
      ['/api/sessions', {}],
    ] as const) {
      const none = await call(s, 'POST', path, { body, token: null });
      expect([path, none.status, none.json.error?.code]).toEqual([path, 401, 'token_required']);
      const empty = await call(s, 'POST', path, { body, token: null, headers: { authorization: 'Bearer' } });
      expect([path, empty.status, empty.json.error?.code]).toEqual([path, 403, 'token_invalid']);
    }
    expect(h.session.snapshot().runtime).toEqual({ type: 'idle' });
    expect((await h.core.listSessions({ limit: 200 })).length).toBe(sessionsBefore);

    // The printed address sets the cookie and sends the browser to the bare address.
    const entry = await call(s, 'GET', `/?token=${s.token}`, { token: null });
    expect(entry.status).toBe(303);
    expect(entry.headers.location).toBe('/');
    const cookie = String(entry.headers['set-cookie']);
    expect(cookie).toBe(`openwork_inspector_${s.port}=${s.token}; Path=/; HttpOnly; SameSite=Strict`);
    const badEntry = await call(s, 'GET', `/?token=${'x'.repeat(43)}`, { token: null });
    expect([badEntry.status, badEntry.json.error?.code, badEntry.headers['set-cookie']]).toEqual([403, 'token_invalid', undefined]);
    const cookieHeader = cookie.split(';')[0]!;
    const page = await call(s, 'GET', '/', { token: null, headers: { cookie: `theme=dark; ${cookieHeader}` } });
    expect(page.status).toBe(200);
    const info = await call(s, 'GET', '/api/info', { token: null, headers: { cookie: cookieHeader } });
    expect(info.status).toBe(200);
    // Another port's cookie (another inspector on this machine) is not this one's.
    const foreign = await call(s, 'GET', '/api/info', { token: null, headers: { cookie: `openwork_inspector_${s.port + 1}=${s.token}` } });
    expect([foreign.status, foreign.json.error?.code]).toEqual([401, 'token_required']);
    // With the secret, a request from another site's page is still refused (DNS rebinding, CSRF).
    const rebinding = await call(s, 'GET', '/api/info', { headers: { host: `attacker.example:${s.port}` } });
    expect([rebinding.status, rebinding.json.error?.code]).toEqual([421, 'forbidden_host']);
    const crossOrigin = await call(s, 'GET', '/api/sessions', { headers: { origin: 'http://attacker.example' } });
    expect([crossOrigin.status, crossOrigin.json.error?.code]).toEqual([403, 'forbidden_origin']);
    const crossSite = await call(s, 'GET', '/api/sessions', { headers: { 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'cors' } });
    expect([crossSite.status, crossSite.json.error?.code]).toEqual([403, 'forbidden_origin']);
    await s.close();
  });

  it('serves the page and its assets with a CSP that allows nothing from outside, and no path escapes', async () => {
    const s = await start([]);
    const page = await call(s, 'GET', '/');
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toContain('text/html');
    expect(page.headers['content-security-policy']).toContain("default-src 'none'");
    expect(page.headers['content-security-policy']).toContain("connect-src 'self'");
    // Every reference of the page is local.
    expect(page.body).not.toMatch(/(src|href)="(https?:)?\/\//);
    for (const asset of ['app.js', 'reducer.js', 'chart.js', 'style.css']) {
      const res = await call(s, 'GET', `/assets/${asset}`);
      expect(res.status).toBe(200);
      expect(res.body).not.toMatch(/https?:\/\/(?!www\.w3\.org\/2000\/svg)/);
    }
    for (const path of ['/assets/..%2F..%2Fpackage.json', '/assets/reducer.d.ts', '/assets/.hidden.js', '/nothing', '/api/nothing']) {
      const res = await call(s, 'GET', path);
      expect(res.status, path).toBe(404);
      expect(res.json.error?.code).toBe('not_found');
    }
    const machines = await call(s, 'GET', '/api/machines');
    expect((machines.json.machines as Array<{ id: string }>).map((m) => m.id)).toEqual(['session', 'turn', 'toolCall']);
    await s.close();
  });

  it('commands need JSON from the page itself; bodies are validated; the runtime codes come back with their status', async () => {
    const s = await start([{ toolCalls: [{ name: 'guarded', arguments: { action: 'x' } }] }, { hang: true }]);
    const base = `/api/sessions/${h.session.sessionId}`;
    const form = await call(s, 'POST', `${base}/turns`, { body: 'text=hi', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    expect([form.status, form.json.error?.code]).toEqual([415, 'unsupported_media_type']);
    const foreign = await call(s, 'POST', `${base}/turns`, { body: { clientRequestId: 'c', text: 'hi' }, headers: { origin: 'https://evil.example' } });
    expect([foreign.status, foreign.json.error?.code]).toEqual([403, 'forbidden_origin']);
    const crossSite = await call(s, 'POST', `${base}/turns`, { body: { clientRequestId: 'c', text: 'hi' }, headers: { 'sec-fetch-site': 'cross-site' } });
    expect([crossSite.status, crossSite.json.error?.code]).toEqual([403, 'forbidden_origin']);
    const badJson = await call(s, 'POST', `${base}/turns`, { body: '{nope' });
    expect([badJson.status, badJson.json.error?.code]).toEqual([400, 'invalid_json']);
    const extra = await call(s, 'POST', `${base}/turns`, { body: { clientRequestId: 'c', text: 'hi', admin: true } });
    expect([extra.status, extra.json.error?.code]).toEqual([400, 'invalid_request']);
    const empty = await call(s, 'POST', `${base}/turns`, { body: { clientRequestId: 'c', text: '   ' } });
    expect([empty.status, empty.json.error?.code]).toEqual([400, 'empty_input']);
    const put = await call(s, 'PUT', `${base}/turns`, { body: {} });
    expect([put.status, put.json.error?.code]).toEqual([405, 'method_not_allowed']);
    const unknown = await call(s, 'GET', '/api/sessions/ses_missing/state');
    expect([unknown.status, unknown.json.error?.code]).toEqual([404, 'session_not_found']);

    const started = await call(s, 'POST', `${base}/turns`, { body: { clientRequestId: 'c-1', text: 'go' }, headers: { origin: `http://127.0.0.1:${s.port}` } });
    expect(started.status).toBe(202);
    expect(started.headers.connection).toBe('keep-alive');
    const turnId = started.json.turnId as string;
    const busy = await call(s, 'POST', `${base}/turns`, { body: { clientRequestId: 'c-2', text: 'again' } });
    expect([busy.status, busy.json.error?.code]).toEqual([409, 'busy']);
    const requested = await h.waitFor((e) => e.update.type === 'permission_requested');
    const toolCallId = (requested.update as { toolCallId: string }).toolCallId;
    const badDecision = await call(s, 'POST', `${base}/turns/${turnId}/permissions/${toolCallId}`, { body: { decision: 'always' } });
    expect([badDecision.status, badDecision.json.error?.code]).toEqual([400, 'invalid_request']);
    const wrongTurn = await call(s, 'POST', `${base}/turns/turn_other/permissions/${toolCallId}`, { body: { decision: 'allow_once' } });
    expect([wrongTurn.status, wrongTurn.json.error?.code]).toEqual([409, 'turn_not_active']);
    const state = await call(s, 'GET', `${base}/state`);
    expect(state.json).toMatchObject({
      snapshot: { runtime: { type: 'running', turnId, phase: 'waiting_permission', pendingApprovals: [{ toolCallId }] } },
      status: { type: 'active', activeFlags: ['waiting_on_approval'] },
    });
    expect((state.json.actors as Array<{ actorId: string }>).map((a) => a.actorId)).toEqual(expect.arrayContaining(['turn', 'toolCall']));
    const allowed = await call(s, 'POST', `${base}/turns/${turnId}/permissions/${toolCallId}`, { body: { decision: 'allow_for_turn' } });
    expect(allowed.status).toBe(202);
    const twice = await call(s, 'POST', `${base}/turns/${turnId}/permissions/${toolCallId}`, { body: { decision: 'deny' } });
    expect([twice.status, twice.json.error?.code]).toEqual([409, 'permission_not_pending']);
    await h.waitFor((e) => e.update.type === 'phase_changed' && e.update.phase === 'running_model' && e.sequence > requested.sequence);
    const steered = await call(s, 'POST', `${base}/turns/${turnId}/steer`, { body: { text: 'also this' } });
    expect(steered.status).toBe(202);
    const cancelled = await call(s, 'POST', `${base}/turns/${turnId}/cancel`, { body: {} });
    expect(cancelled.status).toBe(202);
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
    const late = await call(s, 'POST', `${base}/turns/${turnId}/cancel`, { body: {} });
    expect([late.status, late.json.error?.code]).toEqual([409, 'turn_not_active']);
    await s.close();
  });

  it('replays from a sequence, answers snapshot_required beyond the buffer, and keeps one epoch per loaded session', async () => {
    const s = await start([{ text: 'y'.repeat(600), chunk: 1 }]);
    const base = `/api/sessions/${h.session.sessionId}`;
    await h.run('stream');
    const last = h.updates.at(-1)!.sequence;
    const replay = await call(s, 'GET', `${base}/updates?after=${last - 3}`);
    expect(replay.status).toBe(200);
    expect((replay.json.updates as SessionUpdateEnvelope[]).map((u) => u.sequence)).toEqual([last - 2, last - 1, last]);
    const epoch = replay.json.epoch as string;
    const gone = await call(s, 'GET', `${base}/updates?after=0`);
    expect([gone.status, gone.json.error?.code]).toEqual([409, 'snapshot_required']);
    const bad = await call(s, 'GET', `${base}/updates?after=-1`);
    expect([bad.status, bad.json.error?.code]).toEqual([400, 'invalid_request']);
    const state = await call(s, 'GET', `${base}/state`);
    expect(state.json).toMatchObject({ epoch, snapshot: { lastUpdateSequence: last, runtime: { type: 'terminal', outcome: { status: 'completed' } } } });
    const messages = await call(s, 'GET', `${base}/messages`);
    expect((messages.json.messages as Array<{ role: string }>).map((m) => m.role)).toEqual(['user', 'assistant']);
    // Loaded again, the session restarts its sequence: a new epoch tells the page not to mix them.
    await h.session.shutdown();
    const reloaded = await call(s, 'GET', `${base}/state`);
    expect(reloaded.status).toBe(200);
    expect(reloaded.json.epoch).not.toBe(epoch);
    expect(reloaded.json).toMatchObject({ snapshot: { lastUpdateSequence: 0, runtime: { type: 'terminal' } } });
    const sessions = await call(s, 'GET', '/api/sessions');
    expect(sessions.json.sessions).toContainEqual(expect.objectContaining({ sessionId: h.session.sessionId, epoch: reloaded.json.epoch, status: { type: 'idle' } }));
    await s.close();
  });

  it('streams hello, every update with its epoch, actor changes and transitions; creating a session is announced', async () => {
    const s = await start([{ toolCalls: [{ name: 'echo', arguments: { text: 'a' } }] }, { text: 'done' }]);
    const stream = openEvents(s);
    await until(() => stream.events.some((e) => e.event === 'hello'));
    expect(stream.events[0]).toMatchObject({ event: 'hello', data: { label: 'test runtime', instanceId: expect.any(String) } });
    const { turnId } = await h.run('go');
    await until(() => stream.events.some((e) => e.event === 'update' && (e.data as { envelope: SessionUpdateEnvelope }).envelope.update.type === 'turn_finished'));
    const updates = stream.events.filter((e) => e.event === 'update').map((e) => e.data as { epoch: string; envelope: SessionUpdateEnvelope });
    expect(updates.map((u) => u.envelope)).toEqual(h.updates);
    expect(new Set(updates.map((u) => u.epoch)).size).toBe(1);
    const turnActors = stream.events.filter((e) => e.event === 'actor' && (e.data as { actor: { actorId: string } }).actor.actorId === 'turn');
    expect(turnActors.length).toBeGreaterThan(3);
    expect(stream.events).toContainEqual({
      event: 'transition',
      data: { type: 'transition', transition: expect.objectContaining({ actorId: 'turn', from: 'ending', to: 'completed', sessionId: h.session.sessionId }) },
    });
    expect(turnId).toBeTruthy();
    const created = await call(s, 'POST', '/api/sessions', { body: { title: 'second' } });
    expect(created.status).toBe(201);
    await until(() => stream.events.some((e) => e.event === 'sessions'));
    const badTitle = await call(s, 'POST', '/api/sessions', { body: { title: '' } });
    expect([badTitle.status, badTitle.json.error?.code]).toEqual([400, 'invalid_request']);
    // Heartbeats keep idle streams open; closing the server ends them.
    await s.close();
    stream.stop();
  });

  it('refuses a body over 1 MiB with payload_too_large, declared or chunked, and closes that connection', async () => {
    const s = await start([]);
    const path = `/api/sessions/${h.session.sessionId}/turns`;
    const declared = await postLarge(s, path, 1024 * 1024 + 1, 'declared');
    expect(declared.status).toBe(413);
    expect(JSON.parse(declared.body)).toMatchObject({ error: { code: 'payload_too_large' } });
    expect(declared.head.toLowerCase()).toContain('connection: close');
    expect(declared.sentBytes).toBe(0);
    // A chunked body is cut off once past the limit: the server stops reading long before 32 MiB.
    const chunked = await postLarge(s, path, 32 * 1024 * 1024, 'chunked');
    expect(chunked.status).toBe(413);
    expect(JSON.parse(chunked.body)).toMatchObject({ error: { code: 'payload_too_large', message: 'the body exceeds 1048576 bytes' } });
    expect(chunked.head.toLowerCase()).toContain('connection: close');
    expect(chunked.sentBytes).toBeGreaterThan(1024 * 1024);
    expect(chunked.sentBytes).toBeLessThan(32 * 1024 * 1024);
    // Just under the limit is read and validated as usual; nothing was started by the refused bodies.
    const text = 'y'.repeat(200_001);
    const fits = await call(s, 'POST', path, { body: { clientRequestId: 'big', text } });
    expect([fits.status, fits.json.error?.code]).toEqual([400, 'invalid_request']);
    expect(h.session.snapshot().runtime).toEqual({ type: 'idle' });
    await s.close();
  });

  it('answers core_closed (503) once the core it serves has shut down', async () => {
    const s = await start([]);
    const sessionId = h.session.sessionId;
    expect((await call(s, 'GET', `/api/sessions/${sessionId}/state`)).status).toBe(200);
    await h.core.shutdown();
    const created = await call(s, 'POST', '/api/sessions', { body: { title: 'late' } });
    expect([created.status, created.json.error?.code]).toEqual([503, 'core_closed']);
    // The handle is gone with the core; loading it again is refused the same way.
    const state = await call(s, 'GET', `/api/sessions/${sessionId}/state`);
    expect([state.status, state.json.error?.code]).toEqual([503, 'core_closed']);
    const turn = await call(s, 'POST', `/api/sessions/${sessionId}/turns`, { body: { clientRequestId: 'c', text: 'hi' } });
    expect([turn.status, turn.json.error?.code]).toEqual([503, 'core_closed']);
    await s.close();
  });

  it('compacts and rewinds between turns; the checkpoints and the conversation_compacted update follow', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    h = await harness(storage, compactingModel([{ text: 'first answer' }, { gate, step: { text: 'second answer' } }]), { inspect: tracker.inspect });
    server = await startInspectorServer({ core: h.core, tracker, heartbeatMs: 100 });
    const s = server;
    const stream = openEvents(s);
    const base = `/api/sessions/${h.session.sessionId}`;
    expect((await call(s, 'GET', `${base}/checkpoints`)).json.checkpoints).toEqual([]);
    const empty = await call(s, 'POST', `${base}/compact`, { body: {} });
    expect([empty.status, empty.json.error?.code]).toEqual([500, 'compaction_error']);
    await h.run('hello');
    const extra = await call(s, 'POST', `${base}/compact`, { body: { now: true } });
    expect([extra.status, extra.json.error?.code]).toEqual([400, 'invalid_request']);
    const compacted = await call(s, 'POST', `${base}/compact`, { body: {} });
    expect(compacted.status).toBe(200);
    expect(compacted.json).toMatchObject({ kind: 'manual', summarized: true, compactionId: expect.stringMatching(/^cmp_/), conversationTokensBefore: expect.any(Number) });
    const compactionId = compacted.json.compactionId as string;
    const checkpoints = (await call(s, 'GET', `${base}/checkpoints`)).json.checkpoints as Array<Record<string, unknown>>;
    expect(checkpoints).toEqual([
      expect.objectContaining({ compactionId, kind: 'manual', throughMessageSequence: 2, summary: expect.stringContaining('## 9. Next Safe Action') }),
    ]);
    await until(() => stream.events.some((e) => e.event === 'update' && (e.data as { envelope: SessionUpdateEnvelope }).envelope.update.type === 'conversation_compacted'));
    const update = stream.events.find((e) => e.event === 'update' && (e.data as { envelope: SessionUpdateEnvelope }).envelope.update.type === 'conversation_compacted')!.data as {
      parentSessionId: string | null;
      envelope: SessionUpdateEnvelope;
    };
    expect(update).toMatchObject({ parentSessionId: null, envelope: { turnId: null, update: { compactionId, kind: 'manual', conversationTokensAfter: compacted.json.conversationTokensAfter } } });

    // During a turn both are refused with session_active; a checkpoint that does not exist is 404.
    const turnId = await h.start('again');
    await h.waitFor((e) => e.turnId === turnId && e.update.type === 'phase_changed' && e.update.phase === 'running_model');
    const busy = await call(s, 'POST', `${base}/compact`, { body: {} });
    expect([busy.status, busy.json.error?.code]).toEqual([409, 'session_active']);
    const busyRewind = await call(s, 'POST', `${base}/rewind`, { body: { compactionId } });
    expect([busyRewind.status, busyRewind.json.error?.code]).toEqual([409, 'session_active']);
    release();
    await h.session.waitForTurn(turnId);
    const missing = await call(s, 'POST', `${base}/rewind`, { body: { compactionId: 'cmp_missing' } });
    expect([missing.status, missing.json.error?.code]).toEqual([404, 'checkpoint_not_found']);
    const noId = await call(s, 'POST', `${base}/rewind`, { body: {} });
    expect([noId.status, noId.json.error?.code]).toEqual([400, 'invalid_request']);
    const rewound = await call(s, 'POST', `${base}/rewind`, { body: { compactionId } });
    expect(rewound.status).toBe(200);
    expect(rewound.json).toMatchObject({ kind: 'rewind', compactionId: expect.stringMatching(/^cmp_/) });
    expect(rewound.json.compactionId).not.toBe(compactionId);
    const after = (await call(s, 'GET', `${base}/checkpoints`)).json.checkpoints as Array<{ compactionId: string; kind: string; parentCompactionId: string | null }>;
    expect(after.map((c) => [c.kind, c.parentCompactionId])).toEqual([
      ['manual', null],
      ['rewind', compactionId],
    ]);
    // Nothing was deleted: every raw message is still there.
    expect(((await call(s, 'GET', `${base}/messages`)).json.messages as unknown[]).length).toBe(4);
    stream.stop();
    await s.close();
  });
});
