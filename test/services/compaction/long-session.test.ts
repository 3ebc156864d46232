/**
 * A long session in a small context window: many threshold compactions, an overflow, a manual
 * compaction and a rewind. Every raw message stays in the database and the transcript, every
 * request fits the window, and every turn ends as it should. On PGlite and on real Postgres.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ModelError } from '../../../src/errors.js';
import { estimateTokens } from '../../../src/services/context/estimate.js';
import type { ModelRequest } from '../../../src/services/model/port.js';
import { defineTool } from '../../../src/services/tools/define.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { backends, useBackend } from '../../support/databases.js';
import { harness } from '../../support/harness.js';
import { assertStoredInvariants } from '../../support/invariants.js';
import { compactingModel } from '../../support/summaries.js';

const report = defineTool({
  name: 'report',
  description: 'Returns a long report.',
  parameters: z.object({ topic: z.string(), size: z.number().int() }),
  execute: ({ topic, size }) => `${topic}: ${'lorem ipsum '.repeat(Math.ceil(size / 12)).slice(0, size)}`,
});

const WINDOW = 9_000;
const MAX_OUTPUT = 500;
const TURNS = 14;

function requestTokens(request: ModelRequest): number {
  return estimateTokens(request.system) + estimateTokens(request.messages) + estimateTokens(request.tools);
}

describe.each(backends)('long session on $name', (backend) => {
  let storage: SqlSessionStorage;
  useBackend(backend, (s) => (storage = s));

  it('many threshold compactions, an overflow, a manual compaction and a rewind keep every fact and fit the window', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'openwork-long-'));
    writeFileSync(join(dir, 'AGENTS.md'), 'Keep answers short.');
    let overflowed = false;
    let overflowNext = false;
    const model = compactingModel(
      (request, i) => {
        const sinceUser = request.messages.length - 1 - request.messages.map((m) => m.role === 'user' && m.kind === 'normal').lastIndexOf(true);
        const toolResults = request.messages.slice(request.messages.length - sinceUser).filter((m) => m.role === 'tool').length;
        if (overflowNext) {
          overflowNext = false;
          overflowed = true;
          return { error: new ModelError('context_overflow', 'maximum context length exceeded') };
        }
        if (toolResults < 2) return { toolCalls: [{ name: 'report', arguments: { topic: `part ${i}`, size: 6_000 } }] };
        return { text: `Turn answer after call ${i}.` };
      },
      { contextWindow: WINDOW, maxOutputTokens: MAX_OUTPUT },
    );
    const h = await harness(storage, model, {
      tools: [report],
      worldState: {},
      workingDirectory: dir,
      openworkHome: mkdtempSync(join(tmpdir(), 'openwork-home-')),
      compaction: { retryDelayMs: 1, attemptTimeoutMs: 10_000 },
      limits: { maxModelCalls: 10 },
    });

    let manualDone = false;
    for (let t = 1; t <= TURNS; t += 1) {
      const { outcome } = await h.run(`Turn ${t}: look into part ${t}.`);
      expect(outcome, `turn ${t}: ${JSON.stringify(outcome)}`).toMatchObject({ status: "completed" });
      if (t === 7) {
        await h.session.compactConversation();
        manualDone = true;
        // The first call of the next turn is refused as too long once: compaction, then one resubmission.
        overflowNext = true;
      }
    }
    expect(manualDone).toBe(true);
    expect(overflowed).toBe(true);

    const checkpoints = await h.session.checkpoints();
    const kinds = checkpoints.map((c) => c.kind);
    expect(kinds.filter((k) => k === 'threshold').length).toBeGreaterThanOrEqual(3);
    expect(kinds).toContain('manual');
    expect(kinds).toContain('overflow');

    // Every request of a turn fits the window with its reserved output.
    for (const request of model.turnRequests) expect(requestTokens(request) + MAX_OUTPUT).toBeLessThanOrEqual(WINDOW);

    // Rewind to the manual checkpoint: the later tail leaves the projection, not the database.
    const manual = checkpoints.find((c) => c.kind === 'manual')!;
    const rawBefore = await h.session.messages();
    await h.session.rewindConversation(manual.id);
    expect(await h.session.messages()).toEqual(rawBefore);
    const { outcome } = await h.run('After the rewind: continue.');
    expect(outcome.status).toBe('completed');
    expect(JSON.stringify(model.turnRequests.at(-1)!.messages)).not.toContain(`Turn ${TURNS}: look into`);

    // Every raw message is in the database, in order, and readable through the transcript.
    const raw = await h.session.messages();
    const userTurns = raw.filter((m) => m.role === 'user' && m.kind === 'normal').map((m) => m.content.map((b) => ('text' in b ? b.text : '')).join(''));
    expect(userTurns.slice(0, TURNS)).toEqual(Array.from({ length: TURNS }, (_, i) => `Turn ${i + 1}: look into part ${i + 1}.`));
    expect(raw.map((m) => m.sequence)).toEqual(raw.map((_, i) => i + 1));
    const latest = checkpoints.at(-1)!;
    const transcript = [];
    let after: number | null = 0;
    while (after !== null) {
      const page = await h.session.readTranscript({ compactionId: latest.id, afterSequence: after, limit: 50 });
      transcript.push(...page.messages);
      after = page.nextAfterSequence;
    }
    expect(transcript).toEqual(raw.filter((m) => m.sequence <= latest.throughMessageSequence));
    await assertStoredInvariants(storage, h.session.sessionId);
    const turns = await h.session.turns();
    expect(turns.every((t) => t.status === 'completed')).toBe(true);
    expect(turns.some((t) => t.modelSubmissionCount > t.modelCallCount)).toBe(true);
  }, 120_000);
});
