/**
 * Issue 12 point 9: a command's output must not fill host memory. Every bash output batch used to
 * become a `tool_call_progress` update kept in the session's 512-entry ring, so 1 GiB of output
 * kept about 1 GiB of heap. Played through the public API (createCore, scripted model, real bash
 * in bubblewrap): 2 GiB stream through bash, the host's heap after a full GC grows by less than
 * 64 MiB while the session (and its ring) is still alive, the live progress follows the head/tail
 * rule, and no update in the ring carries a large chunk.
 */
import { describe, expect, it } from 'vitest';
import type { SessionUpdateEnvelope, ToolProgress } from '../../src/protocol/updates.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { omittedProgressText, PROGRESS_CHUNK_BYTES, PROGRESS_HEAD_BYTES, PROGRESS_TAIL_BYTES } from '../../src/services/updates/progress-budget.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { assertAllRequests } from '../support/invariants.js';
import { requireSandbox, type ToolEnv } from '../support/tool-env.js';
import { useToolTurnBed } from '../support/tool-turn-bed.js';
import { builtinToolsCore } from '../support/scripted-attack.js';
import { heapAfterGc } from '../support/heap.js';

const FLOOD_BYTES = 2 * 1024 ** 3;
const MIB = 1024 * 1024;

// A full GC on demand without changing how vitest starts its workers.

let storage: SqlSessionStorage;
let env: ToolEnv;
const open = useToolTurnBed((s) => (storage = s), (e) => (env = e));

describe('issue 12.9: an output flood', () => {
  it('2 GiB through bash: heap growth under 64 MiB, progress capped by the head/tail rule, no large chunk in the ring', { timeout: 180_000 }, async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const model = scriptedModel([
      { toolCalls: [{ name: 'bash', arguments: { command: 'echo warm-up' } }] },
      // 32 × 64 MiB of "y\n" lines: cat of a cached file is much faster than `yes | head -c 2G`.
      { toolCalls: [{ name: 'bash', arguments: { command: `yes | head -c ${FLOOD_BYTES / 32} > "$TMPDIR/flood" && for i in $(seq 32); do cat "$TMPDIR/flood"; done; echo the-end`, timeoutMs: 120_000 } }] },
      { text: 'done' },
    ]);
    const core = await builtinToolsCore(env, storage, model);
    open.push(core);
    const session = await core.createSession({ workingDirectory: env.ws });
    const progress: ToolProgress[] = [];
    let largestUpdate = 0;
    session.updates$.subscribe((u: SessionUpdateEnvelope) => {
      if (u.update.type !== 'tool_call_progress') return;
      const p = u.update.progress;
      largestUpdate = Math.max(largestUpdate, Buffer.byteLength(p.kind === 'message' ? p.message : p.chunk));
      // Only the flood's own progress is collected (the warm-up printed one line).
      if (p.kind === 'stdout' && p.chunk === 'warm-up\n') return;
      progress.push(p);
    });
    const before = heapAfterGc();
    let peak = before;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().heapUsed);
    }, 25);
    const { turnId } = await session.startTurn({ clientRequestId: 'req-flood', input: [{ type: 'text', text: 'print a lot' }] });
    const outcome = await session.waitForTurn(turnId);
    clearInterval(sampler);
    // The session, its ring and its updates are all still alive here.
    const after = heapAfterGc();
    console.info(`[output-flood] heap after GC: ${((after - before) / MIB).toFixed(1)} MiB growth; sampled peak ${((peak - before) / MIB).toFixed(1)} MiB above the start`);
    assertAllRequests(model.requests);
    expect(outcome, JSON.stringify(outcome)).toMatchObject({ status: 'completed' });
    expect(after - before).toBeLessThan(64 * MIB);

    // The result the model saw keeps the head and the tail of 2 GiB.
    const result = model.requests[2]!.messages.filter((m) => m.role === 'tool').at(-1) as { text: string };
    expect(result.text).toMatch(/bytes omitted/);
    expect(result.text).toMatch(/the-end\n\[exit 0; duration \d+ ms\]$/);

    // Live progress: the first 16 KiB, counts while held back, then the footer and the last 14 KiB.
    const chunks = progress.filter((p): p is Extract<ToolProgress, { kind: 'stdout' }> => p.kind === 'stdout');
    const messages = progress.filter((p): p is Extract<ToolProgress, { kind: 'message' }> => p.kind === 'message').map((p) => p.message);
    const streamed = chunks.reduce((n, c) => n + Buffer.byteLength(c.chunk), 0);
    expect(streamed).toBeLessThanOrEqual(PROGRESS_HEAD_BYTES + PROGRESS_TAIL_BYTES);
    expect(messages[0]).toMatch(/^\.\.\. \(\d+ bytes of output not shown live;/);
    expect(messages.at(-1)).toBe(omittedProgressText(FLOOD_BYTES + 'the-end\n'.length - streamed));
    expect(messages.slice(0, -1).every((m) => /^\.\.\. \(\d+ bytes of output not shown live;/.test(m))).toBe(true);
    const footer = progress.findIndex((p) => p.kind === 'message' && p.message.startsWith('... (') && p.message.endsWith('were not shown live)'));
    const head = progress.slice(0, footer).filter((p) => p.kind === 'stdout').map((p) => (p as { chunk: string }).chunk).join('');
    const tail = progress.slice(footer + 1).map((p) => (p as { chunk: string }).chunk).join('');
    expect(head).toBe('y\n'.repeat(PROGRESS_HEAD_BYTES / 2));
    expect(tail).toBe(`${'y\n'.repeat((PROGRESS_TAIL_BYTES - 'the-end\n'.length) / 2)}the-end\n`);

    // No update in the ring (or anywhere on the stream) carries a large chunk.
    expect(largestUpdate).toBeLessThanOrEqual(PROGRESS_CHUNK_BYTES);
    const ring = session.replayUpdates(Math.max(0, session.snapshot().lastUpdateSequence - 512));
    const ringBytes = ring.reduce((n, u) => n + Buffer.byteLength(JSON.stringify(u)), 0);
    expect(ringBytes).toBeLessThan(512 * (PROGRESS_CHUNK_BYTES + 512));
  });
});
