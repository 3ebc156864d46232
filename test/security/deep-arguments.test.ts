/**
 * Tool arguments nested 100,000 levels deep (attack round 3, point 4), through the public API:
 * `JSON.parse` reads them, but the doom-loop check's canonical JSON, the card, the trace's hashes and
 * the store all walk a value recursively, and the stack overflow inside the Turn chart's guard left
 * the turn waiting forever (the test timed out). Now validation measures the depth first: the call
 * is answered `invalid_arguments`, nothing runs, no card is shown, the turn goes on and the next
 * turn of the session works.
 */
import { resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { ToolResultBlock } from '../../src/protocol/content.js';
import { MAX_JSON_DEPTH } from '../../src/protocol/json-depth.js';
import { mcpTools, type McpTools } from '../../src/services/mcp/tools.js';
import { defineTool } from '../../src/services/tools/define.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from '../support/databases.js';
import { harness } from '../support/harness.js';

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));
const servers: McpTools[] = [];
afterEach(async () => {
  while (servers.length > 0) await servers.pop()!.close();
});

const LEVELS = 100_000;
const deepArray = '['.repeat(LEVELS) + ']'.repeat(LEVELS);
const deepObject = '{"a":'.repeat(LEVELS) + '1' + '}'.repeat(LEVELS);

let ran = 0;
/** A host tool that takes any value (as MCP tools and loose host schemas do) and asks first. */
const anyTool = defineTool({
  name: 'keep',
  description: 'Keeps any value.',
  parameters: z.object({ data: z.unknown() }),
  authorize: () => ({ kind: 'card', card: { toolName: 'keep', kind: 'approval', summary: 'keep a value', reason: 'it asks' } }),
  execute: () => {
    ran += 1;
    return 'kept';
  },
});

describe('tool arguments nested 100,000 levels deep', () => {
  it.each([
    ['an array', deepArray],
    ['an object', deepObject],
  ])('%s: invalid_arguments without a card, the turn and the session go on', async (_kind, deep) => {
    ran = 0;
    const args = `{"data":${deep}}`;
    const h = await harness(storage, [{ toolCalls: [{ name: 'keep', arguments: args }] }, { toolCalls: [{ name: 'keep', arguments: args }] }, { text: 'done' }, { text: 'again' }], { tools: [anyTool] });
    let cards = 0;
    h.session.updates$.subscribe((u) => {
      if (u.update.type !== 'permission_requested') return;
      cards += 1;
      const id = u.update.toolCallId;
      queueMicrotask(() => void h.session.resolvePermission(u.turnId!, id, 'allow_once'));
    });
    const { outcome } = await h.run('go');
    expect(outcome).toMatchObject({ status: 'completed', finalText: 'done' });
    expect(cards).toBe(0);
    expect(ran).toBe(0);
    const results = h.model.requests[2]!.messages.filter((m) => m.role === 'tool') as Array<{ text: string }>;
    expect(results.map((r) => r.text)).toEqual(Array(2).fill(`invalid tool input: the arguments nest deeper than ${MAX_JSON_DEPTH} levels of arrays and objects; nothing was run`));
    const stored = await storage.listMessages(h.session.sessionId);
    expect(stored.filter((m) => m.role === 'tool').map((m) => (m.content[0] as ToolResultBlock).error?.code)).toEqual(['invalid_arguments', 'invalid_arguments']);
    expect((await h.run('once more')).outcome).toMatchObject({ status: 'completed', finalText: 'again' });
  }, 20_000);

  it('an MCP tool (a real server process): invalid_arguments before its card, the server never called', async () => {
    const server = await mcpTools({ name: 'hostile', command: process.execPath, args: [resolve('test/fixtures/mcp/hostile-server.mjs')], env: { MCP_HOSTILE: 'spoof' } });
    servers.push(server);
    const h = await harness(storage, [{ toolCalls: [{ name: 'hostile__read__2K_', arguments: `{"path":${deepArray}}` }] }, { text: 'done' }], { tools: [server] });
    let cards = 0;
    h.session.updates$.subscribe((u) => {
      if (u.update.type === 'permission_requested') cards += 1;
    });
    const { outcome } = await h.run('go');
    expect(outcome).toMatchObject({ status: 'completed', finalText: 'done' });
    expect(cards).toBe(0);
    const result = h.model.requests[1]!.messages.find((m) => m.role === 'tool') as { text: string };
    expect(result.text).toContain(`nest deeper than ${MAX_JSON_DEPTH} levels`);
  }, 20_000);

  it('provider data nested as deep (a reasoning item) ends the model call as model_protocol_error, not a stack overflow', async () => {
    const h = await harness(storage, [{ events: [{ type: 'provider_opaque', provider: 'openai.responses', data: { item: JSON.parse(deepArray) as unknown } }, { type: 'completed', usage: { inputTokens: 1, outputTokens: 1, cachedInputTokens: 0, reasoningTokens: 0 } }] }, { text: 'again' }]);
    const { outcome } = await h.run('go');
    expect(outcome).toMatchObject({ status: 'failed', code: 'model_protocol_error' });
    expect(outcome.status === 'failed' && outcome.message).toContain(`nested deeper than ${MAX_JSON_DEPTH} levels`);
    expect((await h.run('once more')).outcome).toMatchObject({ status: 'completed', finalText: 'again' });
  }, 20_000);
});
