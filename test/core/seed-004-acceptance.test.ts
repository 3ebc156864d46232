/**
 * Seed 004 §1, §5 and §8 through the public API (acceptance audit, branch audit-a): a new session
 * has no active Turn; cancelling a Turn that waits on a card clears its waiter, and steering input it
 * had not taken yet is never dropped (docs/decisions.md "Steering input the turn could not take any
 * more"): it enters the next Turn's first request, after that Turn's own input. On both backends.
 */
import { describe, expect, it } from 'vitest';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { backends, useBackend } from '../support/databases.js';
import { harness } from '../support/harness.js';

describe.each(backends)('seed 004 on $name', (backend) => {
  let storage: SqlSessionStorage;
  useBackend(backend, (s) => (storage = s));

  it('a new session has no active turn; a cancel clears the pending card and keeps steered input for the next turn [seed 004 §1, §5, §8]', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'guarded', arguments: { action: 'deploy' }, callId: 'g1' }] }, { text: 'next turn' }]);
    expect(h.session.snapshot().runtime).toEqual({ type: 'idle' });
    expect(h.session.status()).toEqual({ type: 'idle' });

    const turnId = await h.start('deploy it');
    const card = await h.waitFor((e) => e.update.type === 'permission_requested');
    expect(h.session.status()).toEqual({ type: 'active', activeFlags: ['waiting_on_approval'] });
    await h.session.steerTurn(turnId, [{ type: 'text', text: 'use the staging cluster' }]);
    await h.session.cancelTurn(turnId);
    expect(await h.session.waitForTurn(turnId)).toMatchObject({ status: 'cancelled' });

    // The waiter went with its turn: no card is pending, the late answer is refused, nothing ran.
    expect(h.session.status()).toEqual({ type: 'idle' });
    expect(h.session.snapshot().runtime).toMatchObject({ type: 'terminal', turnId });
    await expect(h.session.resolvePermission(turnId, (card.update as { toolCallId: string }).toolCallId, 'allow_once')).rejects.toMatchObject({ code: 'turn_not_active' });
    const results = (await storage.listMessages(h.session.sessionId)).filter((m) => m.role === 'tool');
    expect(results.map((m) => [m.providerCallId, (m.content[0] as { status: string }).status])).toEqual([['g1', 'cancelled']]);

    // The steered input was acknowledged, so it is not lost: the next turn's first request has it.
    const { outcome } = await h.run('what now?');
    expect(outcome).toEqual({ status: 'completed', finalText: 'next turn' });
    const users = h.model.requests[1]!.messages
      .filter((m) => m.role === 'user')
      .map((m) => (m as { content: Array<{ text?: string }> }).content.map((b) => b.text ?? '').join(''));
    expect(users.filter((t) => t === 'use the staging cluster')).toHaveLength(1);
    expect(users.indexOf('use the staging cluster')).toBeGreaterThan(users.indexOf('deploy it'));
  });
});
