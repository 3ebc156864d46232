/**
 * Text Postgres cannot store (attack round 3, point 2), on both backends through the public API:
 * a NUL or a lone surrogate in the model's text, escaped inside tool arguments (so `JSON.parse`
 * makes the raw character, which then reaches a card, a tool, its result and the store), in a
 * sub-agent's answer, and in the user's own message. `jsonb` and `text` refuse U+0000 (22P05) and
 * `jsonb` a lone surrogate; any of them used to fail the turn with `persistence_error` after the
 * tool had run. The rule (protocol/storable-text): what the model or a tool produces is made
 * storable where it enters (U+FFFD in place of each such character); what the host sends is refused
 * with `invalid_request` and nothing is stored. After each, the session takes its next turn.
 */
import { describe, expect, it } from 'vitest';
import type { ToolResultBlock } from '../../src/protocol/content.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { backends, useBackend } from '../support/databases.js';
import { harness } from '../support/harness.js';
import { router } from '../services/agents/support.js';

const R = '\ufffd';

for (const backend of backends) {
  describe(`text Postgres cannot store (${backend.name})`, () => {
    let storage: SqlSessionStorage;
    useBackend(backend, (s) => (storage = s));

    it('in the model text and reasoning: stored with U+FFFD, the next turn runs', async () => {
      const h = await harness(storage, [{ text: `a\u0000b\ud800c\udc00`, reasoning: `r\u0000` }, { text: 'next' }]);
      expect((await h.run('go')).outcome).toMatchObject({ status: 'completed', finalText: `a${R}b${R}c${R}` });
      const stored = JSON.stringify(await storage.listMessages(h.session.sessionId));
      expect(stored).toContain(`a${R}b${R}c${R}`);
      expect((await h.run('again')).outcome).toMatchObject({ status: 'completed', finalText: 'next' });
    });

    it('escaped in tool arguments: the card, the run and the result carry U+FFFD; nothing fails', async () => {
      const h = await harness(storage, [
        { toolCalls: [{ name: 'guarded', arguments: '{"action":"x\\u0000y\\ud800z","scope":"\\udc00"}' }] },
        { toolCalls: [{ name: 'echo', arguments: '{"text":"e\\u0000\\ud83d"}' }] },
        { text: 'done' },
        { text: 'next' },
      ]);
      const summaries: string[] = [];
      h.session.updates$.subscribe((u) => {
        if (u.update.type !== 'permission_requested') return;
        summaries.push(u.update.card.summary);
        const id = u.update.toolCallId;
        queueMicrotask(() => void h.session.resolvePermission(u.turnId!, id, 'allow_once'));
      });
      expect((await h.run('go')).outcome).toMatchObject({ status: 'completed', finalText: 'done' });
      expect(summaries).toHaveLength(1);
      const results = (await storage.listMessages(h.session.sessionId)).filter((m) => m.role === 'tool').map((m) => m.content[0] as ToolResultBlock);
      expect(results.map((r) => [r.status, r.text])).toEqual([
        ['succeeded', `did x${R}y${R}z`],
        ['succeeded', `e${R}${R}`],
      ]);
      expect((await h.run('again')).outcome).toMatchObject({ status: 'completed', finalText: 'next' });
    });

    it("in a sub-agent's answer: the parent's agent message carries U+FFFD", async () => {
      const model = router(
        // The kid's answer may reach the conversation before the root's second call (then waiting
        // would wait for a message that already came) or only during the wait: the root waits only
        // while it has not seen the answer.
        (r, i) =>
          i === 0
            ? { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'kid', message: 'look' } }] }
            : JSON.stringify(r).includes('<agent_message>')
              ? { text: 'root done' }
              : { toolCalls: [{ name: 'wait_agent', arguments: { timeout_ms: 600_000 } }] },
        () => ({ text: `found\u0000it\udfff` }),
      );
      const h = await harness(storage, model, { agents: true });
      expect((await h.run('go')).outcome).toMatchObject({ status: 'completed', finalText: 'root done' });
      const stored = JSON.stringify(await storage.listMessages(h.session.sessionId));
      expect(stored).toContain(`found${R}it${R}`);
    });

    it("in the user's message: refused as invalid_request, nothing stored, the session still works", async () => {
      const h = await harness(storage, [{ text: 'fine' }]);
      for (const text of ['a\u0000b', 'lone \ud800']) {
        await expect(h.session.startTurn({ clientRequestId: `bad-${text.length}`, input: [{ type: 'text', text }] })).rejects.toMatchObject({ code: 'invalid_request' });
      }
      expect(await storage.listMessages(h.session.sessionId)).toEqual([]);
      expect((await h.run('ok')).outcome).toMatchObject({ status: 'completed', finalText: 'fine' });
    });
  });
}
