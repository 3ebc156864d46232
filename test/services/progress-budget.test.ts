/**
 * The per-call progress cap (issue 12.9): the head streams live in chunks of at most 4 KiB, held-back
 * output is counted at most once a second, and the footer and tail follow when the call ends.
 */
import { describe, expect, it } from 'vitest';
import type { ToolProgress } from '../../src/protocol/updates.js';
import {
  heldBackText,
  omittedProgressText,
  PROGRESS_CHUNK_BYTES,
  PROGRESS_HEAD_BYTES,
  PROGRESS_MESSAGE_BYTES,
  PROGRESS_TAIL_BYTES,
  ProgressBudget,
} from '../../src/services/updates/progress-budget.js';

function budget(step = 0) {
  const sent: ToolProgress[] = [];
  let now = 0;
  const gate = new ProgressBudget(
    (p) => sent.push(p),
    () => (now += step),
  );
  return { gate, sent };
}

const text = (items: ToolProgress[]) => items.map((p) => (p.kind === 'message' ? `[${p.message}]` : p.chunk)).join('');

describe('ProgressBudget', () => {
  it('passes small output through unchanged and sends nothing at finish', () => {
    const { gate, sent } = budget();
    gate.push({ kind: 'stdout', chunk: 'hello\n' });
    gate.push({ kind: 'stderr', chunk: 'warn\n' });
    gate.push({ kind: 'message', message: 'step 1' });
    gate.finish();
    expect(sent).toEqual([
      { kind: 'stdout', chunk: 'hello\n' },
      { kind: 'stderr', chunk: 'warn\n' },
      { kind: 'message', message: 'step 1' },
    ]);
  });

  it('streams the first 16 KiB in chunks of at most 4 KiB, counts the rest, then sends the footer and the last 14 KiB', () => {
    const { gate, sent } = budget(400);
    const all = Array.from({ length: 200 }, (_, i) => `${String(i).padStart(5, '0')}:${'x'.repeat(1_000)}\n`).join('');
    for (let i = 0; i < all.length; i += 7_000) gate.push({ kind: 'stdout', chunk: all.slice(i, i + 7_000) });
    const live = sent.length;
    gate.finish();
    const chunks = sent.filter((p) => p.kind === 'stdout') as Array<{ chunk: string }>;
    expect(chunks.every((c) => Buffer.byteLength(c.chunk) <= PROGRESS_CHUNK_BYTES)).toBe(true);
    const notices = sent.slice(0, live).filter((p) => p.kind === 'message') as Array<{ message: string }>;
    // One notice per second at most: the clock advances 400 ms per reading here.
    const pushes = Math.ceil(all.length / 7_000);
    expect(notices.length).toBeLessThanOrEqual(Math.ceil(pushes * 0.4) + 1);
    expect(notices[0]!.message).toBe(heldBackText(7_000 * 3 - PROGRESS_HEAD_BYTES));
    expect(sent[live]).toEqual({ kind: 'message', message: omittedProgressText(all.length - PROGRESS_HEAD_BYTES - PROGRESS_TAIL_BYTES) });
    expect(text(sent.slice(0, live).filter((p) => p.kind === 'stdout'))).toBe(all.slice(0, PROGRESS_HEAD_BYTES));
    expect(text(sent.slice(live + 1))).toBe(all.slice(all.length - PROGRESS_TAIL_BYTES));
  });

  it('never splits a character, keeps stdout and stderr apart in the tail, and cuts long messages', () => {
    const { gate, sent } = budget();
    // 3 bytes per character: the head ends on a character boundary below 16 KiB.
    gate.push({ kind: 'stdout', chunk: '€'.repeat(PROGRESS_HEAD_BYTES) });
    gate.push({ kind: 'stderr', chunk: 'err-tail\n' });
    gate.push({ kind: 'message', message: 'm'.repeat(10_000) });
    gate.finish();
    for (const p of sent) if (p.kind !== 'message') expect(p.chunk).not.toMatch(/\uFFFD/);
    const footerAt = sent.findIndex((p) => p.kind === 'message' && p.message.endsWith('were not shown live)'));
    expect(text(sent.slice(0, footerAt).filter((p) => p.kind === 'stdout'))).toBe('€'.repeat(Math.floor(PROGRESS_HEAD_BYTES / 3)));
    expect(sent.at(-1)).toEqual({ kind: 'stderr', chunk: 'err-tail\n' });
    const tailStdout = text(sent.slice(footerAt + 1).filter((p) => p.kind === 'stdout'));
    expect(tailStdout).toMatch(/^€+$/);
    expect(Buffer.byteLength(tailStdout) + 'err-tail\n'.length).toBeLessThanOrEqual(PROGRESS_TAIL_BYTES);
    const long = sent.find((p) => p.kind === 'message' && p.message.startsWith('mmm')) as { message: string };
    expect(Buffer.byteLength(long.message)).toBe(PROGRESS_MESSAGE_BYTES);
  });

  it('sends nothing after finish', () => {
    const { gate, sent } = budget();
    gate.finish();
    gate.push({ kind: 'stdout', chunk: 'late' });
    expect(sent).toEqual([]);
  });
});
