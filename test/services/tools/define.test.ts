/**
 * `defineTool` (issue 2, item 10): the JSON Schema the model sees is derived from the zod
 * parameters — required and optional fields, defaults, enums, nested objects, arrays and
 * descriptions — and it is exactly what a real turn sends in `request.tools`.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore } from '../../../src/core.js';
import { scriptedModel } from '../../../src/services/model/scripted.js';
import { defineTool, toolDefinition } from '../../../src/services/tools/define.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { usePglite } from '../../support/databases.js';

const copyTool = defineTool({
  name: 'copy_file',
  description: 'Copies a file.',
  parameters: z.object({
    source: z.string().describe('path to read'),
    target: z.string(),
    mode: z.enum(['overwrite', 'skip', 'fail']),
    retries: z.number().min(0).default(3),
    note: z.string().optional(),
    options: z.object({
      recursive: z.boolean(),
      depth: z.number().optional(),
    }),
    tags: z.array(z.string()),
  }),
  execute: ({ source, target }) => `copied ${source} to ${target}`,
});

/** The schema written out by hand from the zod definition above. */
const EXPECTED_PARAMETERS = {
  type: 'object',
  properties: {
    source: { type: 'string', description: 'path to read' },
    target: { type: 'string' },
    mode: { type: 'string', enum: ['overwrite', 'skip', 'fail'] },
    // A defaulted field may be left out by the model: optional in the input schema, default shown.
    retries: { type: 'number', minimum: 0, default: 3 },
    note: { type: 'string' },
    options: {
      type: 'object',
      properties: { recursive: { type: 'boolean' }, depth: { type: 'number' } },
      required: ['recursive'],
    },
    tags: { type: 'array', items: { type: 'string' } },
  },
  required: ['source', 'target', 'mode', 'options', 'tags'],
};

describe('defineTool', () => {
  it('derives the JSON Schema of the arguments from the zod parameters', () => {
    const definition = toolDefinition(copyTool);
    expect(definition).toEqual({ name: 'copy_file', description: 'Copies a file.', parameters: EXPECTED_PARAMETERS });
    // No draft marker: providers take the bare schema object.
    expect(definition.parameters).not.toHaveProperty('$schema');
  });

  it('an object with no fields is an object schema with no properties', () => {
    const none = defineTool({ name: 'ping', description: 'Pings.', parameters: z.object({}), execute: () => 'pong' });
    expect(toolDefinition(none).parameters).toEqual({ type: 'object', properties: {} });
  });

  it('refuses a name the providers would refuse', () => {
    for (const name of ['', 'has space', 'dots.in.name', 'x'.repeat(65)]) {
      expect(() => defineTool({ name, description: 'd', parameters: z.object({}), execute: () => '' }), name).toThrow(TypeError);
    }
    expect(defineTool({ name: 'ok-name_1', description: 'd', parameters: z.object({}), execute: () => '' }).name).toBe('ok-name_1');
  });

  describe('in a real turn', () => {
    let storage!: SqlSessionStorage;
    usePglite((s) => (storage = s));

    it('the model receives the derived schema, and arguments without defaulted fields are completed by zod', async () => {
      const model = scriptedModel([
        { toolCalls: [{ name: 'copy_file', arguments: { source: 'a', target: 'b', mode: 'skip', options: { recursive: false }, tags: [] }, callId: 'c1' }] },
        { text: 'copied' },
      ]);
      let seen: unknown;
      const spying = defineTool({ ...copyTool, execute: (args) => ((seen = args), 'done') });
      const core = await createCore({ plan: true, storage, model, tools: [spying], closeStorageOnShutdown: false, worldState: false, agents: false, conversationHistory: false });
      try {
        const session = await core.createSession({ workingDirectory: process.cwd() });
        const { turnId } = await session.startTurn({ clientRequestId: 'r1', input: [{ type: 'text', text: 'copy' }] });
        expect(await session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'copied' });
        const sent = model.requests[0]!.tools.find((t) => t.name === 'copy_file');
        expect(sent).toEqual({ name: 'copy_file', description: 'Copies a file.', parameters: EXPECTED_PARAMETERS });
        expect(seen).toEqual({ source: 'a', target: 'b', mode: 'skip', retries: 3, options: { recursive: false }, tags: [] });
        model.assertDone();
      } finally {
        await core.shutdown();
      }
    });
  });
});
