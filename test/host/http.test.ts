/**
 * Issue 16.3: a turn over HTTP. `toSSE` on a real node:http server and `toResponse` (a web Response,
 * served by node:http through `Readable.fromWeb`), read by a real client (fetch) that parses the
 * Server-Sent Events as EventSource does: every update arrives in order and ends with
 * `turn_finished`, a refused start arrives as an `error` event with its code, a client more than 512
 * updates behind gets one `lagged` event and then the rest, and a client that goes away cancels the turn.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { toResponse, toSSE } from '../../src/host/http.js';
import type { SessionUpdateEnvelope } from '../../src/protocol/updates.js';
import type { SessionHandle } from '../../src/session-handle.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { harness } from '../support/harness.js';
import { usePglite } from '../support/databases.js';

interface SseEvent {
  event: string;
  id: string | null;
  data: string;
}

/** Reads an SSE body the way EventSource does: events end at a blank line; `data:` lines are joined. */
async function readEvents(response: Response, stopWhen?: (e: SseEvent) => boolean): Promise<SseEvent[]> {
  const events: SseEvent[] = [];
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let current: SseEvent = { event: 'message', id: null, data: '' };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return events;
    buffer += value;
    let newline: number;
    while ((newline = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, newline).replace(/\r$/, '');
      buffer = buffer.slice(newline + 1);
      if (line === '') {
        if (current.data !== '' || current.event !== 'message') {
          events.push({ ...current, data: current.data.replace(/\n$/, '') });
          if (stopWhen?.(events.at(-1)!)) {
            await reader.cancel();
            return events;
          }
        }
        current = { event: 'message', id: null, data: '' };
      } else if (line.startsWith(':')) {
        continue;
      } else {
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const val = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'data') current.data += `${val}\n`;
        else if (field === 'event') current.event = val;
        else if (field === 'id') current.id = val;
      }
    }
  }
}

type Mode = 'toSSE' | 'toResponse';

/** `behind`: the handler starts writing only once the turn has ended, as a server busy elsewhere would. */
async function serve(mode: Mode, session: () => SessionHandle, options: { behind?: boolean } = {}): Promise<{ url: string; server: Server }> {
  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    const { text } = JSON.parse(body) as { text: string };
    const stream = session().stream(text);
    if (options.behind) await stream.result;
    if (mode === 'toSSE') {
      await toSSE(stream, res);
      return;
    }
    // A web handler's Response, written by a minimal adapter as a framework would.
    const response = toResponse(stream);
    res.writeHead(response.status, Object.fromEntries(response.headers));
    const nodeBody = Readable.fromWeb(response.body! as import('node:stream/web').ReadableStream);
    res.on('close', () => nodeBody.destroy());
    nodeBody.pipe(res);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, server };
}

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    s.close();
  }
});

describe.each<Mode>(['toSSE', 'toResponse'])('a turn over HTTP with %s', (mode) => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  it('streams every update of the turn in order, ending with turn_finished', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'hi' } }] }, { text: 'Hello over HTTP.', chunk: 4 }]);
    const { url, server } = await serve(mode, () => h.session);
    servers.push(server);
    const response = await fetch(url, { method: 'POST', body: JSON.stringify({ text: 'say hello' }) });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = await readEvents(response);
    expect(events.every((e) => e.event === 'message')).toBe(true);
    const envelopes = events.map((e) => JSON.parse(e.data) as SessionUpdateEnvelope);
    expect(events.map((e) => Number(e.id))).toEqual(envelopes.map((e) => e.sequence));
    const turnId = envelopes[0]!.turnId;
    expect(envelopes).toEqual(h.updates.filter((e) => e.turnId === turnId));
    expect(envelopes.at(-1)!.update).toMatchObject({ type: 'turn_finished', outcome: { status: 'completed', finalText: 'Hello over HTTP.' } });
  });

  it('a refused start is one error event with its code', async () => {
    const h = await harness(storage, [{ hang: true }]);
    const { url, server } = await serve(mode, () => h.session);
    servers.push(server);
    const busy = h.session.stream('occupy the session');
    await busy.turnId;
    await h.waitFor((e) => e.update.type === 'phase_changed' && e.update.phase === 'running_model');
    const events = await readEvents(await fetch(url, { method: 'POST', body: JSON.stringify({ text: 'second' }) }));
    expect(events).toHaveLength(1);
    expect(events[0]!.event).toBe('error');
    expect(JSON.parse(events[0]!.data)).toMatchObject({ code: 'busy' });
    await h.session.cancelTurn(await busy.turnId);
    await busy.result;
  });

  it('a client more than 512 updates behind gets one lagged event, then the last 512 updates', async () => {
    const h = await harness(storage, [{ text: 'abcd'.repeat(1_000), chunk: 4 }]);
    const { url, server } = await serve(mode, () => h.session, { behind: true });
    servers.push(server);
    const events = await readEvents(await fetch(url, { method: 'POST', body: JSON.stringify({ text: 'flood' }) }));
    const all = h.updates.filter((e) => e.turnId === h.updates.at(-1)!.turnId);
    const skipped = all.length - 512;
    expect(skipped).toBeGreaterThan(0);
    expect(events[0]).toMatchObject({ event: 'lagged', id: null });
    expect(JSON.parse(events[0]!.data)).toEqual({
      code: 'updates_lagged',
      message: expect.stringContaining(`${skipped} updates`),
      skipped,
      resumeAfterSequence: all[0]!.sequence - 1,
      nextSequence: all[skipped]!.sequence,
    });
    expect(events.slice(1).map((e) => JSON.parse(e.data) as SessionUpdateEnvelope)).toEqual(all.slice(skipped));
  });

  it('a client that goes away cancels the turn', async () => {
    const h = await harness(storage, [{ hang: true, before: [{ type: 'text_delta', delta: 'thinking' }] }]);
    const { url, server } = await serve(mode, () => h.session);
    servers.push(server);
    const controller = new AbortController();
    const response = await fetch(url, { method: 'POST', body: JSON.stringify({ text: 'hang' }), signal: controller.signal });
    const events = await readEvents(response, (e) => (JSON.parse(e.data) as SessionUpdateEnvelope).update.type === 'text_delta');
    const turnId = (JSON.parse(events[0]!.data) as SessionUpdateEnvelope).turnId!;
    controller.abort();
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
  });
});
