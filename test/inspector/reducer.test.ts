/**
 * The page's reducer (inspector/page/reducer.js, reference §8.5): sequence rules, the view built
 * from the updates of a real turn equals the view built from the snapshot at the same point, and
 * compactions (in a turn or between turns) are kept and logged without touching the turn.
 */
import { describe, expect, it, vi } from 'vitest';
import {
  applySnapshot,
  applyUpdate,
  classifyEnvelope,
  COMPACTION_LIMIT,
  createView,
  isTurnActive,
  LOG_LIMIT,
  summarize,
  type SessionView,
} from '../../inspector/page/reducer.js';
import type { SessionUpdateEnvelope } from '../../src/protocol/updates.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { harness } from '../support/harness.js';
import { compactingModel } from '../support/summaries.js';
import { usePglite } from '../support/databases.js';

function reduce(envelopes: readonly SessionUpdateEnvelope[], epoch = 'e1'): SessionView {
  let view = createView(envelopes[0]!.sessionId, epoch);
  for (const envelope of envelopes) {
    expect(classifyEnvelope(view, epoch, envelope)).toBe('apply');
    view = applyUpdate(view, envelope);
  }
  return view;
}

/** The part of a view the snapshot carries (tool progress and the log are not in a snapshot). */
function runtimeOf(view: SessionView) {
  return {
    lastSequence: view.lastSequence,
    turnId: view.turnId,
    clientRequestId: view.clientRequestId,
    phase: view.phase,
    draft: view.draft,
    tools: view.orderedToolCallIds.map((id) => {
      const c = view.toolCalls[id]!;
      return { id, name: c.toolName, args: c.arguments, result: c.result ? { status: c.result.status, text: c.result.text } : null };
    }),
    pendingPermission: view.pendingPermission,
    pendingQuestion: view.pendingQuestion,
    plan: view.plan,
    terminal: view.terminal,
  };
}

function envelope(sequence: number, update: SessionUpdateEnvelope['update'], turnId: string | null = 't'): SessionUpdateEnvelope {
  return { version: 7, sessionId: 's', turnId, sequence, occurredAtMs: 1, update };
}

describe('page reducer', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  it('ignores what it has, applies the next sequence, and reports gaps and other epochs', () => {
    let view = createView('s', 'e1');
    const first = envelope(1, { type: 'turn_started', clientRequestId: 'c' });
    expect(classifyEnvelope(view, 'e1', first)).toBe('apply');
    view = applyUpdate(view, first);
    expect(classifyEnvelope(view, 'e1', first)).toBe('ignore');
    expect(classifyEnvelope(view, 'e1', envelope(3, { type: 'text_delta', delta: 'x' }))).toBe('gap');
    expect(classifyEnvelope(view, 'e2', envelope(2, { type: 'text_delta', delta: 'x' }))).toBe('epoch');
    expect(isTurnActive(view)).toBe(true);
  });

  it('merges consecutive deltas into one log row with a sequence range, and caps the log', () => {
    let view = createView('s', 'e1');
    view = applyUpdate(view, envelope(1, { type: 'turn_started', clientRequestId: 'c' }));
    for (let i = 2; i <= 5; i += 1) view = applyUpdate(view, envelope(i, { type: 'text_delta', delta: `${i}` }));
    view = applyUpdate(view, envelope(6, { type: 'phase_changed', phase: 'running_tools' }));
    expect(view.log.map((e) => [e.from, e.to, e.type, e.count])).toEqual([
      [1, 1, 'turn_started', 1],
      [2, 5, 'text_delta', 4],
      [6, 6, 'phase_changed', 1],
    ]);
    expect(view.draft.text).toBe('2345');
    for (let i = 7; i < 7 + LOG_LIMIT * 2; i += 1) view = applyUpdate(view, envelope(i, { type: 'phase_changed', phase: i % 2 ? 'running_model' : 'running_tools' }));
    expect(view.log).toHaveLength(LOG_LIMIT);
    expect(view.log.at(-1)!.to).toBe(view.lastSequence);
  });

  it('the view replayed from the updates equals the view rebuilt from the snapshot: running, waiting on a card, terminal', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const h = await harness(storage, [
      {
        reasoning: 'think',
        text: 'plan and ask',
        toolCalls: [
          { name: 'update_plan', arguments: { explanation: 'why', plan: [{ step: 'one', status: 'in_progress' }] } },
          { name: 'echo', arguments: { text: 'a' } },
          { name: 'guarded', arguments: { action: 'b' } },
        ],
      },
      { gate, step: { text: 'the end' } },
    ]);
    const turnId = await h.start('go');
    const requested = await h.waitFor((e) => e.update.type === 'permission_requested');
    const compare = (terminal = false) => {
      const snapshot = h.session.snapshot();
      const replayed = runtimeOf(reduce(h.updates));
      const rebuilt = runtimeOf(applySnapshot(null, h.session.sessionId, 'e1', snapshot));
      // A terminal snapshot carries the outcome and the plan, not the tool calls (seed 000 §8).
      expect(rebuilt).toEqual(terminal ? { ...replayed, tools: [] } : replayed);
    };
    compare();
    const waiting = reduce(h.updates);
    expect(waiting.pendingPermission).toMatchObject({ turnId, card: { toolName: 'guarded' } });
    expect(waiting.toolCalls[waiting.orderedToolCallIds[2]!]!.status).toBe('waiting_permission');
    expect(waiting.plan).toMatchObject({ explanation: 'why', steps: [{ step: 'one', status: 'in_progress' }] });
    await h.session.resolvePermission(turnId, (requested.update as { toolCallId: string }).toolCallId, 'allow_once');
    await h.waitFor((e) => e.update.type === 'phase_changed' && e.update.phase === 'running_model' && e.sequence > requested.sequence);
    compare();
    release();
    await h.session.waitForTurn(turnId);
    compare(true);
    const done = reduce(h.updates);
    expect(done.terminal).toEqual({ turnId, outcome: { status: 'completed', finalText: 'the end' } });
    expect(isTurnActive(done)).toBe(false);
    // The snapshot keeps the log of the same epoch and marks where it was taken.
    const merged = applySnapshot(done, h.session.sessionId, 'e1', h.session.snapshot());
    expect(merged.log.at(-1)).toMatchObject({ type: 'snapshot', from: done.lastSequence });
    expect(merged.log.length).toBe(Math.min(done.log.length + 1, LOG_LIMIT));
    expect(applySnapshot(done, h.session.sessionId, 'other', h.session.snapshot()).log).toHaveLength(1);
  });

  it('a question of the model (request_user_input): replayed equals rebuilt while it waits, logged, cleared by the answer', async () => {
    const questions = { questions: [{ id: 'lang', question: 'Which language?', options: [{ label: 'en' }, { label: 'de' }] }] };
    const h = await harness(storage, [{ toolCalls: [{ name: 'request_user_input', arguments: questions }] }, { text: 'fine' }], { userInput: true });
    const turnId = await h.start('ask');
    const asked = await h.waitFor((e) => e.update.type === 'user_input_requested');
    const toolCallId = (asked.update as { toolCallId: string }).toolCallId;
    const waiting = reduce(h.updates);
    expect(waiting.pendingQuestion).toEqual({ turnId, toolCallId, request: questions });
    expect(waiting.toolCalls[toolCallId]!.status).toBe('waiting_user_input');
    expect(waiting.log.at(-1)).toMatchObject({ type: 'user_input_requested', summary: 'Which language?' });
    expect(runtimeOf(applySnapshot(null, h.session.sessionId, 'e1', h.session.snapshot()))).toEqual(runtimeOf(waiting));
    await h.session.answerUserInput(turnId, toolCallId, { lang: 'de' });
    await h.session.waitForTurn(turnId);
    const done = reduce(h.updates);
    expect(done.pendingQuestion).toBeNull();
    expect(done.log.find((e) => e.type === 'user_input_resolved')).toMatchObject({ summary: 'answered: de' });
    expect(done.toolCalls[toolCallId]!.result).toMatchObject({ status: 'succeeded', text: '{"answers":{"lang":"de"}}' });
  });

  it('a denied card and a cancelled turn end the view as the outcome says', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'guarded', arguments: { action: 'x' } }] }, { hang: true }]);
    const turnId = await h.start('go');
    const requested = await h.waitFor((e) => e.update.type === 'permission_requested');
    await h.session.resolvePermission(turnId, (requested.update as { toolCallId: string }).toolCallId, 'deny');
    await h.session.waitForTurn(turnId);
    const denied = reduce(h.updates);
    expect(denied.terminal?.outcome).toMatchObject({ status: 'failed', code: 'permission_denied' });
    expect(denied.pendingPermission).toBeNull();
    expect(denied.toolCalls[denied.orderedToolCallIds[0]!]).toMatchObject({ status: 'finished', result: { status: 'denied' } });
    const second = await h.start('again');
    await h.waitFor((e) => e.turnId === second && e.update.type === 'phase_changed' && e.update.phase === 'running_model');
    // Cancel once the hanging step is being played, not before the model call starts.
    await vi.waitFor(() => expect(h.model.requests).toHaveLength(2));
    await h.session.cancelTurn(second);
    await h.session.waitForTurn(second);
    const cancelled = reduce(h.updates);
    expect(cancelled).toMatchObject({ turnId: second, phase: 'cancelled', terminal: { turnId: second, outcome: { status: 'cancelled' } }, toolCalls: {} });
    expect(runtimeOf(applySnapshot(null, h.session.sessionId, 'e1', h.session.snapshot()))).toEqual({ ...runtimeOf(cancelled), draft: { text: '', reasoning: '' } });
  });

  it('a compaction inside a turn is kept and logged; the turn goes on as before', () => {
    let view = createView('s', 'e1');
    view = applyUpdate(view, envelope(1, { type: 'turn_started', clientRequestId: 'c' }));
    view = applyUpdate(view, envelope(2, { type: 'phase_changed', phase: 'compacting' }));
    view = applyUpdate(view, envelope(3, { type: 'conversation_compacted', compactionId: 'cmp_1', kind: 'threshold', conversationTokensBefore: 9000, conversationTokensAfter: 1200 }));
    expect(view.compactions).toEqual([{ compactionId: 'cmp_1', kind: 'threshold', tokensBefore: 9000, tokensAfter: 1200, sequence: 3, turnId: 't', atMs: 1 }]);
    expect(view.log.at(-1)).toMatchObject({ from: 3, to: 3, type: 'conversation_compacted', summary: 'threshold: 9000 → 1200 tokens · checkpoint cmp_1' });
    expect(view).toMatchObject({ turnId: 't', phase: 'compacting', terminal: null });
    expect(isTurnActive(view)).toBe(true);
    view = applyUpdate(view, envelope(4, { type: 'phase_changed', phase: 'running_model' }));
    expect(view.phase).toBe('running_model');
    // Only the newest compactions are kept.
    for (let i = 5; i < 5 + COMPACTION_LIMIT + 5; i += 1) {
      view = applyUpdate(view, envelope(i, { type: 'conversation_compacted', compactionId: `cmp_${i}`, kind: 'overflow', conversationTokensBefore: 2, conversationTokensAfter: 1 }));
    }
    expect(view.compactions).toHaveLength(COMPACTION_LIMIT);
    expect(view.compactions.at(-1)!.compactionId).toBe(`cmp_${4 + COMPACTION_LIMIT + 5}`);
  });

  it('a manual compaction and a rewind between turns, from a real session: kept, logged, the last outcome untouched, kept over a snapshot of the same epoch', async () => {
    const h = await harness(storage, compactingModel([{ text: 'the answer' }]));
    const { turnId } = await h.run('hello');
    const compacted = await h.session.compactConversation();
    const rewound = await h.session.rewindConversation(compacted.checkpoint!.id);
    await h.waitFor((e) => e.update.type === 'conversation_compacted' && e.update.kind === 'rewind');
    const view = reduce(h.updates);
    expect(view.compactions).toEqual([
      expect.objectContaining({ compactionId: compacted.checkpoint!.id, kind: 'manual', tokensBefore: compacted.conversationTokensBefore, tokensAfter: compacted.conversationTokensAfter, turnId: null }),
      expect.objectContaining({ compactionId: rewound.checkpoint!.id, kind: 'rewind', turnId: null }),
    ]);
    const rows = view.log.filter((e) => e.type === 'conversation_compacted');
    expect(rows.map((r) => r.summary)).toEqual(
      h.updates.filter((e) => e.update.type === 'conversation_compacted').map((e) => summarize(e.update)),
    );
    expect(rows[0]!.summary).toBe(`manual: ${compacted.conversationTokensBefore} → ${compacted.conversationTokensAfter} tokens · checkpoint ${compacted.checkpoint!.id}`);
    // The finished turn is still what the view shows.
    expect(view.terminal).toEqual({ turnId, outcome: { status: 'completed', finalText: 'the answer' } });
    expect(isTurnActive(view)).toBe(false);
    const snapshot = h.session.snapshot();
    expect(snapshot.lastUpdateSequence).toBe(view.lastSequence);
    expect(applySnapshot(view, h.session.sessionId, 'e1', snapshot).compactions).toEqual(view.compactions);
    expect(applySnapshot(view, h.session.sessionId, 'e2', snapshot).compactions).toEqual([]);
  });
});
