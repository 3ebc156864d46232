/**
 * The OpenAI adapter's own overhead per streamed event: the same long text response from the fake
 * OpenAI server (in a separate process), read once through the raw `openai` client's stream and once
 * through `openaiModel`, alternating, in one run. The raw client is imported here only as the
 * baseline; `src/services/model/openai.ts` stays the only source module that imports it.
 *
 * Run: npm run bench -- openai   (knobs: BENCH_EVENTS deltas per response, BENCH_RESPONSES per side)
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { openaiModel } from '../src/services/model/openai.js';
import type { ModelRequest } from '../src/services/model/port.js';

const DELTAS = Number(process.env.BENCH_EVENTS ?? 2000);
const RESPONSES = Number(process.env.BENCH_RESPONSES ?? 30);
const WARMUP = 5;

const request: ModelRequest = {
  system: [{ key: 'core/agent-system', content: 'You are a benchmark.' }],
  messages: [{ role: 'user', kind: 'normal', content: [{ type: 'text', text: 'Talk.' }] }],
  tools: [],
};

async function startServer(): Promise<{ url: string; stop: () => void }> {
  const script = fileURLToPath(new URL('./support/fake-openai-process.ts', import.meta.url));
  const child = spawn(process.execPath, ['--import', 'tsx', script], { env: { ...process.env, BENCH_EVENTS: String(DELTAS) }, stdio: ['ignore', 'pipe', 'inherit'] });
  let buffered = '';
  child.stdout.setEncoding('utf8');
  while (!buffered.includes('\n')) {
    const [chunk] = (await once(child.stdout, 'data')) as [string];
    buffered += chunk;
  }
  return { url: buffered.split('\n')[0]!.trim(), stop: () => child.kill('SIGTERM') };
}

type Reader = () => Promise<number>;

function rawReader(url: string, api: 'responses' | 'chat'): Reader {
  const client = new OpenAI({ apiKey: 'bench', baseURL: url, maxRetries: 0 });
  return async () => {
    let events = 0;
    if (api === 'responses') {
      const stream = await client.responses.create({ model: 'bench', instructions: 'You are a benchmark.', input: 'Talk.', stream: true });
      for await (const _ of stream) events += 1;
    } else {
      const stream = await client.chat.completions.create({
        model: 'bench',
        messages: [
          { role: 'system', content: 'You are a benchmark.' },
          { role: 'user', content: 'Talk.' },
        ],
        stream: true,
        stream_options: { include_usage: true },
      });
      for await (const _ of stream) events += 1;
    }
    return events;
  };
}

function adapterReader(url: string, api: 'responses' | 'chat'): Reader {
  const model = openaiModel({ model: 'bench', api, baseURL: url, apiKey: 'bench', maxRetries: 0 });
  return async () => {
    let events = 0;
    for await (const event of model.stream(request, { signal: new AbortController().signal })) {
      if (event.type === 'text_delta') events += 1;
    }
    return events;
  };
}

async function time(read: Reader): Promise<{ ms: number; events: number }> {
  const t0 = performance.now();
  const events = await read();
  return { ms: performance.now() - t0, events };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export async function runOpenAIBench(): Promise<string[]> {
  const server = await startServer();
  const lines = [`one response = ${DELTAS} text deltas; ${RESPONSES} responses per side, alternating; median of per-response times`];
  lines.push('| API | SSE events / response | raw `openai` stream | through `openaiModel` | overhead per event | ratio |');
  lines.push('|---|---|---|---|---|---|');
  try {
    for (const api of ['responses', 'chat'] as const) {
      const raw = rawReader(server.url, api);
      const adapter = adapterReader(server.url, api);
      for (let i = 0; i < WARMUP; i += 1) {
        await raw();
        await adapter();
      }
      const rawTimes: number[] = [];
      const adapterTimes: number[] = [];
      let sseEvents = 0;
      for (let i = 0; i < RESPONSES; i += 1) {
        global.gc?.();
        const r = await time(raw);
        sseEvents = r.events;
        const a = await time(adapter);
        if (a.events !== DELTAS) throw new Error(`the adapter produced ${a.events} text deltas, expected ${DELTAS}`);
        rawTimes.push(r.ms);
        adapterTimes.push(a.ms);
      }
      const rawMs = median(rawTimes);
      const adapterMs = median(adapterTimes);
      const perSecond = (ms: number) => `${Math.round((sseEvents / ms) * 1000).toLocaleString('en-US')} events/s`;
      lines.push(
        `| ${api} | ${sseEvents} | ${perSecond(rawMs)} (${rawMs.toFixed(1)} ms) | ${perSecond(adapterMs)} (${adapterMs.toFixed(1)} ms) | ${(((adapterMs - rawMs) * 1000) / sseEvents).toFixed(2)} µs | ${(adapterMs / rawMs).toFixed(2)}× |`,
      );
    }
  } finally {
    server.stop();
  }
  return lines;
}
