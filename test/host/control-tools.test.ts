/**
 * Issue 16.3: a host that registers one tool offers the model exactly that tool plus the control
 * tools it turned on, each by its own option. The attack: a model that calls a control tool the
 * host did not turn on (update_plan, spawn_agent) gets it refused as unknown; nothing runs.
 */
import { describe, expect, it } from 'vitest';
import { createCore } from '../../src/core.js';
import { AGENT_TOOL_NAMES } from '../../src/services/agents/control.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { echoTool } from '../../src/testing/tools.js';
import { usePglite } from '../support/databases.js';

describe('control tools are opt-in', () => {
  let storage: SqlSessionStorage;
  usePglite((s) => (storage = s));

  async function toolNames(options: Parameters<typeof createCore>[0] extends infer O ? Partial<O> : never): Promise<string[]> {
    const model = scriptedModel([{ text: 'ok' }]);
    const core = await createCore({ storage, model, tools: [echoTool], closeStorageOnShutdown: false, worldState: false, ...options });
    try {
      await (await core.createSession({ workingDirectory: process.cwd() })).run('hi');
      return model.requests[0]!.tools.map((t) => t.name);
    } finally {
      await core.shutdown();
    }
  }

  it('one registered tool and no options: exactly that tool', async () => {
    expect(await toolNames({})).toEqual(['echo']);
  });

  it('each option adds its own tools and nothing else', async () => {
    expect(await toolNames({ plan: true })).toEqual(['echo', 'update_plan']);
    expect(await toolNames({ conversationHistory: true })).toEqual(['echo', 'conversation_history']);
    expect(await toolNames({ userInput: true })).toEqual(['echo', 'request_user_input']);
    expect(await toolNames({ agents: true })).toEqual(['echo', ...AGENT_TOOL_NAMES]);
    expect(await toolNames({ plan: true, conversationHistory: true })).toEqual(['echo', 'conversation_history', 'update_plan']);
  });

  it('a control tool the host did not turn on is refused as unknown and never runs', async () => {
    const model = scriptedModel([
      { toolCalls: [{ name: 'update_plan', arguments: { plan: [{ step: 'sneak', status: 'in_progress' }] }, callId: 'p1' }] },
      { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'x', message: 'go' }, callId: 'a1' }] },
      { text: 'gave up' },
    ]);
    const core = await createCore({ storage, model, tools: [echoTool], closeStorageOnShutdown: false, worldState: false });
    try {
      const session = await core.createSession({ workingDirectory: process.cwd() });
      const updates: string[] = [];
      session.updates$.subscribe((e) => updates.push(e.update.type));
      const result = await session.run('plan something');
      expect(result.text).toBe('gave up');
      const results = model.requests[2]!.messages.filter((m) => m.role === 'tool');
      expect(results.map((m) => [m.toolName, m.status])).toEqual([
        ['update_plan', 'error'],
        ['spawn_agent', 'error'],
      ]);
      expect(updates).not.toContain('plan_updated');
      expect(session.snapshot().runtime).toMatchObject({ type: 'terminal', plan: null });
      expect(await core.listChildSessions(session.sessionId)).toEqual([]);
      model.assertDone();
    } finally {
      await core.shutdown();
    }
  });
});
