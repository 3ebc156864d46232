/**
 * The OpenAI Agents SDK's `Runner` (in memory, not durable) with the fake model as its `Model`
 * interface: `function_call` output items while fewer than K `function_call_result` items are in the
 * request, then an assistant message. Tracing is disabled: with no exporter configured it would only
 * try to ship spans to OpenAI's API, which no peer here does.
 */
import { Agent, Runner, setTracingDisabled, tool, Usage } from '@openai/agents';
import { z } from 'zod';
import { decide, FINAL_TEXT, instantTool, USER_TEXT } from '../scenario.mjs';

let calls = 0;
const model = {
  async getResponse(request) {
    const input = Array.isArray(request.input) ? request.input : [];
    let results = 0;
    for (const item of input) if (item.type === 'function_call_result') results += 1;
    const next = decide(results);
    const usage = new Usage({ requests: 1, inputTokens: 100, outputTokens: 10, totalTokens: 110 });
    if (next === null) {
      return { usage, output: [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: FINAL_TEXT }] }] };
    }
    calls += 1;
    return { usage, output: [{ type: 'function_call', callId: `call_${calls}`, name: 'instant', arguments: JSON.stringify({ i: next }), status: 'completed' }] };
  },
  getStreamedResponse() {
    throw new Error('not used');
  },
};

export function setupAgents() {
  return async () => {
    setTracingDisabled(true);
    const instant = tool({ name: 'instant', description: 'Returns at once.', parameters: z.object({ i: z.number() }), execute: async ({ i }) => instantTool(i) });
    const agent = new Agent({ name: 'bench', instructions: 'Use the tool.', model, tools: [instant] });
    const runner = new Runner({ tracingDisabled: true });
    return {
      async turn() {
        const result = await runner.run(agent, USER_TEXT, { maxTurns: 50 });
        if (result.finalOutput !== FINAL_TEXT) throw new Error(`agents: unexpected output ${result.finalOutput}`);
      },
      close: async () => {},
    };
  };
}
