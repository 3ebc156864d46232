/**
 * Attack round 5: a `__proto__` key in data that a tool returns from the outside world (here a host
 * tool that hands back the JSON document the model named, as a fetch tool would). `JSON.parse` makes
 * `__proto__` an ordinary key, but the copy that makes a value storable (a NUL or a lone surrogate
 * anywhere in it) assigned it, which set the copy's prototype to the attacker's object and dropped
 * the key: the stored artifact lost data and the in-memory copy inherited the attacker's fields.
 * Now the key is defined on the copy, kept as data, and nothing is inherited.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { storableValue } from '../../src/protocol/storable-text.js';
import { defineTool } from '../../src/services/tools/define.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { harness } from '../support/harness.js';
import { usePglite } from '../support/databases.js';

let storage: SqlSessionStorage;
usePglite((s) => (storage = s));

const DOCUMENT = '{"page":{"__proto__":{"status":"failed","polluted":true},"note":"nul\\u0000here"}}';

describe('a __proto__ key in returned data', () => {
  it('a host tool artifact keeps its __proto__ key through the storable copy; nothing is inherited', async () => {
    const tool = defineTool({
      name: 'fetch_json',
      description: 'Returns a JSON document as an artifact.',
      parameters: z.object({ body: z.string() }),
      execute: async ({ body }) => ({ status: 'succeeded' as const, text: 'fetched', artifacts: [JSON.parse(body) as Record<string, unknown>] }),
    });
    const h = await harness(storage, [{ toolCalls: [{ name: 'fetch_json', arguments: { body: DOCUMENT } }] }, { text: 'done' }], { tools: [tool] });
    const turnId = await h.start('go');
    expect(await h.session.waitForTurn(turnId)).toMatchObject({ status: 'completed' });
    const stored = (await storage.listMessages(h.session.sessionId)).find((m) => m.role === 'tool')!;
    const block = stored.content[0] as { artifacts?: Array<Record<string, unknown>> };
    const page = block.artifacts?.[0]?.page as Record<string, unknown>;
    expect(Object.keys(page).sort()).toEqual(['__proto__', 'note']);
    expect(page.note).toBe('nul\uFFFDhere');
    expect(JSON.stringify(page)).toContain('"__proto__":{"status":"failed","polluted":true}');
  });

  it('the storable copy itself (also used for provider data and tool progress) never sets a prototype', () => {
    const copy = storableValue(JSON.parse('{"__proto__":{"polluted":true},"t":"a\\u0000"}')) as Record<string, unknown>;
    expect(Object.getPrototypeOf(copy)).toBe(Object.prototype);
    expect(copy.polluted).toBeUndefined();
    expect(Object.keys(copy)).toEqual(['__proto__', 't']);
  });
});
