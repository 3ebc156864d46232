/**
 * The Vercel AI SDK's `generateText` (in memory, not durable) with the fake model as a
 * `MockLanguageModelV3` from `ai/test`: a `tool-call` while fewer than K `tool-result` parts are in
 * the prompt, then text; `stopWhen` lets the loop run past K steps.
 */
import { generateText, stepCountIs, tool } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { z } from 'zod';
import { decide, FINAL_TEXT, instantTool, USER_TEXT } from '../scenario.mjs';

const usage = {
  inputTokens: { total: 100, noCache: 100, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 10, text: 10, reasoning: 0 },
};
let calls = 0;

export function setupAiSdk() {
  return async () => {
    const model = new MockLanguageModelV3({
      doGenerate: async ({ prompt }) => {
        let results = 0;
        for (const m of prompt) if (m.role === 'tool') for (const part of m.content) if (part.type === 'tool-result') results += 1;
        const next = decide(results);
        if (next === null) return { content: [{ type: 'text', text: FINAL_TEXT }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] };
        calls += 1;
        return {
          content: [{ type: 'tool-call', toolCallId: `call_${calls}`, toolName: 'instant', input: JSON.stringify({ i: next }) }],
          finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
          usage,
          warnings: [],
        };
      },
    });
    const tools = { instant: tool({ description: 'Returns at once.', inputSchema: z.object({ i: z.number() }), execute: async ({ i }) => instantTool(i) }) };
    return {
      async turn() {
        const result = await generateText({ model, tools, prompt: USER_TEXT, stopWhen: stepCountIs(50) });
        if (result.text !== FINAL_TEXT) throw new Error(`ai sdk: unexpected text ${result.text}`);
      },
      close: async () => {},
    };
  };
}
