/**
 * One runtime process of the scale-out suite (issue 15, point 4): a `createCore` on the suite's real
 * Postgres with ownership on, driven by line-delimited JSON on stdin and reporting on stdout. Its
 * one tool appends a line per run to a shared journal file (`<provider call id>\t<entry>`), then
 * takes OWN_TOOL_MS, so that a SIGKILL or SIGSTOP lands while a call is running.
 */
import { appendFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { z } from 'zod';
import { createCore } from '../../../src/core.js';
import type { OpenworkError } from '../../../src/errors.js';
import type { SessionHandle } from '../../../src/session-handle.js';
import { scriptedModel } from '../../../src/services/model/scripted.js';
import { defineTool } from '../../../src/services/tools/define.js';
import { postgresStorage } from '../../../src/storage/postgres.js';

const journal = process.env.OWN_JOURNAL!;
const toolMs = Number(process.env.OWN_TOOL_MS ?? 300);

function send(message: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

const journalTool = defineTool({
  name: 'journal',
  description: 'Appends an entry to the journal.',
  parameters: z.object({ entry: z.string() }),
  execute: async ({ entry }, ctx) => {
    await appendFile(journal, `${ctx.providerCallId}\t${entry}\n`);
    send({ kind: 'tool_ran', callId: ctx.providerCallId });
    await new Promise((resolve) => setTimeout(resolve, toolMs));
    return `recorded ${entry}`;
  },
});

/** Per turn tag: the first call asks for two journal entries, the second answers. */
const calls = new Map<string, number>();
const model = scriptedModel(
  (request) => {
    const users = request.messages.filter((m) => m.role === 'user' && (m as { kind?: string }).kind === 'normal');
    const last = users.at(-1) as { content: Array<{ text?: string }> } | undefined;
    const tag = (last?.content.map((b) => b.text ?? '').join('') ?? '').replace(/^work /, '');
    const n = calls.get(tag) ?? 0;
    calls.set(tag, n + 1);
    if (n === 0) {
      return {
        toolCalls: [
          { name: 'journal', arguments: { entry: `${tag}-1` }, callId: `${tag}-c1` },
          { name: 'journal', arguments: { entry: `${tag}-2` }, callId: `${tag}-c2` },
        ],
      };
    }
    return { text: `done ${tag}` };
  },
  { record: false },
);

async function main(): Promise<void> {
  const core = await createCore({
    storage: postgresStorage({ connectionString: process.env.OWN_DATABASE_URL!, max: 4 }),
    model,
    tools: [journalTool],
    worldState: false,
    agents: false,
    ownership: { leaseMs: Number(process.env.OWN_LEASE_MS ?? 1_000), scanIntervalMs: Number(process.env.OWN_SCAN_MS ?? 250) },
  });
  const handles = new Map<string, SessionHandle>();
  send({ kind: 'ready', ownerId: core.ownership!.ownerId, correction: core.startup.correction });

  const lines = createInterface({ input: process.stdin });
  for await (const line of lines) {
    const cmd = JSON.parse(line) as { op: string; id?: string; req?: number; tag?: string };
    const id = cmd.id!;
    const answer = (body: Record<string, unknown>) => send({ req: cmd.req, ...body });
    const failure = (error: unknown) => ({ ok: false, code: (error as OpenworkError).code ?? 'unknown', details: (error as OpenworkError).details ?? {}, message: String((error as Error).message) });
    switch (cmd.op) {
      case 'create': {
        handles.set(id, await core.createSession({ workingDirectory: process.cwd(), id }));
        answer({ kind: 'created', ok: true });
        break;
      }
      case 'load': {
        // Not awaited in the loop: two processes racing must each answer as soon as they know.
        core.loadSession(id).then(
          (handle) => (handles.set(id, handle), answer({ kind: 'load', ok: true })),
          (error: unknown) => answer({ kind: 'load', ...failure(error) }),
        );
        break;
      }
      case 'unload': {
        await handles.get(id)?.shutdown();
        handles.delete(id);
        answer({ kind: 'unloaded', ok: true });
        break;
      }
      case 'turn': {
        const handle = handles.get(id)!;
        handle.updates$.subscribe((e) => {
          if (e.update.type === 'turn_finished') send({ kind: 'finished', id, turnId: e.turnId, outcome: e.update.outcome });
        });
        try {
          const { turnId } = await handle.startTurn({ clientRequestId: `req-${cmd.tag}`, input: [{ type: 'text', text: `work ${cmd.tag}` }] });
          answer({ kind: 'started', ok: true, turnId });
        } catch (error) {
          answer({ kind: 'started', ...failure(error) });
        }
        break;
      }
      case 'shutdown': {
        await core.shutdown();
        answer({ kind: 'bye', ok: true });
        process.exit(0);
      }
    }
  }
}

main().catch((error: unknown) => {
  send({ kind: 'error', message: String((error as Error)?.stack ?? error) });
  process.exit(1);
});
