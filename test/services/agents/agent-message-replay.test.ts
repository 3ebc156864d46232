/**
 * Reference §5.10 acc 6 and 11 through the public API (branch audit-b): an `<agent_message>` stored
 * after the user's request (delivered during the turn) is never taken for the last real user
 * request; a compaction replays the user's request, and the next request starts with it.
 */
import { describe, expect, it } from 'vitest';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { usePglite } from '../../support/databases.js';
import { harness } from '../../support/harness.js';
import { compactingModel } from '../../support/summaries.js';

const textOf = (message: unknown) =>
  ((message as { content?: Array<{ text?: string }> }).content ?? []).map((b) => b.text ?? '').join('');

describe('agent messages and the last real user request (reference §5.10 acc 6, 11)', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  it('an agent message stored after the request is not replayed by a compaction; the replay is the user\'s request', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let call = 0;
    const model = compactingModel(async () => {
      call += 1;
      if (call === 1) {
        await gate;
        return { toolCalls: [{ name: 'echo', arguments: { text: 'x' } }] };
      }
      return { text: call === 2 ? 'answered' : 'next answer' };
    });
    const h = await harness(storage, model);
    const turnId = await h.start('the real request');
    await h.waitFor((e) => e.update.type === 'phase_changed' && e.update.phase === 'running_model');
    await h.session.deliverAgentMessage({ id: 'agent-msg:kid:kid-turn:final_answer', taskName: 'kid', kind: 'final_answer', body: 'the child found it' });
    release();
    expect((await h.session.waitForTurn(turnId)).status).toBe('completed');

    const stored = await h.session.messages();
    const request = stored.find((m) => m.role === 'user' && m.kind === 'normal' && textOf(m) === 'the real request')!;
    const agent = stored.find((m) => m.kind === 'agent_message')!;
    expect(agent.sequence).toBeGreaterThan(request.sequence);

    const { checkpoint } = await h.session.compactConversation();
    expect(checkpoint!.lastUserMessageId).toBe(request.id);
    await h.run('go on');
    const next = model.turnRequests.at(-1)!.messages;
    expect(next[0]).toMatchObject({ role: 'user', kind: 'normal' });
    expect(textOf(next[0])).toBe('the real request');
  });
});
