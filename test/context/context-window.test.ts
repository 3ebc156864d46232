/**
 * Reference §2.12, acceptance items 1-25 of the context window (request assembly, World State,
 * tool surface), through the real runtime on PGlite.
 */
import { mkdtempSync, mkdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore } from '../../src/core.js';
import { INTERRUPTED_RESULT_TEXT, assembleRequest, buildSystemContext } from '../../src/services/context/assemble.js';
import { estimateTokens } from '../../src/services/context/estimate.js';
import { SECTION_SPECS } from '../../src/services/context/world-state.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { Toolset } from '../../src/services/tools/registry.js';
import { updatePlanControlTool } from '../../src/services/plan/update-plan.js';
import { pgliteStorage } from '../../src/storage/pglite.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { defineTool } from '../../src/services/tools/define.js';
import { echoTool, failTool } from '../../src/testing/tools.js';
import { harness, updateTypes, type Harness } from '../support/harness.js';

function workspace(files: Record<string, string> = {}): string {
  const dir = mkdtempSync(join(tmpdir(), 'openwork-ws-'));
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(join(dir, name, '..'), { recursive: true });
    writeFileSync(join(dir, name), text);
  }
  return dir;
}

const worldStateOn = { worldState: {} } as const;

function userTexts(request: { messages: Array<{ role: string; kind?: string; content?: unknown }> }, kind: string): string[] {
  return request.messages
    .filter((m) => m.role === 'user' && m.kind === kind)
    .map((m) => (m.content as Array<{ text: string }>).map((b) => b.text).join(''));
}

describe('context window (reference §2.12)', () => {
  let storage: SqlSessionStorage;
  beforeAll(async () => {
    storage = pgliteStorage();
    await storage.migrate();
  });
  afterAll(() => storage.close());

  it('acc 1: the system context holds only the agent prompt; AGENTS.md arrives as a world_state user message', async () => {
    const dir = workspace({ 'AGENTS.md': 'Always answer in haiku.' });
    const h = await harness(storage, [{ text: 'ok' }], { ...worldStateOn, workingDirectory: dir, systemPrompt: 'You are the agent.' });
    await h.run('hello');
    const request = h.model.requests[0]!;
    expect(request.system).toHaveLength(1);
    expect(request.system[0]!.key).toBe('core/agent-system');
    expect(request.system[0]!.content.startsWith('You are the agent.')).toBe(true);
    expect(request.system[0]!.content).not.toContain('haiku');
    expect(userTexts(request, 'world_state').some((t) => t === '<project_instructions>\nAlways answer in haiku.\n</project_instructions>')).toBe(true);
  });

  it('acc 2: a missing or blank AGENTS.md gives no section and no empty message', async () => {
    const blank = workspace({ 'AGENTS.md': '  \n\t\n' });
    const h = await harness(storage, [{ text: 'ok' }], { ...worldStateOn, workingDirectory: blank });
    await h.run('hello');
    const sections = userTexts(h.model.requests[0]!, 'world_state');
    expect(sections.some((t) => t.includes('<project_instructions>'))).toBe(false);
    expect(sections.every((t) => t.trim() !== '')).toBe(true);
    expect(sections.map((t) => t.split('\n')[0])).toEqual(['<user_project_context format_version="1">', '<sandbox_policy>']);
  });

  it('acc 3: a symlinked or oversized AGENTS.md fails the turn with project_instruction_error before any model call', async () => {
    const big = workspace({ 'AGENTS.md': 'x'.repeat(64 * 1024 + 1) });
    const h1 = await harness(storage, [{ text: 'never' }], { ...worldStateOn, workingDirectory: big });
    expect((await h1.run('hello')).outcome).toMatchObject({ status: 'failed', code: 'project_instruction_error' });
    expect(h1.model.requests).toHaveLength(0);
    const linked = workspace({ 'real.md': 'instructions' });
    symlinkSync(join(linked, 'real.md'), join(linked, 'AGENTS.md'));
    const h2 = await harness(storage, [{ text: 'never' }], { ...worldStateOn, workingDirectory: linked });
    expect((await h2.run('hello')).outcome).toMatchObject({ status: 'failed', code: 'project_instruction_error', message: expect.stringContaining('symbolic link') });
    expect(h2.model.requests).toHaveLength(0);
  });

  it('acc 4: a duplicate system context key fails assembly deterministically', () => {
    const part = buildSystemContext('p', '');
    for (let i = 0; i < 3; i += 1) {
      expect(() => assembleRequest({ system: [...part, ...part], conversation: [], tools: [] })).toThrow('request assembly failed: duplicate system context key core/agent-system');
    }
  });

  it('acc 5: uncompacted, the request holds the whole committed conversation; compacted, replay + summary + reminder + later messages', async () => {
    const h = await harness(storage, [{ text: 'one' }, { text: 'two' }]);
    await h.run('first');
    await h.run('second');
    const stored = await h.session.messages();
    expect(h.model.requests[1]!.messages.map((m) => (m.role === 'user' ? (m.content[0] as { text: string }).text : m.role))).toEqual(['first', 'assistant', 'second']);
    expect(stored).toHaveLength(4);
  });

  it('acc 6: the request never holds the draft or a system message', async () => {
    const h = await harness(storage, [{ text: 'streamed answer', chunk: 3 }, { text: 'next' }]);
    await h.run('one');
    await h.run('two');
    for (const request of h.model.requests) {
      expect(request.messages.some((m) => (m.role as string) === 'system')).toBe(false);
    }
    // The second request holds the first answer once: as the committed message, not as a draft.
    expect(JSON.stringify(h.model.requests[1]!.messages).split('streamed answer').length - 1).toBe(1);
  });

  it('acc 7: persisted assistant messages and tool results are in the next call', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'x' }, callId: 'e1' }] }, { text: 'done' }]);
    await h.run('go');
    expect(h.model.requests[1]!.messages.slice(-2).map((m) => m.role)).toEqual(['assistant', 'tool']);
  });

  it('acc 10: Chat State holds only committed messages, never model, prompt or tool definitions', async () => {
    const h = await harness(storage, [{ text: 'ok' }], { systemPrompt: 'UNIQUE-PROMPT-MARKER' });
    await h.run('hi');
    const view = h.session.inspectContext();
    expect(JSON.stringify(view.conversation)).not.toContain('UNIQUE-PROMPT-MARKER');
    expect(JSON.stringify(view.conversation)).not.toContain('"parameters"');
    expect(view.provenance.every((p) => p.startsWith('msg_'))).toBe(true);
  });

  it('acc 11-13: definitions and dispatch come from one tool surface, in a deterministic order', async () => {
    const toolset = new Toolset([echoTool, failTool], [updatePlanControlTool]);
    expect(toolset.definitions.map((d) => d.name)).toEqual(['echo', 'fail', 'update_plan']);
    for (const d of toolset.definitions) expect(toolset.resolve(d.name)).toBeDefined();
    expect(toolset.resolve('bash')).toBeUndefined();
    expect(() => new Toolset([echoTool, { ...echoTool, name: 'update_plan' }], [updatePlanControlTool])).toThrow(/collision/);
    const h = await harness(storage, [{ toolCalls: [{ name: 'slow_unadvertised', arguments: {}, callId: 'u' }] }, { text: 'ok' }]);
    await h.run('x');
    expect(h.model.requests[0]!.tools.map((t) => t.name)).toEqual([
      'echo',
      'fail',
      'guarded',
      'slow',
      'conversation_history',
      'update_plan',
      'spawn_agent',
      'wait_agent',
      'list_agents',
      'followup_task',
      'interrupt_agent',
    ]);
    expect(h.model.requests[1]!.messages.at(-1)).toMatchObject({ status: 'error', text: "tool 'slow_unadvertised' not found" });
  });

  it('acc 14-16: fixed region boundaries, a system message refused, a provider-neutral request', () => {
    const prepared = assembleRequest({
      system: buildSystemContext('agent', 'rules'),
      conversation: [],
      tools: [{ name: 't', description: 'd', parameters: { type: 'object' } }],
      maxOutputTokens: 100,
    });
    expect(Object.keys(prepared.request).sort()).toEqual(['maxOutputTokens', 'messages', 'system', 'tools']);
    expect(() =>
      assembleRequest({
        system: buildSystemContext('a', ''),
        conversation: [{ id: 's', sessionId: 's', turnId: null, sequence: 1, role: 'system' as never, kind: 'normal', content: [], createdAt: '' }],
        tools: [],
      }),
    ).toThrow('request assembly failed: a system message is in the conversation');
  });

  it('acc 17: the estimate measures the very request that was submitted', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'x'.repeat(999) } }] }, { text: 'ok' }]);
    const { turnId } = await h.run('measure');
    await h.core.flushTrace();
    const spans = (await storage.listTraceSpans({ turnId })).filter((s) => s.kind === 'model_call');
    spans.forEach((span, i) => {
      const request = h.model.requests[i]!;
      expect(span.attributes.requestEstimatedInputTokens).toBe(estimateTokens(request.system) + estimateTokens(request.messages) + estimateTokens(request.tools));
    });
  });

  it('acc 18: context inspection shows the projection the next request uses', async () => {
    const h = await harness(storage, [{ text: 'one' }, { text: 'two' }]);
    await h.run('first');
    const inspected = h.session.inspectContext();
    await h.run('second');
    const next = h.model.requests[1]!;
    expect(next.messages.slice(0, inspected.conversation.length)).toEqual(inspected.conversation);
    expect(next.system).toEqual(inspected.system);
    expect(next.tools).toEqual(inspected.tools);
    expect(inspected.estimate.estimatedInputTokens).toBe(estimateTokens(inspected.system) + estimateTokens(inspected.conversation) + estimateTokens(inspected.tools));
  });

  it('acc 20: the system prefix and tool definitions are byte-identical across calls', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'a' } }] }, { toolCalls: [{ name: 'echo', arguments: { text: 'b' } }] }, { text: 'c' }]);
    await h.run('go');
    const [a, b, c] = h.model.requests;
    expect(JSON.stringify(b!.system)).toBe(JSON.stringify(a!.system));
    expect(JSON.stringify(c!.tools)).toBe(JSON.stringify(a!.tools));
    // And the conversation grows only at the end: earlier bytes are a prefix (prompt caches survive).
    expect(JSON.stringify(b!.messages).startsWith(JSON.stringify(a!.messages).slice(0, -1))).toBe(true);
  });

  it('acc 19: across a compaction the system context and tool surface are rebuilt from their sources and World State is sent again', async () => {
    const { compactingModel } = await import('../support/summaries.js');
    const dir = workspace({ 'AGENTS.md': 'Rules stay.' });
    const model = compactingModel([{ text: 'one' }, { text: 'two' }]);
    const h = await harness(storage, model, { ...worldStateOn, workingDirectory: dir, compaction: { retryDelayMs: 1 } });
    await h.run('before');
    await h.session.compactConversation();
    await h.run('after');
    const [before, after] = model.turnRequests;
    expect(JSON.stringify(after!.system)).toBe(JSON.stringify(before!.system));
    expect(JSON.stringify(after!.tools)).toBe(JSON.stringify(before!.tools));
    expect(userTexts(after!, 'world_state').map((t) => t.split('\n')[0])).toEqual(['<user_project_context format_version="1">', '<project_instructions>', '<sandbox_policy>']);
    expect(JSON.stringify(model.summaryRequests[0]!.system)).not.toContain('update_plan');
  });

  it('acc 21: synthetic and contextual items are never the last real user request; a rewind injects nothing twice', async () => {
    const { compactingModel } = await import('../support/summaries.js');
    const model = compactingModel([{ text: 'one' }, { text: 'two' }, { text: 'three' }]);
    const h = await harness(storage, model, { compaction: { retryDelayMs: 1 } });
    await h.run('the request');
    await h.session.deliverAgentMessage({ id: 'agent-msg:x:y:final_answer', taskName: 'child', kind: 'final_answer', body: 'late news' });
    const a = (await h.session.compactConversation()).checkpoint!;
    const messages = await h.session.messages();
    expect(a.lastUserMessageId).toBe(messages.find((m) => m.kind === 'normal' && m.role === 'user')!.id);
    await h.run('second request');
    await h.session.rewindConversation(a.id);
    await h.run('third request');
    const last = model.turnRequests.at(-1)!.messages;
    const texts = last.map((m) => (m.role === 'user' ? (m.content[0] as { text: string }).text.slice(0, 40) : m.role));
    expect(texts.filter((t) => t === 'the request')).toHaveLength(1);
    expect(texts.filter((t) => t.startsWith('The earlier Conversation was compacted'))).toHaveLength(1);
    expect(texts.filter((t) => t.startsWith('<system_reminder'))).toHaveLength(1);
    expect(texts).not.toContain('second request');
  });

  it('acc 22: the first sampling emits every present section in fixed order; unchanged sources emit nothing', async () => {
    const dir = workspace({ 'AGENTS.md': 'Be brief.', 'src/index.ts': '' });
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'a' } }] }, { text: 'ok' }], { ...worldStateOn, workingDirectory: dir });
    await h.run('hello');
    const first = userTexts(h.model.requests[0]!, 'world_state');
    expect(first.map((t) => t.split('\n')[0])).toEqual(['<user_project_context format_version="1">', '<project_instructions>', '<sandbox_policy>']);
    expect(first[0]).toContain('- AGENTS.md\n- src/');
    expect(userTexts(h.model.requests[1]!, 'world_state')).toEqual(first);
    const stored = (await h.session.messages()).filter((m) => m.kind === 'world_state');
    expect(stored.map((m) => m.id)).toEqual([
      expect.stringMatching(/^world-state:turn_.*:1:1:runtime\/user-project-context$/),
      expect.stringMatching(/^world-state:turn_.*:1:1:project\/AGENTS\.md$/),
      expect.stringMatching(/^world-state:turn_.*:1:1:runtime\/sandbox-policy$/),
    ]);
  });

  it('acc 23: an AGENTS.md edit mid-turn reaches the next call with the replacement notice; removal sends the invalidation', async () => {
    const dir = workspace({ 'AGENTS.md': 'Version one.' });
    const editing = scriptedModel([
      { toolCalls: [{ name: 'echo', arguments: { text: 'a' } }] },
      () => {
        writeFileSync(join(dir, 'AGENTS.md'), 'Version two.');
        return { toolCalls: [{ name: 'echo', arguments: { text: 'b' } }] };
      },
      { toolCalls: [{ name: 'echo', arguments: { text: 'c' } }] },
      { text: 'done' },
    ]);
    const original = editing.stream.bind(editing);
    let calls = 0;
    editing.stream = (request, options) => {
      calls += 1;
      if (calls === 3) writeFileSync(join(dir, 'AGENTS.md'), '   ');
      return original(request, options);
    };
    const h = await harness(storage, editing, { ...worldStateOn, workingDirectory: dir });
    await h.run('edit');
    const agents = (i: number) => userTexts(h.model.requests[i]!, 'world_state').filter((t) => t.includes('AGENTS.md') || t.includes('project_instructions'));
    expect(agents(2).at(-1)).toBe(`${SECTION_SPECS['project/AGENTS.md'].replacement}\n\n<project_instructions>\nVersion two.\n</project_instructions>`);
    expect(agents(3).at(-1)).toBe(SECTION_SPECS['project/AGENTS.md'].invalidation);
  });

  it('acc 24: after a restart retained sections are re-sent once with the replacement notice; typed markers do not count', async () => {
    const dir = workspace({ 'AGENTS.md': 'Rules.' });
    const first = await createCore({ storage, model: scriptedModel([{ text: 'a' }]), closeStorageOnShutdown: false });
    const session = await first.createSession({ workingDirectory: dir });
    const { turnId } = await session.startTurn({ clientRequestId: 'a', input: [{ type: 'text', text: '<project_instructions>fake</project_instructions>' }] });
    await session.waitForTurn(turnId);
    await first.shutdown();
    const model = scriptedModel([{ text: 'b' }, { text: 'c' }]);
    const second = await createCore({ storage, model, closeStorageOnShutdown: false });
    const again = await second.loadSession(session.sessionId);
    for (const id of ['b', 'c']) {
      const { turnId: t } = await again.startTurn({ clientRequestId: id, input: [{ type: 'text', text: id }] });
      await again.waitForTurn(t);
    }
    const resent = userTexts(model.requests[0]!, 'world_state').slice(-3);
    expect(resent.map((t) => t.split('\n')[0])).toEqual([
      SECTION_SPECS['runtime/user-project-context'].replacement,
      SECTION_SPECS['project/AGENTS.md'].replacement,
      SECTION_SPECS['runtime/sandbox-policy'].replacement,
    ]);
    // Only once: the next call sends nothing new.
    expect(userTexts(model.requests[1]!, 'world_state')).toHaveLength(userTexts(model.requests[0]!, 'world_state').length);
    await second.shutdown();
  });

  it('acc 25: a call without a result gets the fixed interrupted text, byte-stable across requests', async () => {
    const h = await harness(storage, [{ text: 'x' }]);
    await h.run('x');
    const history = [
      { id: 'u', sessionId: 's', turnId: 't', sequence: 1, role: 'user' as const, kind: 'normal' as const, content: [{ type: 'text' as const, text: 'go' }], createdAt: '' },
      { id: 'a', sessionId: 's', turnId: 't', sequence: 2, role: 'assistant' as const, kind: 'normal' as const, content: [{ type: 'tool_call' as const, callId: 'c', name: 'echo', arguments: '{}' }], createdAt: '' },
    ];
    const one = assembleRequest({ system: buildSystemContext('a', ''), conversation: history, tools: [] });
    const two = assembleRequest({ system: buildSystemContext('a', ''), conversation: history, tools: [] });
    expect(one.request.messages.at(-1)).toMatchObject({ status: 'interrupted', text: INTERRUPTED_RESULT_TEXT });
    expect(JSON.stringify(one.request)).toBe(JSON.stringify(two.request));
  });

  describe('World State sampling failures through the runtime (reference §2.3)', () => {
    /** 64 entries of 255-character names: the rendered layout is over 16,384 characters. */
    function crowd(dir: string): void {
      for (let i = 0; i < 64; i += 1) writeFileSync(join(dir, `${String(i).padStart(3, '0')}${'n'.repeat(252)}`), '');
    }
    function uncrowd(dir: string): void {
      for (let i = 0; i < 64; i += 1) rmSync(join(dir, `${String(i).padStart(3, '0')}${'n'.repeat(252)}`));
    }
    const crowdTool = defineTool({
      name: 'crowd_workspace',
      description: 'Creates 64 files with very long names in the working directory.',
      parameters: z.object({}),
      execute: (_args, ctx) => {
        crowd(ctx.workingDirectory);
        return 'created 64 files';
      },
    });

    /** What the failed turn left behind: its updates, its row, its trace, its stored messages. */
    async function failedTurn(h: Harness, turnId: string, code: string, modelCalls: number) {
      const mine = h.updates.filter((e) => e.turnId === turnId);
      const finished = mine.filter((e) => e.update.type === 'turn_finished');
      expect(finished).toHaveLength(1);
      expect(finished[0]!.update).toMatchObject({ type: 'turn_finished', outcome: { status: 'failed', code } });
      expect(mine.at(-1)!.update.type).toBe('turn_finished');
      expect(await storage.getTurn(turnId)).toMatchObject({ status: 'failed', errorCode: code, modelCallCount: modelCalls, modelSubmissionCount: modelCalls });
      await h.core.flushTrace();
      const spans = await storage.listTraceSpans({ turnId });
      expect(spans.filter((s) => s.kind === 'model_call')).toHaveLength(modelCalls);
      expect(h.session.status()).toEqual({ type: 'idle' });
      return { updates: updateTypes(mine), stored: (await h.session.messages()).filter((m) => m.turnId === turnId) };
    }

    it('user_project_context_error: a layout over 16,384 characters fails the turn before the model is called; fixing it lets the next turn run', async () => {
      const dir = workspace();
      crowd(dir);
      const h = await harness(storage, [{ text: 'after the fix' }], { ...worldStateOn, workingDirectory: dir });
      const { turnId, outcome } = await h.run('hello');
      expect(outcome).toEqual({ status: 'failed', code: 'user_project_context_error', message: expect.stringMatching(/^the project context is \d+ characters; the limit is 16384$/) });
      expect(h.model.requests).toHaveLength(0);
      const { updates, stored } = await failedTurn(h, turnId, 'user_project_context_error', 0);
      expect(updates).not.toContain('text_delta');
      // The accepted request is stored; no World State message was written for the failed sampling.
      expect(stored.map((m) => `${m.role}:${m.kind}`)).toEqual(['user:normal']);

      uncrowd(dir);
      const next = await h.run('again');
      expect(next.outcome).toMatchObject({ status: 'completed' });
      const request = h.model.requests[0]!;
      expect(request.messages.map((m) => (m.role === 'user' ? `${m.kind}:${(m.content[0] as { text: string }).text.split('\n')[0]}` : m.role))).toEqual([
        'normal:hello',
        'normal:again',
        'world_state:<user_project_context format_version="1">',
        'world_state:<sandbox_policy>',
      ]);
    });

    it('user_project_context_error: an unreadable working directory fails the turn with the cause in the message', async () => {
      const dir = workspace();
      const h = await harness(storage, [], { ...worldStateOn, workingDirectory: dir });
      rmSync(dir, { recursive: true });
      const { turnId, outcome } = await h.run('hello');
      expect(outcome).toEqual({ status: 'failed', code: 'user_project_context_error', message: expect.stringContaining('cannot read the project layout: ENOENT') });
      expect(h.model.requests).toHaveLength(0);
      await failedTurn(h, turnId, 'user_project_context_error', 0);
    });

    it('user_project_context_error: a layout that outgrows the limit mid-turn fails the turn at the next sampling; the model saw only the first call', async () => {
      const dir = workspace();
      const h = await harness(storage, [{ toolCalls: [{ name: 'crowd_workspace', arguments: {}, callId: 'crowd' }] }], {
        ...worldStateOn,
        workingDirectory: dir,
        tools: [crowdTool],
      });
      const { turnId, outcome } = await h.run('fill the directory');
      expect(outcome).toMatchObject({ status: 'failed', code: 'user_project_context_error' });
      expect(h.model.requests).toHaveLength(1);
      expect(userTexts(h.model.requests[0]!, 'world_state').map((t) => t.split('\n')[0])).toEqual(['<user_project_context format_version="1">', '<sandbox_policy>']);
      const { updates, stored } = await failedTurn(h, turnId, 'user_project_context_error', 1);
      expect(updates.filter((u) => u === 'tool_call_finished')).toHaveLength(1);
      // The tool's result is durable; the second sampling wrote nothing.
      expect(stored.map((m) => `${m.role}:${m.kind}`)).toEqual(['user:normal', 'user:world_state', 'user:world_state', 'assistant:normal', 'tool:normal']);
      expect((await storage.listTraceSpans({ turnId })).filter((s) => s.kind === 'tool_call').map((s) => s.status)).toEqual(['succeeded']);
    });

    it('skill_catalog_task_error: a failing catalog task fails the turn before the model is called', async () => {
      const h = await harness(storage, [], {
        worldState: {
          skillsCatalog: async () => {
            throw new Error('catalog index is corrupt');
          },
        },
        workingDirectory: workspace(),
      });
      const { turnId, outcome } = await h.run('hello');
      expect(outcome).toEqual({ status: 'failed', code: 'skill_catalog_task_error', message: 'cannot build the skill catalog: catalog index is corrupt' });
      expect(h.model.requests).toHaveLength(0);
      const { stored } = await failedTurn(h, turnId, 'skill_catalog_task_error', 0);
      expect(stored.map((m) => `${m.role}:${m.kind}`)).toEqual(['user:normal']);
    });

    it('skill_catalog_task_error: a catalog that fails at the second sampling ends the turn after one model call; the model saw the catalog once', async () => {
      let samplings = 0;
      const catalog = '<available_skills>\n- lint: Runs the linter. (file: /skills/lint/SKILL.md)\n</available_skills>';
      const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'a' } }] }, { text: 'second turn' }], {
        worldState: {
          skillsCatalog: async () => {
            samplings += 1;
            if (samplings === 2) throw new Error('skill root vanished');
            return catalog;
          },
        },
        workingDirectory: workspace(),
      });
      const { turnId, outcome } = await h.run('hello');
      expect(outcome).toEqual({ status: 'failed', code: 'skill_catalog_task_error', message: 'cannot build the skill catalog: skill root vanished' });
      expect(h.model.requests).toHaveLength(1);
      expect(userTexts(h.model.requests[0]!, 'world_state')).toContain(catalog);
      await failedTurn(h, turnId, 'skill_catalog_task_error', 1);
      // The failed sampling changed nothing: the next sampling finds the catalog as first sent and adds no second copy.
      expect((await h.run('next')).outcome).toMatchObject({ status: 'completed' });
      expect(userTexts(h.model.requests[1]!, 'world_state').filter((t) => t.includes('<available_skills>'))).toEqual([catalog]);
    });
  });
});
