/**
 * The runtime under SIGKILL (issue 6, item 4): a host process that the crash suite starts, lets run
 * and kills. It speaks line-delimited JSON on stdout (every update the host saw, the requests its
 * model received) and takes `start` / `go` on stdin, so the parent can look at the database after
 * the kill, after the startup correction, and after the first request of the next turn.
 *
 * Per session: if the session already has turns (a previous process crashed under it), one recovery
 * turn whose first request is reported; then the workload turn (journal writes, a plan, journal
 * writes, an answer), with small delays so that the kill lands anywhere. World State is sampled
 * before model calls and the model's window is small, so World State writes, prune watermarks,
 * summaries and checkpoints are among the writes a kill interrupts.
 */
import { createInterface } from 'node:readline';
import { z } from 'zod';
import { createCore } from '../../../src/core.js';
import { scriptedModel } from '../../../src/services/model/scripted.js';
import { defineTool } from '../../../src/services/tools/define.js';
import { postgresStorage } from '../../../src/storage/postgres.js';
import { journalTool } from '../../../src/testing/tools.js';
import { isSummaryRequest, validSummary } from '../../support/summaries.js';

/** About 1,500 tokens of conversation above an empty session's request reach the compaction line. */
const CONTEXT_WINDOW = 3_300;

const url = process.env.CRASH_DATABASE_URL!;
const journal = process.env.CRASH_JOURNAL!;
const iteration = Number(process.env.CRASH_ITERATION);
const sessions = (process.env.CRASH_SESSIONS ?? '').split(',').filter(Boolean);
const storage = postgresStorage({ connectionString: url, max: 4 });
const workload = process.env.CRASH_WORKLOAD !== '0';

function send(message: Record<string, unknown>): void {
  // On Linux, writes to a pipe are synchronous: a line written is a line the parent can read after a kill.
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

const lines = createInterface({ input: process.stdin });
const waiting: Array<(line: string) => void> = [];
const buffered: string[] = [];
lines.on('line', (line) => {
  const next = waiting.shift();
  if (next) next(line);
  else buffered.push(line);
});
function expectLine(word: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const take = (line: string) => (line === word ? resolve() : reject(new Error(`expected ${word}, got ${line}`)));
    const early = buffered.shift();
    if (early !== undefined) take(early);
    else waiting.push(take);
  });
}

/** A journal tool that takes a moment after its side effect, as real tools do. */
const baseJournal = journalTool(journal);
const slowJournal = defineTool({
  name: 'journal',
  description: baseJournal.description,
  parameters: z.object({ entry: z.string() }),
  execute: async (args, ctx) => {
    const result = await baseJournal.execute(args, ctx);
    await new Promise((resolve) => setTimeout(resolve, 2));
    return result;
  },
});

/** The text of the last user request of a request (World State messages are user-role too, but not requests). */
function progress(request: { messages: Array<{ role: string; kind?: string; content?: unknown }> }): { text: string } {
  let last = -1;
  request.messages.forEach((m, i) => {
    if (m.role === 'user' && m.kind === 'normal') last = i;
  });
  const user = request.messages[last] as { content: Array<{ type: string; text?: string }> } | undefined;
  const text = user?.content.map((b) => b.text ?? '').join('') ?? '';
  return { text };
}

/** Model calls made so far by each workload turn of this process (a compaction hides earlier answers). */
const calls = new Map<string, number>();

/**
 * One model for every session, keyed by the turn's user text: the recovery turn reports its request;
 * the workload turn plays its steps; a compaction's summary request gets a valid summary. The window
 * is small enough that threshold compaction (pruning, a summary, a checkpoint) happens every few turns.
 */
const model = scriptedModel(
  (request) => {
    if (isSummaryRequest(request)) return { text: validSummary('the journal workload'), delayMs: 1 };
    const { text } = progress(request);
    if (text.startsWith('continue')) {
      // With the request, the checkpoint boundary it was assembled under (what a summary replaced).
      return (async () => {
        const sessionId = sessions[Number(text.split(' ').at(-1))]!;
        const checkpoints = await storage.listCheckpoints(sessionId);
        const boundary = Math.max(0, ...checkpoints.map((c) => c.replacedThroughMessageSequence));
        send({ kind: 'request', text, request, boundary });
        return { text: 'recovered' };
      })();
    }
    const answered = calls.get(text) ?? 0;
    calls.set(text, answered + 1);
    const s = Number(text.split(' ').at(-1));
    const id = (n: number) => `i${iteration}-s${s}-c${n}`;
    const steps = [
      {
        text: 'Writing a and b.',
        toolCalls: [
          { name: 'journal', arguments: { entry: `${id(1)}-a` }, callId: id(1) },
          { name: 'journal', arguments: { entry: `${id(2)}-b` }, callId: id(2) },
        ],
      },
      {
        toolCalls: [
          { name: 'update_plan', arguments: { plan: [{ step: 'write', status: 'in_progress' }, { step: 'check', status: 'pending' }] }, callId: id(3) },
          { name: 'journal', arguments: { entry: `${id(4)}-c` }, callId: id(4) },
        ],
      },
      { text: 'All written.', chunk: 4 },
    ];
    return { ...(steps[answered] ?? { text: 'extra' }), delayMs: 1 };
  },
  { delayMs: 1, record: false, contextWindow: CONTEXT_WINDOW },
);

async function main(): Promise<void> {
  send({ kind: 'booted' });
  await expectLine('start');
  const core = await createCore({ plan: true, conversationHistory: true, agents: true,
    storage,
    model,
    tools: [slowJournal],
    trace: { batchSize: 8 },
    compaction: { retryDelayMs: 50 },
    // Issue 15 (d): the crash-restart run with leases on. Each process is the same host restarted, so
    // it has the same owner id and frees its killed predecessor's leases at once; CRASH_OWNERSHIP=0
    // runs the single-process correction instead.
    ownership: process.env.CRASH_OWNERSHIP === '0' ? false : { leaseMs: Number(process.env.CRASH_LEASE_MS ?? 1_000), ownerId: 'crash-host' },
  });
  send({ kind: 'ready', correction: core.startup.correction });
  await expectLine('go');

  await Promise.all(
    sessions.map(async (sessionId, s) => {
      let handle;
      try {
        handle = await core.loadSession(sessionId);
      } catch {
        handle = await core.createSession({ workingDirectory: process.cwd(), id: sessionId });
      }
      handle.updates$.subscribe((e) => send({ kind: 'update', sessionId, sequence: e.sequence, turnId: e.turnId, update: e.update }));
      if ((await handle.turns()).length > 0) {
        const { turnId } = await handle.startTurn({ clientRequestId: `recover-${iteration}`, input: [{ type: 'text', text: `continue ${s}` }] });
        const outcome = await handle.waitForTurn(turnId);
        send({ kind: 'recovered', sessionId, turnId, outcome });
      }
      if (!workload) return;
      const { turnId } = await handle.startTurn({ clientRequestId: `work-${iteration}`, input: [{ type: 'text', text: `write the journal ${s}` }] });
      send({ kind: 'started', sessionId, turnId });
      const outcome = await handle.waitForTurn(turnId);
      send({ kind: 'finished', sessionId, turnId, outcome });
    }),
  );
  await core.shutdown();
  send({ kind: 'exit' });
  process.exit(0);
}

main().catch((error: unknown) => {
  send({ kind: 'error', message: String((error as Error)?.stack ?? error) });
  process.exit(1);
});
