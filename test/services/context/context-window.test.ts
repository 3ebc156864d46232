/**
 * Reference §2.12, acceptance items 1-25 of the context window (request assembly, World State,
 * tool surface), through the real runtime on PGlite.
 */
import { mkdtempSync, mkdirSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createCore } from '../../../src/core.js';
import { INTERRUPTED_RESULT_TEXT, assembleRequest, buildSystemContext } from '../../../src/services/context/assemble.js';
import { SUMMARY_PREFIX } from '../../../src/services/context/chat-state.js';
import { estimateTokens } from '../../../src/services/context/estimate.js';
import { SECTION_SPECS, diffWorldState, retainedSections } from '../../../src/services/context/world-state.js';
import { scriptedModel } from '../../../src/services/model/scripted.js';
import { Toolset } from '../../../src/services/tools/registry.js';
import { updatePlanControlTool } from '../../../src/services/plan/update-plan.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { defineTool } from '../../../src/services/tools/define.js';
import { echoTool, failTool } from '../../../src/testing/tools.js';
import { harness, updateTypes, type Harness } from '../../support/harness.js';
import { usePglite } from '../../support/databases.js';

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
  usePglite((s) => (storage = s));

  it('the system context holds only the agent prompt; AGENTS.md arrives as a world_state user message [reference §2.12 acc 1]', async () => {
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

  it('a missing or blank AGENTS.md gives no section and no empty message [reference §2.12 acc 2]', async () => {
    const blank = workspace({ 'AGENTS.md': '  \n\t\n' });
    const h = await harness(storage, [{ text: 'ok' }], { ...worldStateOn, workingDirectory: blank });
    await h.run('hello');
    const sections = userTexts(h.model.requests[0]!, 'world_state');
    expect(sections.some((t) => t.includes('<project_instructions>'))).toBe(false);
    expect(sections.every((t) => t.trim() !== '')).toBe(true);
    expect(sections.map((t) => t.split('\n')[0])).toEqual(['<user_project_context format_version="1">', '<sandbox_policy>']);
  });

  it('a symlinked or oversized AGENTS.md fails the turn with project_instruction_error before any model call [reference §2.12 acc 3]', async () => {
    const big = workspace({ 'AGENTS.md': 'x'.repeat(64 * 1024 + 1) });
    const h1 = await harness(storage, [], { ...worldStateOn, workingDirectory: big });
    expect((await h1.run('hello')).outcome).toMatchObject({ status: 'failed', code: 'project_instruction_error' });
    expect(h1.model.requests).toHaveLength(0);
    const linked = workspace({ 'real.md': 'instructions' });
    symlinkSync(join(linked, 'real.md'), join(linked, 'AGENTS.md'));
    const h2 = await harness(storage, [], { ...worldStateOn, workingDirectory: linked });
    expect((await h2.run('hello')).outcome).toMatchObject({ status: 'failed', code: 'project_instruction_error', message: expect.stringContaining('symbolic link') });
    expect(h2.model.requests).toHaveLength(0);
  });

  it('an AGENTS.md of exactly 64 KiB is accepted; the limit is on bytes, so 64 KiB of text with one multi-byte character is refused [reference §2.12 acc 3]', async () => {
    const limit = 64 * 1024;
    const exact = workspace({ 'AGENTS.md': 'y'.repeat(limit) });
    const h1 = await harness(storage, [{ text: 'ok' }], { ...worldStateOn, workingDirectory: exact });
    expect((await h1.run('hello')).outcome).toEqual({ status: 'completed', finalText: 'ok' });
    expect(userTexts(h1.model.requests[0]!, 'world_state').some((t) => t.startsWith('<project_instructions>') && t.includes('y'.repeat(100)))).toBe(true);
    const wide = workspace({ 'AGENTS.md': `${'y'.repeat(limit - 1)}é` });
    const h2 = await harness(storage, [], { ...worldStateOn, workingDirectory: wide });
    expect((await h2.run('hello')).outcome).toMatchObject({ status: 'failed', code: 'project_instruction_error' });
    expect(h2.model.requests).toHaveLength(0);
  });

  it('a duplicate system context key fails assembly deterministically [reference §2.12 acc 4]', () => {
    const part = buildSystemContext('p', '');
    for (let i = 0; i < 3; i += 1) {
      expect(() => assembleRequest({ system: [...part, ...part], conversation: [], tools: [] })).toThrow('request assembly failed: duplicate system context key core/agent-system');
    }
  });

  it('uncompacted, the request holds the whole committed conversation; compacted, replay + summary + reminder + later messages [reference §2.12 acc 5]', async () => {
    const { compactingModel } = await import('../../support/summaries.js');
    const model = compactingModel([{ toolCalls: [{ name: 'echo', arguments: { text: 'x' }, callId: 'e5' }] }, { text: 'one' }, { text: 'two' }, { text: 'three' }]);
    const h = await harness(storage, model, { compaction: { retryDelayMs: 1 } });
    await h.run('first');
    await h.run('second');
    const label = (m: { role: string; content?: unknown; kind?: string }) => (m.role === 'user' ? `user:${(m.content as Array<{ text: string }>)[0]!.text.slice(0, 27)}` : m.role);
    // Uncompacted: every committed message, in order.
    expect((await h.session.messages()).map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant', 'user', 'assistant']);
    expect(model.turnRequests[2]!.messages.map(label)).toEqual(['user:first', 'assistant', 'tool', 'assistant', 'user:second']);
    const { checkpoint } = await h.session.compactConversation();
    await h.run('third');
    // Compacted: replay of the last real request, the summary, the reminder, then what came after the boundary.
    expect(model.turnRequests[3]!.messages.map(label)).toEqual([
      'user:second',
      `user:${SUMMARY_PREFIX.slice(0, 27)}`,
      `user:${'<system_reminder format_version="1">'.slice(0, 27)}`,
      'user:third',
    ]);
    const [, summary, reminder] = model.turnRequests[3]!.messages;
    expect(summary).toEqual({ role: 'user', kind: 'synthetic', content: [{ type: 'text', text: `${SUMMARY_PREFIX}\n\n${checkpoint!.summary}` }] });
    expect(reminder).toEqual({ role: 'user', kind: 'synthetic', content: [{ type: 'text', text: checkpoint!.runtimeReminder }] });
  });

  it('the request never holds the draft or a system message [reference §2.12 acc 6]', async () => {
    const h = await harness(storage, [{ text: 'streamed answer', chunk: 3 }, { text: 'next' }]);
    await h.run('one');
    await h.run('two');
    for (const request of h.model.requests) {
      expect(request.messages.some((m) => (m.role as string) === 'system')).toBe(false);
    }
    // The second request holds the first answer once: as the committed message, not as a draft.
    expect(JSON.stringify(h.model.requests[1]!.messages).split('streamed answer').length - 1).toBe(1);
  });

  it('persisted assistant messages and tool results are in the next call [reference §2.12 acc 7]', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'x' }, callId: 'e1' }] }, { text: 'done' }]);
    await h.run('go');
    expect(h.model.requests[1]!.messages.slice(-2).map((m) => m.role)).toEqual(['assistant', 'tool']);
  });

  it('an explicit skill is a snapshot (name, path, body) before the user message; changing or deleting the file never rewrites the accepted turn, not even after a restart [reference §2.12 acc 8]', async () => {
    const root = realpathSync(mkdtempSync(join(tmpdir(), 'openwork-skills-')));
    mkdirSync(join(root, 'lint'));
    const file = join(root, 'lint', 'SKILL.md');
    writeFileSync(file, '---\ndescription: Lints.\n---\n\nRun the linter with --strict.\n');
    const model = scriptedModel([
      () => {
        // Mid-turn, the skill file changes on disk.
        writeFileSync(file, '---\ndescription: Lints.\n---\n\nCHANGED BODY\n');
        return { toolCalls: [{ name: 'echo', arguments: { text: 'a' } }] };
      },
      { text: 'linted' },
    ]);
    const first = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, worldState: false, skills: { root }, closeStorageOnShutdown: false, tools: [echoTool] });
    const session = await first.createSession({ workingDirectory: workspace() });
    const { turnId } = await session.startTurn({ clientRequestId: 'skill-8', input: [{ type: 'skill', name: 'lint', path: file }, { type: 'text', text: 'lint it' }] });
    expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'completed' });
    const snapshot = `<skill>\n<name>lint</name>\n<path>${file}</path>\nRun the linter with --strict.\n</skill>`;
    const head = (r: { messages: Array<{ role: string; kind?: string; content?: unknown }> }) =>
      r.messages.slice(0, 2).map((m) => `${m.kind}:${(m.content as Array<{ text: string }>)[0]!.text}`);
    expect(head(model.requests[0]!)).toEqual([`skill_instruction:${snapshot}`, 'normal:lint it']);
    expect(head(model.requests[1]!)).toEqual([`skill_instruction:${snapshot}`, 'normal:lint it']);
    await first.shutdown();
    rmSync(join(root, 'lint'), { recursive: true });
    const later = scriptedModel([{ text: 'still there' }]);
    const second = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model: later, worldState: false, skills: { root }, closeStorageOnShutdown: false, tools: [echoTool] });
    const again = await second.loadSession(session.sessionId);
    const next = await again.startTurn({ clientRequestId: 'skill-8b', input: [{ type: 'text', text: 'and now?' }] });
    expect(await again.waitForTurn(next.turnId)).toMatchObject({ status: 'completed' });
    expect(head(later.requests[0]!)).toEqual([`skill_instruction:${snapshot}`, 'normal:lint it']);
    expect(JSON.stringify(later.requests[0])).not.toContain('CHANGED BODY');
    await second.shutdown();
  });

  it('request assembly passes contextual text through without knowing skills; neither it nor the provider adapters can reach a skill source [reference §2.12 acc 9]', () => {
    // Behaviour: a skill body is just user text of kind skill_instruction; its path is never opened.
    const missing = '/nonexistent/skills/ghost/SKILL.md';
    const text = `<skill>\n<name>ghost</name>\n<path>${missing}</path>\nBody from the stored snapshot.\n</skill>`;
    const prepared = assembleRequest({
      system: buildSystemContext('agent', ''),
      conversation: [
        { id: 'k', sessionId: 's', turnId: 't', sequence: 1, role: 'user', kind: 'skill_instruction', content: [{ type: 'text', text }], createdAt: '' },
        { id: 'u', sessionId: 's', turnId: 't', sequence: 2, role: 'user', kind: 'normal', content: [{ type: 'text', text: 'go' }], createdAt: '' },
      ],
      tools: [],
    });
    expect(prepared.request.messages[0]).toEqual({ role: 'user', kind: 'skill_instruction', content: [{ type: 'text', text }] });
    // Structure: the modules that assemble and encode requests import nothing from skills and no file system.
    const src = join(__dirname, '../../../src');
    const closure = new Set<string>();
    const visit = (file: string) => {
      if (closure.has(file)) return;
      closure.add(file);
      const code = readFileSync(file, 'utf8');
      // Modules that run: value imports and re-exports (type-only ones are erased by the compiler).
      for (const [, typeOnly, spec] of code.matchAll(/^(?:import|export)\s+(type\s+)?[^;]*?from '([^']+)';/gm)) {
        if (typeOnly) continue;
        if (spec!.startsWith('.')) visit(join(dirname(file), spec!.replace(/\.js$/, '.ts')));
        else closure.add(spec!);
      }
    };
    for (const entry of ['services/context/assemble.ts', 'services/model/openai.ts', 'services/model/scripted.ts']) visit(join(src, entry));
    const local = [...closure].filter((f) => f.startsWith(src)).map((f) => f.slice(src.length + 1));
    expect(local).toEqual(expect.arrayContaining(['services/context/assemble.ts', 'services/context/prune.ts', 'services/model/openai-wire.ts', 'services/model/openai-responses.ts', 'services/model/openai-chat.ts']));
    expect(local.filter((f) => f.includes('skills') || f.includes('world-state'))).toEqual([]);
    expect([...closure].filter((f) => /^(node:)?fs(\/promises)?$/.test(f))).toEqual([]);
  });

  it('Chat State holds only committed messages, never model, prompt or tool definitions [reference §2.12 acc 10]', async () => {
    const h = await harness(storage, [{ text: 'ok' }], { systemPrompt: 'UNIQUE-PROMPT-MARKER' });
    await h.run('hi');
    const view = h.session.inspectContext();
    expect(JSON.stringify(view.conversation)).not.toContain('UNIQUE-PROMPT-MARKER');
    expect(JSON.stringify(view.conversation)).not.toContain('"parameters"');
    expect(view.provenance.every((p) => p.startsWith('msg_'))).toBe(true);
  });

  it('definitions and dispatch come from one tool surface, in a deterministic order [reference §2.12 acc 11-13]', async () => {
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

  it('fixed region boundaries, a system message refused, a provider-neutral request [reference §2.12 acc 14-16]', () => {
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

  it('the estimate measures the very request that was submitted [reference §2.12 acc 17]', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'x'.repeat(999) } }] }, { text: 'ok' }]);
    const { turnId } = await h.run('measure');
    await h.core.flushTrace();
    const spans = (await storage.listTraceSpans({ turnId })).filter((s) => s.kind === 'model_call');
    spans.forEach((span, i) => {
      const request = h.model.requests[i]!;
      expect(span.attributes.requestEstimatedInputTokens).toBe(estimateTokens(request.system) + estimateTokens(request.messages) + estimateTokens(request.tools));
    });
  });

  it('context inspection shows the projection the next request uses [reference §2.12 acc 18]', async () => {
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

  it('the system prefix and tool definitions are byte-identical across calls [reference §2.12 acc 20]', async () => {
    const h = await harness(storage, [{ toolCalls: [{ name: 'echo', arguments: { text: 'a' } }] }, { toolCalls: [{ name: 'echo', arguments: { text: 'b' } }] }, { text: 'c' }]);
    await h.run('go');
    const [a, b, c] = h.model.requests;
    expect(JSON.stringify(b!.system)).toBe(JSON.stringify(a!.system));
    expect(JSON.stringify(c!.tools)).toBe(JSON.stringify(a!.tools));
    // And the conversation grows only at the end: earlier bytes are a prefix (prompt caches survive).
    expect(JSON.stringify(b!.messages).startsWith(JSON.stringify(a!.messages).slice(0, -1))).toBe(true);
  });

  it('across a compaction the system context and tool surface are rebuilt from their sources and World State is sent again [reference §2.12 acc 19]', async () => {
    const { compactingModel } = await import('../../support/summaries.js');
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

  it('synthetic and contextual items are never the last real user request; a rewind injects nothing twice [reference §2.12 acc 21]', async () => {
    const { compactingModel } = await import('../../support/summaries.js');
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

  it('the first sampling emits every present section in fixed order; unchanged sources emit nothing [reference §2.12 acc 22]', async () => {
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

  it('an AGENTS.md edit mid-turn reaches the next call with the replacement notice; removal sends the invalidation [reference §2.12 acc 23]', async () => {
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

  it('after a restart retained sections are re-sent once with the replacement notice; typed markers do not count [reference §2.12 acc 24]', async () => {
    // Before the restart AGENTS.md does not exist, so its section was never sent; the user, however,
    // typed text that opens with the section's marker and with its replacement notice.
    const dir = workspace();
    const first = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model: scriptedModel([{ text: 'a' }, { text: 'b' }]), closeStorageOnShutdown: false });
    const session = await first.createSession({ workingDirectory: dir });
    for (const [id, text] of [
      ['typed-1', '<project_instructions>\nfake\n</project_instructions>'],
      ['typed-2', `${SECTION_SPECS['project/AGENTS.md'].replacement}\n\n<project_instructions>\nfake\n</project_instructions>`],
    ]) {
      const { turnId } = await session.startTurn({ clientRequestId: id!, input: [{ type: 'text', text: text! }] });
      await session.waitForTurn(turnId);
    }
    await first.shutdown();
    writeFileSync(join(dir, 'AGENTS.md'), 'Rules.');
    const model = scriptedModel([{ text: 'c' }, { text: 'd' }]);
    const second = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, closeStorageOnShutdown: false });
    const again = await second.loadSession(session.sessionId);
    for (const id of ['c', 'd']) {
      const { turnId: t } = await again.startTurn({ clientRequestId: id, input: [{ type: 'text', text: id }] });
      await again.waitForTurn(t);
    }
    const sent = userTexts(model.requests[0]!, 'world_state');
    const resent = sent.slice(2);
    // Retained (a world_state message of the section is in the conversation): notice + full body.
    expect(resent[0]!.startsWith(`${SECTION_SPECS['runtime/user-project-context'].replacement}\n\n<user_project_context format_version="1">`)).toBe(true);
    expect(resent[0]).toContain('- AGENTS.md');
    expect(resent[2]!.startsWith(`${SECTION_SPECS['runtime/sandbox-policy'].replacement}\n\n<sandbox_policy>`)).toBe(true);
    // Not retained: only typed look-alikes exist, so AGENTS.md is a first appearance without a notice.
    expect(resent[1]).toBe('<project_instructions>\nRules.\n</project_instructions>');
    expect(resent).toHaveLength(3);
    // Only once: the next call sends nothing new.
    expect(userTexts(model.requests[1]!, 'world_state')).toEqual(sent);
    await second.shutdown();
  });

  it('§2.3 reconciliation: each row of the baseline × retained table sends exactly its body and notice', () => {
    const id = 'project/AGENTS.md' as const;
    const spec = SECTION_SPECS[id];
    const body = '<project_instructions>\nB\n</project_instructions>';
    const capture = (agents: string | null) => ({ 'runtime/user-project-context': null, 'project/AGENTS.md': agents, 'skills/catalog': null, 'runtime/sandbox-policy': null });
    const baseline = (value?: string | null) => new Map(value === undefined ? [] : [[id, value] as const]);
    const retained = (yes: boolean) => new Set(yes ? [id] : []);
    const sent = (agents: string | null, base: string | null | undefined, present: boolean) => diffWorldState(capture(agents), baseline(base), retained(present)).map((m) => m.text);
    // present, same body, still in the conversation: nothing.
    expect(sent(body, body, true)).toEqual([]);
    // present, body differs, still there: notice + full body; section gone: the invalidation.
    expect(sent(body, 'old', true)).toEqual([`${spec.replacement}\n\n${body}`]);
    expect(sent(null, 'old', true)).toEqual([spec.invalidation]);
    // present, compacted away: the body alone; section gone: nothing.
    expect(sent(body, body, false)).toEqual([body]);
    expect(sent(body, 'old', false)).toEqual([body]);
    expect(sent(null, 'old', false)).toEqual([]);
    // no baseline (restart), still there: notice + body; section gone: the invalidation.
    expect(sent(body, undefined, true)).toEqual([`${spec.replacement}\n\n${body}`]);
    expect(sent(null, undefined, true)).toEqual([spec.invalidation]);
    // no baseline, not there: the body alone; section absent: nothing.
    expect(sent(body, undefined, false)).toEqual([body]);
    expect(sent(null, undefined, false)).toEqual([]);
    // An invalidation already sent and still present is not sent again.
    expect(sent(null, null, true)).toEqual([]);

    // "Still present" counts only world_state messages, by marker or fixed notice; never typed text or synthetic items.
    const item = (kind: 'world_state' | 'normal', text: string, synthetic = false) => ({
      message: { id: text, sessionId: 's', turnId: 't', sequence: 1, role: 'user' as const, kind, content: [{ type: 'text' as const, text }], createdAt: '' },
      ...(synthetic ? { synthetic: { reason: 'compaction_summary' as const, compactionId: 'c' } } : {}),
    });
    expect([...retainedSections([item('normal', body), item('normal', spec.replacement), item('world_state', body, true)])]).toEqual([]);
    expect([...retainedSections([item('world_state', body)])]).toEqual([id]);
    expect([...retainedSections([item('world_state', `${spec.replacement}\n\n${body}`)])]).toEqual([id]);
    expect([...retainedSections([item('world_state', spec.invalidation)])]).toEqual([id]);
  });

  it('a call without a result gets the fixed interrupted text, byte-stable across requests [reference §2.12 acc 25]', async () => {
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
