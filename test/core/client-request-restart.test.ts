/**
 * Seed 000 acc 14 across a restart (acceptance audit, branch audit-a): a host that retries its
 * `startTurn` after the runtime restarted, with the same `client_request_id`, gets the Turn it already
 * has, never a second Turn and never a model call; a new id starts a new Turn. On both backends, since the answer comes from the stored turns.
 */
import { describe, expect, it } from 'vitest';
import { createCore } from '../../src/core.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { backends, useBackend } from '../support/databases.js';
import { harness } from '../support/harness.js';

describe.each(backends)('client request ids across a restart on $name', (backend) => {
  let storage: SqlSessionStorage;
  useBackend(backend, (s) => (storage = s));

  it('the same client request id after a restart answers the stored turn; no second turn, no model call [seed 000 acc 14]', async () => {
    const h = await harness(storage, [{ text: 'done once' }]);
    const { turnId } = await h.run('do it', 'retry-me');
    await h.core.shutdown();

    const model = scriptedModel([{ text: 'new work' }]);
    const again = await createCore({ storage, model, closeStorageOnShutdown: false, worldState: false });
    try {
      const session = await again.loadSession(h.session.sessionId);
      const retried = await session.startTurn({ clientRequestId: 'retry-me', input: [{ type: 'text', text: 'do it' }] });
      expect(retried.turnId).toBe(turnId);
      expect(await session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'done once' });
      expect(model.requests).toHaveLength(0);
      expect((await storage.listTurns(h.session.sessionId)).map((t) => t.id)).toEqual([turnId]);

      const fresh = await session.startTurn({ clientRequestId: 'something-else', input: [{ type: 'text', text: 'more' }] });
      expect(fresh.turnId).not.toBe(turnId);
      expect(await session.waitForTurn(fresh.turnId)).toEqual({ status: 'completed', finalText: 'new work' });
      expect(await storage.listTurns(h.session.sessionId)).toHaveLength(2);
    } finally {
      await again.shutdown();
    }
  });
});
