/**
 * The fake OpenAI server in its own process, so that a benchmark's client measurements do not
 * share a CPU thread with the server. Prints its URL on the first line of stdout; each request gets
 * the same long text stream (`BENCH_EVENTS` deltas), flushed a few events at a time.
 */
import { startFakeOpenAI } from '../../test/support/fake-openai-server.js';

const deltas = Number(process.env.BENCH_EVENTS ?? 2000);
const server = await startFakeOpenAI();
// Flushed a few events at a time, like a provider streaming tokens: the client reads small chunks.
const reply = { text: 'abcd'.repeat(deltas), chunk: 4, flushEvery: 4 };
const refill = () => {
  if (server.remaining < 100) server.script(...Array.from({ length: 1000 }, () => reply));
};
refill();
setInterval(refill, 50);
process.stdout.write(`${server.url}\n`);
process.on('SIGTERM', () => {
  void server.close().then(() => process.exit(0));
});
