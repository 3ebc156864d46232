/**
 * `scriptedModel`'s contract (issue 2, item 10): it records every request, fails a call it has no
 * step for ("no step for call N"), and `assertDone` fails on a step never used or a call too many.
 */
import { describe, expect, it } from 'vitest';
import { createCore } from '../../../src/core.js';
import { ModelError, OpenworkError } from '../../../src/errors.js';
import type { ModelRequest, ModelStreamEvent } from '../../../src/services/model/port.js';
import { ScriptError, scriptedModel, type ScriptedModel } from '../../../src/services/model/scripted.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { echoTool } from '../../../src/testing/tools.js';
import { checkRecordedRequests, registeredScriptedModels } from '../../support/request-check.js';
import { usePglite } from '../../support/databases.js';

function request(text: string): ModelRequest {
  return { system: [], messages: [{ role: 'user', content: [{ type: 'text', text }] }], tools: [] } as unknown as ModelRequest;
}

async function drain(model: ScriptedModel, req: ModelRequest): Promise<ModelStreamEvent[]> {
  const events: ModelStreamEvent[] = [];
  for await (const event of model.stream(req, { signal: new AbortController().signal })) events.push(event);
  return events;
}

describe('scriptedModel', () => {
  it('plays its steps in order and records a deep copy of every request', async () => {
    const model = scriptedModel([{ text: 'one' }, { toolCalls: [{ name: 'echo', arguments: { text: 'x' }, callId: 'c1' }] }]);
    const first = request('hello');
    const events = await drain(model, first);
    expect(events.filter((e) => e.type === 'text_delta').map((e) => (e as { delta: string }).delta).join('')).toBe('one');
    expect(events.at(-1)).toMatchObject({ type: 'completed', finishReason: 'stop' });
    (first.messages[0] as { content: Array<{ text: string }> }).content[0]!.text = 'changed after the call';
    expect(model.requests[0]!.messages[0]).toEqual({ role: 'user', content: [{ type: 'text', text: 'hello' }] });
    expect(model.remaining).toBe(1);
    const second = await drain(model, request('again'));
    expect(second[0]).toEqual({ type: 'tool_call', callId: 'c1', name: 'echo', arguments: '{"text":"x"}' });
    expect(second.at(-1)).toMatchObject({ type: 'completed', finishReason: 'tool_use' });
    expect(model.remaining).toBe(0);
    expect(() => model.assertDone()).not.toThrow();
  });

  it('assertDone throws on a step that was never used', async () => {
    const model = scriptedModel([{ text: 'used' }, { text: 'never used' }, { text: 'nor this' }]);
    await drain(model, request('hi'));
    expect(() => model.assertDone()).toThrow(ScriptError);
    // Typed (branch trust-typed): a host's tests tell a script mistake from a runtime failure by code.
    const thrown = (() => {
      try {
        model.assertDone();
      } catch (error) {
        return error;
      }
    })();
    expect(thrown).toBeInstanceOf(OpenworkError);
    expect(thrown).toMatchObject({ name: 'ScriptError', code: 'script_error', details: { unusedSteps: 2 } });
    expect(() => model.assertDone()).toThrow('2 scripted step(s) were never used');
    model.push({ text: 'and one more' });
    expect(() => model.assertDone()).toThrow('3 scripted step(s) were never used');
  });

  it('a call beyond the script fails with "no step for call N", is kept in `unexpected`, and assertDone throws', async () => {
    const model = scriptedModel([{ text: 'only one' }]);
    await drain(model, request('first'));
    const error = await drain(model, request('second')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ModelError);
    expect(error).toMatchObject({ code: 'model_error', message: 'scripted model: no step for call 2', details: { scriptError: true, call: 2 } });
    // The turn reports `model_error` (a turn failure code); the cause says it was the script's mistake.
    expect((error as ModelError).cause).toBeInstanceOf(ScriptError);
    expect((error as ModelError).cause).toMatchObject({ code: 'script_error' });
    expect(model.unexpected.map((r) => (r.messages[0] as { content: Array<{ text: string }> }).content[0]!.text)).toEqual(['second']);
    expect(model.requests).toHaveLength(2);
    expect(() => model.assertDone()).toThrow(expect.objectContaining({ code: 'script_error', message: 'the model was called 1 time(s) more than scripted' }));
  });

  it('an empty script fails its first call as call 1', async () => {
    const model = scriptedModel([]);
    await expect(drain(model, request('x'))).rejects.toThrow('scripted model: no step for call 1');
  });

  it('a generator script has no end: it never counts steps as unused', async () => {
    const model = scriptedModel((_req, i) => ({ text: `answer ${i}` }));
    expect(() => model.assertDone()).not.toThrow();
    await drain(model, request('a'));
    await drain(model, request('b'));
    expect(model.requests).toHaveLength(2);
    expect(() => model.assertDone()).not.toThrow();
  });

  it('`record: false` keeps no requests (for benchmarks) but still counts calls', async () => {
    const model = scriptedModel([{ text: 'x' }], { record: false });
    await drain(model, request('a'));
    expect(model.requests).toEqual([]);
    await expect(drain(model, request('b'))).rejects.toThrow('no step for call 2');
  });

  it('a hanging step ends with the abort reason when the call is aborted', async () => {
    const model = scriptedModel([{ hang: true, before: [{ type: 'text_delta', delta: 'partial' }] }]);
    const controller = new AbortController();
    const seen: ModelStreamEvent[] = [];
    const run = (async () => {
      for await (const event of model.stream(request('x'), { signal: controller.signal })) {
        seen.push(event);
        controller.abort(new Error('stop now'));
      }
    })();
    await expect(run).rejects.toThrow('stop now');
    expect(seen).toEqual([{ type: 'text_delta', delta: 'partial' }]);
  });

  describe('the request check every test gets (test/support/setup-request-check.ts)', () => {
    it('registers every scripted model a test creates and checks each recorded request once', async () => {
      checkRecordedRequests();
      const model = scriptedModel([{ text: 'a' }, { text: 'b' }]);
      expect(registeredScriptedModels()).toContain(model);
      await drain(model, request('fine'));
      expect(checkRecordedRequests()).toBe(1);
      // A result without its call: the check names the model and the request, then counts it as checked.
      const orphan = { system: [], tools: [], messages: [{ role: 'tool', callId: 'c9', toolName: 'echo', status: 'success', text: 'x' }] } as unknown as ModelRequest;
      await drain(model, orphan);
      expect(() => checkRecordedRequests()).toThrow(/scripted-model, request 2: request message 0: tool result c9 does not follow/);
      expect(checkRecordedRequests()).toBe(0);
    });

    it('a call left without its result in provider order is caught', async () => {
      const model = scriptedModel([{ text: 'a' }]);
      const unanswered = {
        system: [],
        tools: [],
        messages: [
          { role: 'assistant', content: [{ type: 'tool_call', callId: 'c1', name: 'echo', arguments: '{}' }, { type: 'tool_call', callId: 'c2', name: 'echo', arguments: '{}' }] },
          { role: 'tool', callId: 'c2', toolName: 'echo', status: 'success', text: 'x' },
          { role: 'tool', callId: 'c1', toolName: 'echo', status: 'success', text: 'x' },
        ],
      } as unknown as ModelRequest;
      await drain(model, unanswered);
      expect(() => checkRecordedRequests()).toThrow(/call c1 lacks its result at position 1/);
    });
  });

  describe('in a turn', () => {
    let storage!: SqlSessionStorage;
    usePglite((s) => (storage = s));

    it('a turn that calls the model once more than scripted fails with the script error as a model error', async () => {
      const model = scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { text: 'x' } }] }]);
      const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, tools: [echoTool], closeStorageOnShutdown: false, worldState: false });
      try {
        const session = await core.createSession({ workingDirectory: process.cwd() });
        const { turnId } = await session.startTurn({ clientRequestId: 'r1', input: [{ type: 'text', text: 'go' }] });
        const outcome = await session.waitForTurn(turnId);
        expect(outcome).toMatchObject({ status: 'failed', message: expect.stringContaining('scripted model: no step for call 2') });
        expect(() => model.assertDone()).toThrow(expect.objectContaining({ code: 'script_error', message: 'the model was called 1 time(s) more than scripted' }));
      } finally {
        await core.shutdown();
      }
    });
  });
});
