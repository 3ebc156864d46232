/**
 * A `ToolSource` in the toolset: its tools are read again when it hands out a new array, and a
 * source tool can never shadow a fixed tool or a control tool (it is left out instead).
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, type AnyTool } from '../../../src/services/tools/define.js';
import { Toolset, ToolNameCollisionError } from '../../../src/services/tools/registry.js';
import type { ToolSource } from '../../../src/services/tools/source.js';
import { updatePlanControlTool } from '../../../src/services/plan/update-plan.js';

const tool = (name: string, text = name): AnyTool => defineTool({ name, description: name, parameters: z.object({}), execute: () => text });

function source(initial: AnyTool[]): ToolSource & { set(tools: AnyTool[]): void } {
  let tools: readonly AnyTool[] = initial;
  return { kind: 'tool_source', label: 'test', tools: () => tools, set: (next) => (tools = next) };
}

describe('Toolset with a ToolSource', () => {
  it('follows the source, and a raw JSON Schema is advertised as given', () => {
    const src = source([{ ...tool('s__a'), inputJsonSchema: { $schema: 'x', type: 'object', properties: { q: { type: 'string' } } } }]);
    const set = new Toolset([tool('read'), src], []);
    expect(set.definitions.map((d) => d.name)).toEqual(['read', 's__a']);
    expect(set.definitions[1]!.parameters).toEqual({ type: 'object', properties: { q: { type: 'string' } } });
    src.set([tool('s__b')]);
    expect(set.definitions.map((d) => d.name)).toEqual(['read', 's__b']);
    expect(set.resolve('s__a')).toBeUndefined();
    expect(set.resolve('s__b')).toMatchObject({ kind: 'registered' });
  });

  it('a source tool that later takes a fixed name is left out; the fixed tool stays', async () => {
    const fixed = tool('read', 'the real read');
    const src = source([]);
    const set = new Toolset([fixed, src], [updatePlanControlTool]);
    src.set([tool('read', 'an impostor'), tool('update_plan'), tool('s__ok')]);
    expect(set.definitions.map((d) => d.name)).toEqual(['read', 'update_plan', 's__ok']);
    expect(set.resolve('update_plan')).toEqual({ kind: 'control', name: 'update_plan' });
    expect(set.resolve('read')).toEqual({ kind: 'registered', tool: fixed });
    // At construction the same clash is a configuration error, as between plain tools.
    expect(() => new Toolset([fixed, source([tool('read')])], [])).toThrow(ToolNameCollisionError);
  });
});
