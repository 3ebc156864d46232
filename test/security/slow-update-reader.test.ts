/**
 * A slow reader of the updates (attack: "updates-bounded"). The model floods reasoning deltas (two
 * calls of 2,000 deltas of 1,000 characters each, through the real `openai` client against the
 * local fake server) while the host's reader of the turn stalls: a `for await` loop that took one
 * update and never asks for the next, and an SSE client on a real HTTP connection (a Unix-domain
 * socket) that stops reading. Before the fix every update the reader had not taken was queued for
 * it, so host memory grew with the flood (3.5 MiB here beyond a turn nobody reads; 70 MiB for 8,000
 * deltas of 3,000 characters; without bound). Now the reader's queue holds the last 512 updates
 * (seed 000 §7: the per-session broadcast's capacity), the reader is told it lagged
 * (`updates_lagged` with the count skipped and where to resume, or an SSE `lagged` event), the
 * turn's `result` settles, and the transcript is whole in the store.
 */
import { once } from 'node:events';
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../src/core.js';
import { toSSE } from '../../src/host/http.js';
import type { TurnStream } from '../../src/host/run.js';
import type { SessionUpdateEnvelope } from '../../src/protocol/updates.js';
import { openaiModel } from '../../src/services/model/openai.js';
import { echoTool } from '../../src/testing/tools.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { startFakeOpenAI, type FakeOpenAIServer } from '../support/fake-openai-server.js';
import { heapAfterGc } from '../support/heap.js';

const MIB = 1024 * 1024;

/** Characters per reasoning delta, and deltas per model call (`SLOW_READER_*` raise them for a longer flood). */
const CHUNK = Number(process.env.SLOW_READER_CHUNK ?? 1_000);
const DELTAS = Number(process.env.SLOW_READER_DELTAS ?? 2_000);
const CAPACITY = 512;

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));
const open: Array<{ close(): Promise<void> } | Core> = [];
afterEach(async () => {
  while (open.length > 0) {
    const item = open.pop()!;
    if ('shutdown' in item) await item.shutdown();
    else await item.close();
  }
});

/** A core whose model floods reasoning in two calls (the first also calls `echo`), then answers "done". */
async function floodingSession(fake: FakeOpenAIServer, deltas = DELTAS) {
  // One string of the flood, created before the baseline: each delta the client parses is a new string.
  const reasoning = 'r'.repeat(CHUNK * deltas);
  fake.script(
    { reasoning, chunk: CHUNK, toolCalls: [{ name: 'echo', arguments: { text: 'hi' } }] },
    { reasoning, chunk: CHUNK, text: 'done' },
  );
  const core = await createCore({
    storage,
    model: openaiModel({ model: 'fake-model', api: 'responses', baseURL: fake.url, apiKey: 'sk-test', maxRetries: 0 }),
    tools: [echoTool],
    closeStorageOnShutdown: false,
    worldState: false,
  });
  open.push(core);
  return core.createSession({ workingDirectory: process.cwd() });
}

let control: number | null = null;
/**
 * The heap a flooding turn leaves behind with no reader at all (`session.run`): the session keeps the
 * conversation and the last 512 updates for `replayUpdates` whoever reads. What a stalled reader
 * costs is measured beyond this.
 */
async function growthWithoutReader(): Promise<number> {
  if (control !== null) return control;
  const fake = await startFakeOpenAI();
  open.push(fake);
  // A short flood first, read to its end, so that what the first turn of the process allocates
  // once (compiled code, caches) is not counted as the cost of a turn.
  const warmUp = await floodingSession(fake, DELTAS / 10);
  for await (const envelope of warmUp.stream('go')) void envelope;
  const session = await floodingSession(fake);
  const before = heapAfterGc();
  expect(await session.run('go')).toMatchObject({ outcome: { status: 'completed' }, text: 'done' });
  control = heapAfterGc() - before;
  console.info(`[slow-update-reader] no reader: heap +${(control / MIB).toFixed(1)} MiB after GC`);
  return control;
}

/** The runs of the flood's reasoning in the stored transcript of the session. */
async function storedReasoningRuns(sessionId: string): Promise<number[]> {
  const messages = await storage.listMessages(sessionId);
  return (JSON.stringify(messages).match(/r{1000,}/g) ?? []).map((run) => run.length);
}

describe('a slow reader of the updates cannot grow host memory without bound', () => {
  it('a for-await loop that stalls while the model floods: bounded heap, updates_lagged, then the rest of the turn', async () => {
    const baseline = await growthWithoutReader();
    const fake = await startFakeOpenAI();
    open.push(fake);
    const session = await floodingSession(fake);
    const before = heapAfterGc();

    const stream: TurnStream = session.stream('go');
    const reader = stream[Symbol.asyncIterator]();
    const first = await reader.next();
    expect(first.value?.update.type).toBe('turn_started');
    // The reader stalls: it asks for nothing more until the turn has ended.
    const result = await stream.result;
    expect(result).toMatchObject({ outcome: { status: 'completed' }, text: 'done' });
    const growth = heapAfterGc() - before;
    console.info(`[slow-update-reader] for await: heap +${(growth / MIB).toFixed(1)} MiB after GC with the reader stalled`);
    // The reader holds at most 512 updates, the same envelopes as the session's replay ring, so it
    // costs next to nothing beyond a turn nobody reads; unbounded, it held all 4,000 (3.5 MiB more; the bound is 2).
    expect(growth - baseline).toBeLessThan(2 * MIB);

    // The reader comes back: it is told how far behind it fell, then continues from the oldest kept.
    const lagged = await reader.next().then(
      () => null,
      (error: unknown) => error,
    );
    expect(lagged).toMatchObject({ name: 'UpdatesLaggedError', code: 'updates_lagged' });
    const { skipped, resumeAfterSequence, nextSequence } = (lagged as { details: { skipped: number; resumeAfterSequence: number; nextSequence: number } }).details;
    const rest: SessionUpdateEnvelope[] = [];
    for await (const envelope of stream) rest.push(envelope);
    expect(rest).toHaveLength(CAPACITY);
    expect(rest[0]!.sequence).toBe(nextSequence);
    expect(rest.at(-1)!.update.type).toBe('turn_finished');
    expect(resumeAfterSequence).toBe(first.value!.sequence);
    expect(skipped).toBe(nextSequence - resumeAfterSequence - 1);
    expect(skipped).toBeGreaterThan(2 * DELTAS - CAPACITY);
    // Recovery as reference §8.5 has it: replay from where the reader was, else the snapshot.
    expect(() => session.replayUpdates(resumeAfterSequence)).toThrow(expect.objectContaining({ code: 'snapshot_required' }));
    expect(session.snapshot().lastUpdateSequence).toBe(rest.at(-1)!.sequence);
    // Nothing durable was lost: both calls' reasoning is in the store.
    const runs = await storedReasoningRuns(session.sessionId);
    expect(runs.length).toBeGreaterThanOrEqual(2);
    expect(new Set(runs)).toEqual(new Set([CHUNK * DELTAS]));
  }, 60_000);

  it('an SSE client that stops reading its socket: bounded heap, a `lagged` event when it reads again, then turn_finished', async () => {
    const baseline = await growthWithoutReader();
    const fake = await startFakeOpenAI();
    open.push(fake);
    const session = await floodingSession(fake);
    let stream: TurnStream | null = null;
    let served: Promise<void> | null = null;
    const server: Server = createServer((_req, res) => {
      stream = session.stream('go');
      served = toSSE(stream, res);
    });
    // A Unix-domain socket: its kernel buffers hold about 200 KiB, where loopback TCP's take several
    // MiB of the flood before the server's writes wait (the same growth follows, the test is longer).
    const dir = await mkdtemp(join(tmpdir(), 'slow-reader-'));
    const socketPath = join(dir, 'sse.sock');
    server.listen(socketPath);
    await once(server, 'listening');
    open.push({ close: () => new Promise<void>((resolve) => server.close(() => resolve())).then(() => rm(dir, { recursive: true, force: true })) });
    const before = heapAfterGc();

    const req = request({ socketPath, method: 'POST', path: '/' });
    open.push({ close: async () => void req.destroy() });
    req.end();
    const [res] = (await once(req, 'response')) as [IncomingMessage];
    expect(res.headers['content-type']).toContain('text/event-stream');
    // The client stops reading: the kernel's socket buffers fill, then the server's writes wait.
    res.pause();
    const result = await stream!.result;
    expect(result).toMatchObject({ outcome: { status: 'completed' }, text: 'done' });
    const growth = heapAfterGc() - before;
    console.info(`[slow-update-reader] SSE: heap +${(growth / MIB).toFixed(1)} MiB after GC with the client not reading`);
    expect(growth - baseline).toBeLessThan(2 * MIB);

    // The client reads again: what the socket held, a `lagged` event, then the last 512 updates.
    res.setEncoding('utf8');
    let body = '';
    res.on('data', (chunk: string) => (body += chunk));
    res.resume();
    await once(res, 'end');
    await served;
    const events = body.split('\n\n').filter(Boolean);
    const laggedAt = events.findIndex((e) => e.startsWith('event: lagged\n'));
    expect(laggedAt).toBeGreaterThan(0);
    expect(events.filter((e) => e.startsWith('event: lagged\n'))).toHaveLength(1);
    const lag = JSON.parse(events[laggedAt]!.split('\n')[1]!.slice('data: '.length)) as { code: string; skipped: number; resumeAfterSequence: number; nextSequence: number };
    expect(lag).toMatchObject({ code: 'updates_lagged' });
    const envelopeOf = (event: string) => JSON.parse(event.split('\n').find((l) => l.startsWith('data: '))!.slice(6)) as SessionUpdateEnvelope;
    const beforeLag = events.slice(0, laggedAt).map(envelopeOf);
    const afterLag = events.slice(laggedAt + 1).map(envelopeOf);
    expect(lag.resumeAfterSequence).toBe(beforeLag.at(-1)!.sequence);
    expect(afterLag[0]!.sequence).toBe(lag.nextSequence);
    expect(lag.skipped).toBe(lag.nextSequence - lag.resumeAfterSequence - 1);
    expect(afterLag).toHaveLength(CAPACITY);
    expect(afterLag.at(-1)!.update.type).toBe('turn_finished');
    // Every event is in sequence order, with no gap but the one the `lagged` event names.
    for (const part of [beforeLag, afterLag]) for (let i = 1; i < part.length; i += 1) expect(part[i]!.sequence).toBe(part[i - 1]!.sequence + 1);
    const runs = await storedReasoningRuns(session.sessionId);
    expect(runs.length).toBeGreaterThanOrEqual(2);
    expect(new Set(runs)).toEqual(new Set([CHUNK * DELTAS]));
  }, 60_000);
});
