/**
 * One runtime process of the scale-out benchmark (issue 15.5): creates its share of the sessions,
 * waits for `go` on stdin, runs every session's turns concurrently, and reports the wall time and
 * its lease statement counts as one JSON line.
 */
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { z } from 'zod';
import { createCore } from '../../src/core.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { defineTool } from '../../src/services/tools/define.js';
import { postgresStorage } from '../../src/storage/postgres.js';

const STEPS = 10;
const sessions = Number(process.env.SCALE_SESSIONS);
const turns = Number(process.env.SCALE_TURNS);
const ownership = process.env.SCALE_OWNERSHIP === '0' ? false : { leaseMs: Number(process.env.SCALE_LEASE_MS ?? 5_000) };

const instant = defineTool({ name: 'instant', description: 'Returns at once.', parameters: z.object({ i: z.number() }), execute: ({ i }) => `ok ${i}` });
const model = () =>
  scriptedModel(
    (_request, i) => {
      const step = i % (STEPS + 1);
      if (step === STEPS) return { text: 'finished', usage: { inputTokens: 100, outputTokens: 5 } };
      return { toolCalls: [{ name: 'instant', arguments: { i: step } }], usage: { inputTokens: 100, outputTokens: 10 } };
    },
    { record: false },
  );

const core = await createCore({
  storage: postgresStorage({ connectionString: process.env.SCALE_DATABASE_URL!, max: 10 }),
  model: model(),
  tools: [instant],
  limits: { maxModelCalls: STEPS + 5 },
  worldState: false,
  agents: false,
  ownership,
});
const handles = await Promise.all(Array.from({ length: sessions }, () => core.createSession({ workingDirectory: process.cwd(), model: model() })));
const before = core.ownership?.stats();
process.stdout.write(`${JSON.stringify({ kind: 'ready' })}\n`);
await new Promise<void>((resolve) => createInterface({ input: process.stdin }).once('line', () => resolve()));
const t0 = performance.now();
/** Turns refused for want of the lease (a late renewal let another process take the session over). */
let lost = 0;
await Promise.all(
  handles.map(async (h) => {
    for (let t = 0; t < turns; t += 1) {
      const { turnId } = await h.startTurn({ clientRequestId: randomUUID(), input: [{ type: 'text', text: 'go' }] });
      const outcome = await h.waitForTurn(turnId);
      if (outcome.status === 'failed' && outcome.code === 'ownership_lost') {
        lost += 1;
        return;
      }
      if (outcome.status !== 'completed') throw new Error(`turn ${turnId} ${JSON.stringify(outcome)}`);
    }
  }),
);
const wallMs = performance.now() - t0;
const after = core.ownership?.stats();
const leaseStatements = before && after ? after.renewals - before.renewals + (after.scans - before.scans) + (after.acquisitions - before.acquisitions) + (after.releases - before.releases) : 0;
process.stdout.write(`${JSON.stringify({ kind: 'done', wallMs, turns: sessions * turns - lost, lost, leaseStatements, takenOver: after ? after.takenOver - before!.takenOver : 0 })}\n`);
await core.shutdown();
process.exit(0);
