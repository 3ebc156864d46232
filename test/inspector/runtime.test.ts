/**
 * The runtime `npm run inspector` embeds, with its scripted scenario: every feature the page shows
 * comes out of the real runtime (plan, tool progress, card, slow stream, flood past the replay
 * buffer, model failure, steering, an explorer sub-agent under its root's actor, a manual
 * compaction with a valid summary), and a configured model replaces the scenario.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadModelModule } from '../../src/inspector/model-config.js';
import { EXPLORER_TASK } from '../../src/inspector/scenario.js';
import { startInspectorRuntime, type InspectorRuntime } from '../../src/inspector/runtime.js';
import type { SessionUpdateEnvelope } from '../../src/protocol/updates.js';
import type { SessionHandle } from '../../src/session-handle.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { inspectorFetch } from '../support/inspector-client.js';
import { BASH_UNAVAILABLE_LINE } from '../../src/services/context/world-state.js';

async function newSession(runtime: InspectorRuntime): Promise<SessionHandle> {
  const res = await inspectorFetch(runtime.server, '/api/sessions', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ title: 'test' }),
  });
  const { sessionId } = (await res.json()) as { sessionId: string };
  return runtime.core.session(sessionId)!;
}

function collect(session: SessionHandle) {
  const updates: SessionUpdateEnvelope[] = [];
  session.updates$.subscribe((e) => updates.push(e));
  const waitFor = async (predicate: (e: SessionUpdateEnvelope) => boolean) => {
    for (;;) {
      const found = updates.find(predicate);
      if (found) return found;
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  return { updates, waitFor };
}

async function run(session: SessionHandle, text: string) {
  const { turnId } = await session.startTurn({ clientRequestId: `r-${Math.random()}`, input: [{ type: 'text', text }] });
  return turnId;
}

describe('inspector runtime and scenario', () => {
  let runtime: InspectorRuntime;
  let workingDirectory: string;

  beforeAll(async () => {
    workingDirectory = await mkdtemp(join(tmpdir(), 'openwork-inspector-'));
    await writeFile(join(workingDirectory, 'README.md'), 'hello\n');
    runtime = await startInspectorRuntime({ workingDirectory, timeScale: 0.05, port: 0 });
  });
  afterAll(() => runtime.close());

  it('the tour: reasoning, plan, a tool without a card, progress, a card, the note written, a streamed answer', async () => {
    expect(runtime.label).toBe('scripted scenario model (offline)');
    const session = await newSession(runtime);
    const { updates, waitFor } = collect(session);
    const turnId = await run(session, 'Show me around');
    const card = await waitFor((e) => e.update.type === 'permission_requested');
    expect(card.update).toMatchObject({ card: { toolName: 'write_note', decisions: ['allow_once', 'deny', 'allow_for_turn', 'allow_for_session'] } });
    await session.resolvePermission(turnId, (card.update as { toolCallId: string }).toolCallId, 'allow_once');
    const outcome = await session.waitForTurn(turnId);
    expect(outcome).toMatchObject({ status: 'completed' });
    const types = updates.map((u) => u.update.type);
    expect(types).toContain('reasoning_delta');
    expect(types.filter((t) => t === 'plan_updated')).toHaveLength(4);
    const progress = updates.filter((u) => u.update.type === 'tool_call_progress');
    expect(progress.map((u) => (u.update as { progress: { chunk: string } }).progress.chunk)).toEqual([1, 2, 3, 4, 5].map((i) => `check ${i}/5: ok\n`));
    const finished = updates.filter((u) => u.update.type === 'tool_call_finished').map((u) => u.update as { toolName: string; status: string; text: string });
    expect(finished.filter((f) => f.toolName !== 'update_plan').map((f) => [f.toolName, f.status])).toEqual([
      ['list_directory', 'succeeded'],
      ['run_checks', 'succeeded'],
      ['write_note', 'succeeded'],
    ]);
    expect(finished.find((f) => f.toolName === 'list_directory')!.text).toBe('file README.md');
    expect(await readFile(join(workingDirectory, '.openwork', 'inspector', 'tour-note.txt'), 'utf8')).toMatch(/^The inspector tour ran at /);
    expect(session.snapshot().runtime).toMatchObject({ type: 'terminal', plan: { steps: [{ status: 'completed' }, { status: 'completed' }, { status: 'completed' }] } });
    expect(types.filter((t) => t === 'text_delta').length).toBeGreaterThan(20);
  });

  it('denying the card ends the tour with permission_denied and writes nothing', async () => {
    const session = await newSession(runtime);
    const { waitFor } = collect(session);
    const note = join(workingDirectory, '.openwork', 'inspector', 'tour-note.txt');
    const before = existsSync(note) ? await readFile(note, 'utf8') : null;
    const turnId = await run(session, 'tour again');
    const card = await waitFor((e) => e.update.type === 'permission_requested');
    await session.resolvePermission(turnId, (card.update as { toolCallId: string }).toolCallId, 'deny');
    expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'failed', code: 'permission_denied' });
    expect(existsSync(note) ? await readFile(note, 'utf8') : null).toBe(before);
  });

  it('slow streams for a while and can be cancelled mid-stream; steering is answered in the same turn', async () => {
    const session = await newSession(runtime);
    const { updates, waitFor } = collect(session);
    const slow = await run(session, 'slow please');
    await waitFor((e) => e.update.type === 'text_delta');
    await session.cancelTurn(slow);
    expect(await session.waitForTurn(slow)).toEqual({ status: 'cancelled' });
    expect(updates.filter((u) => u.update.type === 'draft_cleared').map((u) => (u.update as { reason: string }).reason)).toEqual(['discarded']);

    const steered = await run(session, 'slow again');
    await waitFor((e) => e.turnId === steered && e.update.type === 'text_delta');
    await session.steerTurn(steered, [{ type: 'text', text: 'mention the weather' }]);
    expect(await session.waitForTurn(steered)).toMatchObject({ status: 'completed', finalText: 'Noted: “mention the weather”. I will keep that in mind.' });
  });

  it('flood sends more updates than the 512-entry buffer holds, so an old sequence needs the snapshot', async () => {
    const session = await newSession(runtime);
    const { updates, waitFor } = collect(session);
    const turnId = await run(session, 'flood');
    await waitFor((e) => e.sequence > 600);
    expect(() => session.replayUpdates(1)).toThrow(expect.objectContaining({ code: 'snapshot_required' }));
    const snapshot = session.snapshot();
    expect(snapshot.runtime).toMatchObject({ type: 'running', phase: 'running_model' });
    // The snapshot's draft holds at least every delta the reader has seen (the Turn may be ahead of
    // the reader, never behind it); a few updates precede the first delta, so 600 sequences are not
    // 600 characters.
    const seen = updates.filter((u) => u.turnId === turnId && u.update.type === 'text_delta').reduce((n, u) => n + (u.update as { delta: string }).delta.length, 0);
    expect(seen).toBeGreaterThan(512);
    expect((snapshot.runtime as { draft: { text: string } }).draft.text.length).toBeGreaterThanOrEqual(seen);
    await session.cancelTurn(turnId);
    await session.waitForTurn(turnId);
  });

  it('explore: the root spawns an explorer, a Session actor under the root actor (system id agent:<task>), and answers with its report', async () => {
    const session = await newSession(runtime);
    const events: Array<{ parentSessionId: string | null; envelope: SessionUpdateEnvelope }> = [];
    const stream = await inspectorFetch(runtime.server, '/api/events');
    const reader = stream.body!.getReader();
    let buffer = '';
    const reading = (async () => {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += new TextDecoder().decode(value);
        let end: number;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const frame = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          if (/^event: update$/m.test(frame)) events.push(JSON.parse(/^data: (.*)$/m.exec(frame)![1]!));
        }
      }
    })().catch(() => undefined);
    const turnId = await run(session, 'explore the project');
    const outcome = await session.waitForTurn(turnId);
    expect(outcome).toMatchObject({ status: 'completed', finalText: expect.stringMatching(/^The explorer reported back:\n\nThe working directory holds \d+ entr(y|ies): .*README\.md/) });
    const children = await runtime.core.listChildSessions(session.sessionId);
    expect(children.map((c) => [c.taskName, c.agentRole])).toEqual([['explorer_1', 'explorer']]);
    const childId = children[0]!.id;
    const childMessages = await runtime.core.session(childId)!.messages();
    expect(childMessages[0]).toMatchObject({ role: 'user', content: [{ type: 'text', text: EXPLORER_TASK }] });
    expect(childMessages.filter((m) => m.role === 'tool').map((m) => m.toolName)).toEqual(['list_directory']);

    // The actor tree: the explorer's Session actor hangs under the root's, with its own Turn; its
    // list_directory needs nobody, so the Turn ran it in its own effects actor (no tool-call machine).
    const actors = runtime.tracker.actors(session.sessionId);
    const root = actors.find((a) => a.actorId === `session:${session.sessionId}`)!;
    const agent = actors.find((a) => a.actorId === `agent:${childId}`)!;
    expect(root).toMatchObject({ parentKey: null, machine: 'session', systemId: 'session' });
    expect(agent).toMatchObject({ parentKey: root.key, machine: 'session', systemId: 'agent:explorer_1', status: 'active', value: 'idle' });
    const childTurn = actors.find((a) => a.parentKey === agent.key && a.machine === 'turn');
    expect(childTurn).toMatchObject({ actorId: 'turn', status: 'done' });
    expect(actors.some((a) => a.parentKey === childTurn!.key && a.machine === 'toolCall')).toBe(false);
    expect(actors.some((a) => a.parentKey === childTurn!.key && a.actorId === 'effects')).toBe(true);
    expect(runtime.tracker.actors(childId)).toEqual([]);

    // Over HTTP: the root lists its explorer; the explorer's updates name their root.
    const listed = (await (await inspectorFetch(runtime.server, `/api/sessions/${session.sessionId}/agents`)).json()) as { agents: unknown[] };
    expect(listed.agents).toEqual([expect.objectContaining({ sessionId: childId, taskName: 'explorer_1', agentRole: 'explorer', status: { type: 'idle' } })]);
    const childState = (await (await inspectorFetch(runtime.server, `/api/sessions/${childId}/state`)).json()) as Record<string, unknown>;
    expect(childState).toMatchObject({ parentSessionId: session.sessionId, taskName: 'explorer_1' });
    await new Promise((r) => setTimeout(r, 100));
    const childEvents = events.filter((e) => e.envelope.sessionId === childId);
    expect(childEvents.length).toBeGreaterThan(5);
    expect(new Set(childEvents.map((e) => e.parentSessionId))).toEqual(new Set([session.sessionId]));
    expect(new Set(events.filter((e) => e.envelope.sessionId === session.sessionId).map((e) => e.parentSessionId))).toEqual(new Set([null]));
    await reader.cancel();
    await reading;

    // A second exploration in the same session takes a new task name.
    const again = await run(session, 'explore again');
    expect(await session.waitForTurn(again)).toMatchObject({ status: 'completed' });
    expect((await runtime.core.listChildSessions(session.sessionId)).map((c) => c.taskName).sort()).toEqual(['explorer_1', 'explorer_2']);
  });

  it('explore on a session of the shared default scenario (as a loaded session runs): the explorer turn does not restart the root turn', async () => {
    const session = await runtime.core.createSession({ workingDirectory });
    const turnId = await run(session, 'explore, on the shared model');
    expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'completed', finalText: expect.stringMatching(/^The explorer reported back:/) });
    expect((await runtime.core.listChildSessions(session.sessionId)).map((c) => c.taskName)).toHaveLength(1);
  });

  it('compact: the scenario answers the summary request with a valid summary of the conversation', async () => {
    const session = await newSession(runtime);
    const { waitFor } = collect(session);
    const turnId = await run(session, 'fail <on purpose>');
    await session.waitForTurn(turnId);
    const res = await inspectorFetch(runtime.server, `/api/sessions/${session.sessionId}/compact`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { compactionId: string; kind: string };
    expect(body.kind).toBe('manual');
    const update = await waitFor((e) => e.update.type === 'conversation_compacted');
    expect(update.update).toMatchObject({ compactionId: body.compactionId, kind: 'manual' });
    const [checkpoint] = await session.checkpoints();
    expect(checkpoint!.id).toBe(body.compactionId);
    // The user's words are quoted, defused so that they cannot pass for a control tag.
    expect(checkpoint!.summary).toContain('The user asked: “fail ‹on purpose›”.');
    expect(checkpoint!.summary).toContain('## 9. Next Safe Action');
    // The root's turn bookkeeping is untouched: the next prompt picks its scenario as usual.
    const next = await run(session, 'fail again');
    expect(await session.waitForTurn(next)).toMatchObject({ status: 'failed', code: 'model_error' });
  });

  it('fail ends the turn with model_error', async () => {
    const session = await newSession(runtime);
    const turnId = await run(session, 'fail now');
    expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'failed', code: 'model_error' });
  });
});

describe('a configured model', () => {
  it('replaces the scenario: a ModelPort, or a factory, from a model module', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'openwork-model-'));
    const module = join(dir, 'model.mjs');
    await writeFile(
      module,
      [
        "export default (env) => ({ id: 'custom/echo', providerId: 'custom', model: 'echo',",
        '  async *stream() { yield { type: "text_delta", delta: env.GREETING };',
        "    yield { type: 'completed', usage: { inputTokens: 1, outputTokens: 1, cachedInputTokens: 0, reasoningTokens: 0 } }; } });",
      ].join('\n'),
    );
    const source = await loadModelModule(module, { GREETING: 'hello from the module' });
    const runtime = await startInspectorRuntime({ model: source, port: 0, tools: [] });
    try {
      expect(runtime.label).toBe('model custom/echo');
      const session = await newSession(runtime);
      const turnId = await run(session, 'hi');
      expect(await session.waitForTurn(turnId)).toEqual({ status: 'completed', finalText: 'hello from the module' });
    } finally {
      await runtime.close();
    }
    await expect(loadModelModule(join(dir, 'missing.mjs'), {})).rejects.toMatchObject({ code: 'invalid_request' });
    await writeFile(join(dir, 'bad.mjs'), 'export default 42;\n');
    await expect(loadModelModule(join(dir, 'bad.mjs'), {})).rejects.toMatchObject({ code: 'invalid_request' });
    const direct = await startInspectorRuntime({ model: scriptedModel([{ text: 'direct' }], { provider: 'p', model: 'm' }), port: 0 });
    expect(direct.label).toBe('model p/m');
    await direct.close();
    // Two runtimes, each starting PGlite: slow on a loaded machine.
  }, 90_000);
});

describe('the scenario runtime\'s sandbox (issue 17)', () => {
  let lastTurn = { sessionId: '', turnId: '' };
  async function worldStateOf(runtime: InspectorRuntime): Promise<string> {
    const session = await newSession(runtime);
    const turnId = await run(session, 'fail quickly');
    await session.waitForTurn(turnId);
    lastTurn = { sessionId: session.sessionId, turnId };
    const messages = await session.messages();
    return messages
      .filter((m) => m.kind === 'world_state')
      .flatMap((m) => m.content.map((b) => (b.type === 'text' ? b.text : '')))
      .join('\n');
  }

  it('gives the scenario bash in the real sandbox where bubblewrap starts, and the World State says so', async (ctx) => {
    const workingDirectory = await mkdtemp(join(tmpdir(), 'openwork-inspector-sandbox-'));
    const runtime = await startInspectorRuntime({ workingDirectory, timeScale: 0.05, port: 0 });
    try {
      const session = await newSession(runtime);
      const sandbox = session.snapshot().sandbox;
      if (!sandbox.available) {
        if (process.env.OPENWORK_REQUIRE_SANDBOX === '1') throw new Error(`sandbox unavailable: ${sandbox.detail} (OPENWORK_REQUIRE_SANDBOX=1 says it must work here)`);
        // Where it cannot start, the runtime must say exactly that, with the self-check's reason.
        expect(sandbox.detail).toBeTruthy();
        expect(await worldStateOf(runtime)).toContain(BASH_UNAVAILABLE_LINE);
        ctx.skip(`sandbox unavailable on this machine: ${sandbox.detail}`);
        return;
      }
      expect(sandbox.kind).toBe('bubblewrap');
      const world = await worldStateOf(runtime);
      expect(world).toContain('<sandbox_policy>');
      expect(world).not.toContain(BASH_UNAVAILABLE_LINE);
      expect(world).toMatch(/^bash: /m);
      // bash is offered to the model beside the scenario's own tools (the trace keeps the tool definitions sent).
      const res = await inspectorFetch(runtime.server, `/api/sessions/${lastTurn.sessionId}/turns/${lastTurn.turnId}/trace`);
      const trace = (await res.json()) as { spans: Array<{ kind: string; toolNames?: string[] }> };
      expect(trace.spans.find((s) => s.kind === 'model_call')?.toolNames).toEqual(expect.arrayContaining(['bash', 'list_directory', 'run_checks', 'write_note']));
    } finally {
      await runtime.close();
    }
  });

  it('where the sandbox cannot start (here: disabled), bash is not offered and the World State says it is unavailable', async () => {
    const workingDirectory = await mkdtemp(join(tmpdir(), 'openwork-inspector-nosandbox-'));
    const runtime = await startInspectorRuntime({ workingDirectory, timeScale: 0.05, port: 0, sandbox: { sandbox: 'disabled' } });
    try {
      const session = await newSession(runtime);
      expect(session.snapshot().sandbox).toMatchObject({ available: false, detail: 'the sandbox was disabled by configuration' });
      expect(await worldStateOf(runtime)).toContain(BASH_UNAVAILABLE_LINE);
      const res = await inspectorFetch(runtime.server, `/api/sessions/${lastTurn.sessionId}/turns/${lastTurn.turnId}/trace`);
      const trace = (await res.json()) as { spans: Array<{ kind: string; toolNames?: string[] }> };
      expect(trace.spans.find((s) => s.kind === 'model_call')?.toolNames).not.toContain('bash');
    } finally {
      await runtime.close();
    }
  });
});
