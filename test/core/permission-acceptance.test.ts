/**
 * Permissions acceptance items that no other suite showed through the public API (acceptance audit,
 * branch audit-a; reference §4.15): approvals are serial (acc 41) and no grant outlives its process
 * (acc 25). Both run on PGlite and Postgres, since the restart reads the session back from storage.
 */
import { describe, expect, it } from 'vitest';
import { createCore } from '../../src/core.js';
import type { SessionUpdateEnvelope } from '../../src/protocol/updates.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { approvalTool } from '../../src/testing/tools.js';
import { backends, useBackend } from '../support/databases.js';
import { harness } from '../support/harness.js';

const guarded = (action: string, scope: string, callId = `call_${action}`) => ({ name: 'guarded', arguments: { action, scope }, callId });

describe.each(backends)('permissions acceptance on $name', (backend) => {
  let storage: SqlSessionStorage;
  useBackend(backend, (s) => (storage = s));

  it('two calls that each need a card are asked one at a time; the second card is not pending, nor answerable, before the first is decided [reference §4.15 acc 41]', async () => {
    const h = await harness(storage, [{ toolCalls: [guarded('a', 'one'), guarded('b', 'two')] }, { text: 'both ran' }]);
    const turnId = await h.start('two guarded calls');
    const first = await h.waitFor((e) => e.update.type === 'permission_requested');
    const firstId = (first.update as { toolCallId: string }).toolCallId;
    // Let the turn run as far as it can on its own: it must stay on the first card.
    await new Promise((r) => setTimeout(r, 100));
    const running = h.session.snapshot().runtime;
    if (running.type !== 'running') throw new Error(`expected a running turn, got ${running.type}`);
    expect(running.pendingApprovals.map((p) => p.toolCallId)).toEqual([firstId]);
    expect(h.updates.filter((e) => e.update.type === 'permission_requested')).toHaveLength(1);
    expect(h.updates.filter((e) => e.update.type === 'tool_call_finished')).toHaveLength(0);
    const secondId = running.toolCalls.find((c) => c.providerCallId === 'call_b')!.toolCallId;
    expect(running.toolCalls.find((c) => c.providerCallId === 'call_b')!.status).toBe('pending');
    // Answering the second call before its card is shown is refused with a typed error.
    await expect(h.session.resolvePermission(turnId, secondId, 'allow_once')).rejects.toMatchObject({ code: 'permission_not_pending' });

    await h.session.resolvePermission(turnId, firstId, 'allow_once');
    const second = await h.waitFor((e) => e.update.type === 'permission_requested' && e.sequence > first.sequence);
    expect((second.update as { toolCallId: string }).toolCallId).toBe(secondId);
    await h.session.resolvePermission(turnId, secondId, 'allow_once');
    expect(await h.session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'both ran' });

    // Order on the stream: card a, decision a, result a, then card b, decision b, result b.
    const seen = h.updates
      .filter((e) => ['permission_requested', 'permission_resolved', 'tool_call_finished'].includes(e.update.type))
      .map((e) => `${e.update.type}:${(e.update as { toolCallId: string }).toolCallId === firstId ? 'a' : 'b'}`);
    expect(seen).toEqual([
      'permission_requested:a',
      'permission_resolved:a',
      'tool_call_finished:a',
      'permission_requested:b',
      'permission_resolved:b',
      'tool_call_finished:b',
    ]);
  });

  it('an allow_for_session grant covers later turns of its process only: after a restart the same call asks again [reference §4.15 acc 25]', async () => {
    const h = await harness(storage, [
      { toolCalls: [guarded('a', 'deploy', 'call_1')] },
      { text: 'one' },
      { toolCalls: [guarded('b', 'deploy', 'call_2')] },
      { text: 'two' },
    ]);
    const cards = (updates: SessionUpdateEnvelope[]) => updates.filter((e) => e.update.type === 'permission_requested');
    const firstTurn = await h.start('first');
    const card = await h.waitFor((e) => e.update.type === 'permission_requested');
    await h.session.resolvePermission(firstTurn, (card.update as { toolCallId: string }).toolCallId, 'allow_for_session');
    expect(await h.session.waitForTurn(firstTurn)).toMatchObject({ status: 'completed' });
    // The grant holds for the next turn of the same process: no card.
    expect(await h.run('second')).toMatchObject({ outcome: { status: 'completed', finalText: 'two' } });
    expect(cards(h.updates)).toHaveLength(1);
    await h.core.shutdown();

    const again = await createCore({
      storage,
      model: scriptedModel([{ toolCalls: [guarded('c', 'deploy', 'call_3')] }, { text: 'three' }]),
      tools: [approvalTool],
      closeStorageOnShutdown: false,
      worldState: false,
    });
    try {
      const loaded = await again.loadSession(h.session.sessionId);
      const updates: SessionUpdateEnvelope[] = [];
      loaded.updates$.subscribe((e) => updates.push(e));
      const { turnId } = await loaded.startTurn({ clientRequestId: 'after-restart', input: [{ type: 'text', text: 'third' }] });
      // Without a leftover grant the call waits on a new card; deny it and the turn stops (acc 24's rule for any card).
      await new Promise<void>((resolve) => {
        const check = (): void => {
          const asked = cards(updates)[0];
          if (asked) {
            void loaded.resolvePermission(turnId, (asked.update as { toolCallId: string }).toolCallId, 'deny').then(() => resolve());
          } else {
            setTimeout(check, 5);
          }
        };
        check();
      });
      expect(await loaded.waitForTurn(turnId)).toMatchObject({ status: 'failed', code: 'permission_denied' });
      expect(cards(updates)).toHaveLength(1);
      const tool = (await storage.listMessages(h.session.sessionId)).filter((m) => m.role === 'tool').at(-1)!;
      expect(tool.providerCallId).toBe('call_3');
      expect((tool.content[0] as { status: string }).status).not.toBe('succeeded');
    } finally {
      await again.shutdown();
    }
  });
});
