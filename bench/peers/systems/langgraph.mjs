/**
 * LangGraph.js `createReactAgent` with a fake chat model (a `BaseChatModel` whose `bindTools` returns
 * itself): an `AIMessage` with one tool call while fewer than K `ToolMessage`s are in its input, then
 * the answer. Without a checkpointer (in memory), or with `PostgresSaver` (its own pool of 10) and a
 * fresh `thread_id` per turn, with `durability: 'async'` (checkpoints written while the next step
 * runs) or `'sync'` (each checkpoint written before the next step starts).
 */
import { randomUUID } from 'node:crypto';
import { BaseChatModel } from '@langchain/core/language_models/chat_models';
import { AIMessage } from '@langchain/core/messages';
import { tool } from '@langchain/core/tools';
import { PostgresSaver } from '@langchain/langgraph-checkpoint-postgres';
import { createReactAgent } from '@langchain/langgraph/prebuilt';
import pg from 'pg';
import { z } from 'zod';
import { decide, FINAL_TEXT, instantTool, USER_TEXT } from '../scenario.mjs';

let calls = 0;

class FakeChat extends BaseChatModel {
  _llmType() {
    return 'fake-zero';
  }
  bindTools() {
    return this;
  }
  async _generate(messages) {
    let results = 0;
    for (const m of messages) if (m._getType() === 'tool') results += 1;
    const next = decide(results);
    const message =
      next === null
        ? new AIMessage({ content: FINAL_TEXT })
        : new AIMessage({ content: '', tool_calls: [{ name: 'instant', args: { i: next }, id: `call_${(calls += 1)}`, type: 'tool_call' }] });
    return { generations: [{ text: typeof message.content === 'string' ? message.content : '', message }] };
  }
}

export function setupLangGraph(durability) {
  return async ({ url }) => {
    const instant = tool(async ({ i }) => instantTool(i), { name: 'instant', description: 'Returns at once.', schema: z.object({ i: z.number() }) });
    let saver;
    let pool;
    if (durability) {
      pool = new pg.Pool({ connectionString: url, max: 10 });
      saver = new PostgresSaver(pool);
      await saver.setup();
    }
    const agent = createReactAgent({ llm: new FakeChat({}), tools: [instant], ...(saver ? { checkpointer: saver } : {}) });
    return {
      async turn() {
        const config = { recursionLimit: 100, ...(saver ? { configurable: { thread_id: randomUUID() }, durability } : {}) };
        const state = await agent.invoke({ messages: [{ role: 'user', content: USER_TEXT }] }, config);
        const last = state.messages[state.messages.length - 1];
        if (last.content !== FINAL_TEXT) throw new Error(`langgraph: unexpected answer ${JSON.stringify(last.content)}`);
      },
      close: async () => {
        await pool?.end();
      },
    };
  };
}
