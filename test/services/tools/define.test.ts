/**
 * `defineTool` (issue 2, item 10): the JSON Schema the model sees is derived from the zod
 * parameters — required and optional fields, defaults, enums, nested objects, arrays and
 * descriptions — and it is exactly what a real turn sends in `request.tools`.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore } from '../../../src/core.js';
import { scriptedModel } from '../../../src/services/model/scripted.js';
import { defineTool, InvalidToolNameError, toolDefinition } from '../../../src/services/tools/define.js';
import { InputError, OpenworkError } from '../../../src/errors.js';
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
      // trust-leftovers point 3: typed `configuration_invalid`, never a bare TypeError.
      let thrown: unknown;
      try {
        defineTool({ name, description: 'd', parameters: z.object({}), execute: () => '' });
      } catch (error) {
        thrown = error;
      }
      expect(thrown, name).toBeInstanceOf(InvalidToolNameError);
      expect(thrown, name).toBeInstanceOf(InputError);
      expect(thrown, name).toMatchObject({ code: 'configuration_invalid', details: { toolName: name } });
    }
    // Not a string at all (a JavaScript caller): the same code.
    expect(() => defineTool({ name: 42 as unknown as string, description: 'd', parameters: z.object({}), execute: () => '' })).toThrow(OpenworkError);
    expect(defineTool({ name: 'ok-name_1', description: 'd', parameters: z.object({}), execute: () => '' }).name).toBe('ok-name_1');
  });

  describe('in a real turn', () => {
    let storage!: SqlSessionStorage;
    usePglite((s) => (storage = s));

    it('createCore refuses a tool made without defineTool whose name a provider would refuse: configuration_invalid', async () => {
      const model = scriptedModel([]);
      const bad = { name: 'has space', description: 'd', parameters: z.object({}), execute: () => '' };
      await expect(createCore({ storage, model, tools: [bad], closeStorageOnShutdown: false, worldState: false, agents: false })).rejects.toMatchObject({
        code: 'configuration_invalid',
        details: { toolName: 'has space' },
      });
    });

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
