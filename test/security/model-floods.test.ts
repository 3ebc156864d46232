/**
 * A hostile model floods the runtime through its own response (played through the public API with
 * the built-in tools): one tool call with 4.5 million characters of arguments, a response of 300
 * distinct tool calls, an endless text stream, a tool name of a megabyte. Each ends bounded: the
 * oversized call gets `invalid_arguments` and the turn goes on, the others end the model call as
 * `model_protocol_error` before any tool runs; nothing of the flood is stored or sent again.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { scriptedModel, type ScriptedStep } from '../../src/services/model/scripted.js';
import { MAX_RESPONSE_CHARS, MAX_TOOL_ARGUMENTS_CHARS, MAX_TOOL_CALLS_PER_RESPONSE } from '../../src/services/model/stream-events.js';
import type { ModelStreamEvent } from '../../src/services/model/port.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { type ToolEnv } from '../support/tool-env.js';
import { useToolTurnBed } from '../support/tool-turn-bed.js';
import { builtinToolsCore } from '../support/scripted-attack.js';

let storage: SqlSessionStorage;
let env: ToolEnv;
const open = useToolTurnBed((s) => (storage = s), (e) => (env = e));

const USAGE = { inputTokens: 1, outputTokens: 1, cachedInputTokens: 0, reasoningTokens: 0 };

async function runTurn(steps: ScriptedStep[]) {
  const model = scriptedModel(steps);
  const core = await builtinToolsCore(env, storage, model);
  open.push(core);
  const session = await core.createSession({ workingDirectory: env.ws });
  const { turnId } = await session.startTurn({ clientRequestId: `flood-${Math.random()}`, input: [{ type: 'text', text: 'go' }] });
  const outcome = await session.waitForTurn(turnId);
  const messages = await storage.listMessages(session.sessionId);
  return { outcome, model, messages };
}

describe('the model floods the runtime through its response', () => {
  it('a tool call with 4.5 million characters of arguments is refused as invalid_arguments, stored as a marker, and the turn goes on', async () => {
    const huge = JSON.stringify({ path: 'huge.txt', content: 'x'.repeat(4_500_000) });
    expect(huge.length).toBeGreaterThan(MAX_TOOL_ARGUMENTS_CHARS);
    const started = Date.now();
    const { outcome, model, messages } = await runTurn([
      // Usage given, so that the scripted model does not count the flood's tokens itself.
      { toolCalls: [{ name: 'write', arguments: huge }], usage: { inputTokens: 1, outputTokens: 1 } },
      { toolCalls: [{ name: 'write', arguments: { path: 'small.txt', content: 'fine\n' } }] },
      { text: 'done' },
    ]);
    expect(outcome).toMatchObject({ status: 'completed' });
    // Bounded: it took over two minutes and 3.7 GB for 200 MB before the limit.
    expect(Date.now() - started).toBeLessThan(20_000);
    const second = model.requests[1]!;
    const tool = second.messages.find((m) => m.role === 'tool') as { text: string } | undefined;
    expect(tool?.text).toContain(`the arguments were ${huge.length} characters, over the limit of ${MAX_TOOL_ARGUMENTS_CHARS}`);
    // Neither the next request nor the store carries the flood.
    expect(JSON.stringify(second.messages).length).toBeLessThan(100_000);
    expect(JSON.stringify(messages).length).toBeLessThan(100_000);
    expect(existsSync(join(env.ws, 'huge.txt'))).toBe(false);
    expect(existsSync(join(env.ws, 'small.txt'))).toBe(true);
  }, 60_000);

  it('a response of 300 distinct tool calls ends as model_protocol_error before any of them runs', async () => {
    const calls = Array.from({ length: 300 }, (_, i) => ({ name: 'write', arguments: { path: `many/f${i}.txt`, content: `${i}\n` } }));
    const { outcome } = await runTurn([{ toolCalls: calls }]);
    expect(outcome).toMatchObject({ status: 'failed', code: 'model_protocol_error' });
    expect(outcome.status === 'failed' && outcome.message).toContain(`more than ${MAX_TOOL_CALLS_PER_RESPONSE} tool calls`);
    expect(existsSync(join(env.ws, 'many'))).toBe(false);
  }, 60_000);

  it('an endless text stream ends as model_protocol_error once it passes the response limit', async () => {
    const chunk = 'y'.repeat(1024 * 1024);
    const deltas = 20; // 20 MiB of text in one response
    const events: ModelStreamEvent[] = [...Array.from({ length: deltas }, () => ({ type: 'text_delta' as const, delta: chunk })), { type: 'completed', usage: USAGE }];
    const { outcome, messages } = await runTurn([{ events }]);
    expect(outcome).toMatchObject({ status: 'failed', code: 'model_protocol_error' });
    expect(outcome.status === 'failed' && outcome.message).toContain(`more than ${MAX_RESPONSE_CHARS} characters`);
    expect(JSON.stringify(messages).length).toBeLessThan(17 * 1024 * 1024);
  }, 60_000);

  it('a tool name of a megabyte ends as model_protocol_error, not as a megabyte "not found" result', async () => {
    const { outcome, messages } = await runTurn([{ toolCalls: [{ name: 'n'.repeat(1024 * 1024), arguments: {} }] }]);
    expect(outcome).toMatchObject({ status: 'failed', code: 'model_protocol_error' });
    expect(JSON.stringify(messages).length).toBeLessThan(100_000);
  }, 60_000);
});
