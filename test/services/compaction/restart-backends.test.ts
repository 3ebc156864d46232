/**
 * Reference §3.12 acc 13, 14 and 35 across a real restart on both backends (acceptance audit, branch
 * audit-a; the compaction suite runs on PGlite and reloads inside one runtime): after a compaction and
 * after a rewind, a new runtime on the same database rebuilds the same projection from storage, the
 * next model request starts with it, and every raw message is still stored.
 */
import { describe, expect, it } from 'vitest';
import { createCore } from '../../../src/core.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { echoTool } from '../../../src/testing/tools.js';
import { backends, useBackend } from '../../support/databases.js';
import { harness } from '../../support/harness.js';
import { compactingModel } from '../../support/summaries.js';

const options = { compaction: { retryDelayMs: 1, attemptTimeoutMs: 10_000 }, tools: [echoTool] };

describe.each(backends)('compaction across a restart on $name', (backend) => {
  let storage: SqlSessionStorage;
  useBackend(backend, (s) => (storage = s));

  async function restartAndRun(sessionId: string, text: string) {
    const model = compactingModel([{ text: 'after restart' }]);
    const core = await createCore({ storage, model, closeStorageOnShutdown: false, worldState: false, ...options });
    try {
      const session = await core.loadSession(sessionId);
      const projection = session.inspectContext().conversation;
      const { turnId } = await session.startTurn({ clientRequestId: `restart-${text}`, input: [{ type: 'text', text }] });
      expect(await session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'after restart' });
      return { projection, request: model.turnRequests[0]! };
    } finally {
      await core.shutdown();
    }
  }

  it('a checkpoint and the raw messages coexist; a new runtime rebuilds the same projection and sends it [reference §3.12 acc 13-14]', async () => {
    const model = compactingModel([{ toolCalls: [{ name: 'echo', arguments: { text: 'a' }, callId: 'e1' }] }, { text: 'one' }, { text: 'two' }]);
    const h = await harness(storage, model, options);
    await h.run('first request');
    const raw = await h.session.messages();
    await h.session.compactConversation();
    await h.run('second request');
    const projection = h.session.inspectContext().conversation;
    const rawAfter = await h.session.messages();
    expect(rawAfter.slice(0, raw.length)).toEqual(raw);
    await h.core.shutdown();

    const after = await restartAndRun(h.session.sessionId, 'third request');
    expect(after.projection).toEqual(projection);
    // The request after the restart is replay, summary, reminder, the tail, then the new input.
    const sent = after.request.messages;
    expect(sent.map((m) => m.role)).toEqual(['user', 'user', 'user', 'user', 'assistant', 'user']);
    expect(JSON.stringify(sent[0])).toContain('first request');
    expect(JSON.stringify(sent[3])).toContain('second request');
    expect(JSON.stringify(sent[5])).toContain('third request');
    expect(JSON.stringify(sent)).not.toContain('"callId":"e1"');
    expect((await storage.listMessages(h.session.sessionId)).slice(0, rawAfter.length)).toEqual(rawAfter);
  });

  it('after a rewind a new runtime never shows the hidden tail, and nothing was deleted [reference §3.12 acc 34-35]', async () => {
    const model = compactingModel([{ text: 'answer one' }, { text: 'answer two' }]);
    const h = await harness(storage, model, options);
    await h.run('request one');
    const first = (await h.session.compactConversation()).checkpoint!;
    await h.run('request two');
    const raw = await h.session.messages();
    await h.session.rewindConversation(first.id);
    await h.core.shutdown();

    const after = await restartAndRun(h.session.sessionId, 'request three');
    expect(JSON.stringify(after.projection)).not.toContain('request two');
    expect(JSON.stringify(after.request.messages)).not.toContain('request two');
    expect(JSON.stringify(after.request.messages)).not.toContain('answer two');
    expect(JSON.stringify(after.request.messages)).toContain('request three');
    expect((await storage.listMessages(h.session.sessionId)).slice(0, raw.length)).toEqual(raw);
  });
});
