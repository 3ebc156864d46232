/**
 * The openwork side of the peers scenario, shared by the system (systems/openwork.mjs) and the
 * counting scripts (count-step.mjs, pglite-calls.mjs, ../step-statements.ts): the fake model as a
 * `ModelPort`, the instant tool, and a trace recorder that drops every signal. Each takes what it
 * needs from the caller (the build's `defineTool`, the root's zod), so every script measures the
 * build it loaded; nothing here changes what a system measures.
 */
import { decide, FINAL_TEXT, instantTool } from './scenario.mjs';

/** The fake model as a ModelPort: no latency, no recording, O(request) only to count tool results. */
export function fakeModelPort() {
  let calls = 0;
  return {
    id: 'fake/zero',
    providerId: 'fake',
    model: 'zero',
    contextWindow: 200_000,
    maxOutputTokens: 8_000,
    async *stream(request) {
      let results = 0;
      for (const m of request.messages) if (m.role === 'tool') results += 1;
      const next = decide(results);
      const usage = { inputTokens: 100, outputTokens: 10, cachedInputTokens: 0, reasoningTokens: 0 };
      if (next === null) {
        yield { type: 'text_delta', delta: FINAL_TEXT };
        yield { type: 'completed', usage, finishReason: 'stop' };
        return;
      }
      calls += 1;
      yield { type: 'tool_call', callId: `call_${calls}`, name: 'instant', arguments: JSON.stringify({ i: next }) };
      yield { type: 'completed', usage, finishReason: 'tool_use' };
    },
  };
}

/** The one instant tool, defined with the build's own `defineTool` and the zod instance it uses. */
export function instantToolOf(defineTool, z) {
  return defineTool({ name: 'instant', description: 'Returns at once.', parameters: z.object({ i: z.number() }), execute: ({ i }) => instantTool(i) });
}

/** A trace recorder that drops every signal: the `trace off` variant, to show the trace's share. */
export const NO_TRACE = {
  record() {},
  async flush() {
    return { flushed: true, droppedSignals: 0, writeFailures: 0, written: 0, queued: 0 };
  },
  stats: () => ({ droppedSignals: 0, writeFailures: 0, written: 0, queued: 0 }),
  async close() {},
};
