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

/** The raw client's stream; `reyield` passes each event through one async generator, as any port must. */
function rawReader(url: string, api: 'responses' | 'chat', reyield = false): Reader {
  const client = new OpenAI({ apiKey: 'bench', baseURL: url, maxRetries: 0 });
  const open = async (): Promise<AsyncIterable<unknown>> =>
    api === 'responses'
      ? client.responses.create({ model: 'bench', instructions: 'You are a benchmark.', input: 'Talk.', stream: true })
      : client.chat.completions.create({
          model: 'bench',
          messages: [
            { role: 'system', content: 'You are a benchmark.' },
            { role: 'user', content: 'Talk.' },
          ],
          stream: true,
          stream_options: { include_usage: true },
        });
  async function* pass(): AsyncGenerator<unknown> {
    for await (const event of await open()) yield event;
  }
  return async () => {
    let events = 0;
    for await (const _ of reyield ? pass() : await open()) events += 1;
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

/** Wall time, and this process's CPU time (the server runs in another process). */
async function time(read: Reader): Promise<{ ms: number; cpuUs: number; events: number }> {
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  const events = await read();
  const used = process.cpuUsage(cpu);
  return { ms: performance.now() - t0, cpuUs: used.user + used.system, events };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export async function runOpenAIBench(): Promise<string[]> {
  const server = await startServer();
  const lines = [`one response = ${DELTAS} text deltas; ${RESPONSES} responses per reader, interleaved; medians per response`];
  lines.push('| API | SSE events / response | raw `openai` stream | raw, re-yielded once | through `openaiModel` | adapter − raw, CPU per event | wall ratio |');
  lines.push('|---|---|---|---|---|---|---|');
  try {
    for (const api of ['responses', 'chat'] as const) {
      const readers = { raw: rawReader(server.url, api), reyielded: rawReader(server.url, api, true), adapter: adapterReader(server.url, api) };
      for (let i = 0; i < WARMUP; i += 1) for (const read of Object.values(readers)) await read();
      const samples = { raw: [] as Array<{ ms: number; cpuUs: number }>, reyielded: [] as Array<{ ms: number; cpuUs: number }>, adapter: [] as Array<{ ms: number; cpuUs: number }> };
      let sseEvents = 0;
      for (let i = 0; i < RESPONSES; i += 1) {
        for (const name of ['raw', 'reyielded', 'adapter'] as const) {
          // No forced GC between samples: a full collection flushes compiled code and penalises whichever reader allocates more.
          const sample = await time(readers[name]);
          if (name === 'raw') sseEvents = sample.events;
          if (name === 'adapter' && sample.events !== DELTAS) throw new Error(`the adapter produced ${sample.events} text deltas, expected ${DELTAS}`);
          samples[name].push(sample);
        }
      }
      const wall = (name: keyof typeof samples) => median(samples[name].map((s) => s.ms));
      const cpu = (name: keyof typeof samples) => median(samples[name].map((s) => s.cpuUs)) / sseEvents;
      const cell = (name: keyof typeof samples) => `${Math.round((sseEvents / wall(name)) * 1000).toLocaleString('en-US')} events/s, ${cpu(name).toFixed(1)} µs CPU/event`;
      lines.push(
        `| ${api} | ${sseEvents} | ${cell('raw')} | ${cell('reyielded')} | ${cell('adapter')} | ${(cpu('adapter') - cpu('raw')).toFixed(1)} µs (${(cpu('reyielded') - cpu('raw')).toFixed(1)} of it the extra async iteration) | ${(wall('adapter') / wall('raw')).toFixed(2)}× |`,
      );
    }
  } finally {
    server.stop();
  }
  return lines;
}
