/**
 * The built-in tools and the permission policy inside real turns (createCore + scripted model on
 * PGlite): the full escalation story, grant scopes, a mid-turn mode switch, user denial, a danger
 * card, sub-agent (non-interactive) refusals, and bash without a sandbox.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../src/core.js';
import type { ModelRequest } from '../../src/services/model/port.js';
import { scriptedModel, type ScriptedModel, type ScriptedStep } from '../../src/services/model/scripted.js';
import { permissionPolicy } from '../../src/services/permissions/authorizer.js';
import { bashDenialText, NON_INTERACTIVE_REFUSAL_TEXT, sandboxUnavailableText } from '../../src/services/permissions/texts.js';
import { builtinTools } from '../../src/services/tools/builtin.js';
import { defineTool, type AnyTool } from '../../src/services/tools/define.js';
import { MAX_RESULT_BYTES } from '../../src/services/tools/output.js';
import { z } from 'zod';
import type { SessionUpdateEnvelope } from '../../src/protocol/updates.js';
import type { SessionHandle } from '../../src/session-handle.js';
import { pgliteStorage } from '../../src/storage/pglite.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { assertAllRequests } from '../support/invariants.js';
import { requireSandbox, toolEnv, type ToolEnv } from '../support/tool-env.js';

let storage: SqlSessionStorage;
let env: ToolEnv;
beforeAll(async () => {
  storage = pgliteStorage();
  await storage.migrate();
  env = await toolEnv();
});
afterAll(async () => {
  await storage.close();
  env.cleanup();
});

const open: Core[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.shutdown();
});

interface Run {
  core: Core;
  session: SessionHandle;
  model: ScriptedModel;
  updates: SessionUpdateEnvelope[];
}

async function start(steps: ScriptedStep[], options: { toolEnv?: ToolEnv; parentSessionId?: string; extraTools?: AnyTool[] } = {}): Promise<Run> {
  const tools = options.toolEnv ?? env;
  const model = scriptedModel(steps);
  const core = await createCore({
    storage,
    model,
    toolResultSpillRoot: tools.runtime.spillRoot,
    tools: [...builtinTools(tools.runtime), ...(options.extraTools ?? [])],
    authorizer: permissionPolicy(tools.runtime),
    sandbox: tools.runtime.sandbox,
    closeStorageOnShutdown: false,
  });
  open.push(core);
  let session: SessionHandle;
  if (options.parentSessionId) {
    const record = await storage.createSession({ id: `ses_child_${Math.random().toString(36).slice(2)}`, workingDirectory: tools.ws, parentSessionId: options.parentSessionId, taskName: 'explore_repo', agentRole: 'explorer', sandboxMode: 'auto' });
    session = await core.loadSession(record.id);
  } else {
    session = await core.createSession({ workingDirectory: tools.ws });
  }
  const updates: SessionUpdateEnvelope[] = [];
  session.updates$.subscribe((u) => updates.push(u));
  return { core, session, model, updates };
}

/** Approves (or denies) every card as it arrives, in order, with the given decisions. */
function decide(run: Run, decisions: Array<'allow_once' | 'deny' | 'allow_for_turn' | 'allow_for_session'>): void {
  const queue = [...decisions];
  run.session.updates$.subscribe((u) => {
    if (u.update.type !== 'permission_requested') return;
    const decision = queue.shift();
    if (!decision) throw new Error('an unexpected card was shown');
    const toolCallId = u.update.toolCallId;
    queueMicrotask(() => void run.session.resolvePermission(u.turnId!, toolCallId, decision));
  });
}

async function turn(run: Run, text: string) {
  const { turnId } = await run.session.startTurn({ clientRequestId: `req-${Math.random()}`, input: [{ type: 'text', text }] });
  const outcome = await run.session.waitForTurn(turnId);
  assertAllRequests(run.model.requests);
  return { turnId, outcome };
}

function toolTexts(request: ModelRequest | undefined): string[] {
  return (request?.messages ?? []).filter((m) => m.role === 'tool').map((m) => (m as { text: string }).text);
}

function cards(run: Run) {
  return run.updates.filter((u) => u.update.type === 'permission_requested').map((u) => (u.update as { card: { kind: string; grantKey: string; previousDenial?: string } }).card);
}

const escalate = (path: string) => ({ sandboxPermissions: { paths: [{ path, access: 'write', scope: 'exact' }] }, justification: 'the report goes next to the data' });

describe('built-in tools in a turn', () => {
  it('the model writes a file, a command is denied, it escalates, is approved once, and the next identical command is denied again', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const target = join(env.outside, 'report.txt');
    const command = `echo report >> ${target}`;
    const run = await start([
      { toolCalls: [{ name: 'write', arguments: { path: 'notes.md', content: '# notes\n' } }] },
      { toolCalls: [{ name: 'bash', arguments: { command } }] },
      { toolCalls: [{ name: 'bash', arguments: { command, ...escalate(target) } }] },
      { toolCalls: [{ name: 'bash', arguments: { command } }] },
      { text: 'done' },
    ]);
    decide(run, ['allow_once']);
    const { turnId, outcome } = await turn(run, 'write notes and the report');
    expect(outcome).toEqual({ status: 'completed', finalText: 'done' });
    expect(readFileSync(join(env.ws, 'notes.md'), 'utf8')).toBe('# notes\n');
    expect(readFileSync(target, 'utf8')).toBe('report\n');

    const [written, denied, approved, deniedAgain] = toolTexts(run.model.requests[4]);
    expect(written).toBe(`Created ${join(env.ws, 'notes.md')} (8 bytes).`);
    expect(denied!.endsWith(bashDenialText('auto'))).toBe(true);
    expect(approved).toMatch(/^\[exit 0; duration \d+ ms\]$/);
    expect(deniedAgain!.endsWith(bashDenialText('auto'))).toBe(true);

    expect(cards(run)).toEqual([expect.objectContaining({ kind: 'escalation', previousDenial: expect.stringContaining('Read-only file system') })]);
    const resolved = run.updates.filter((u) => u.update.type === 'permission_resolved').map((u) => (u.update as { decision: string }).decision);
    expect(resolved).toEqual(['allow_once']);

    // The stored results carry the facts the model never sees: the artifact and the denial flag.
    const messages = await storage.listMessages(run.session.sessionId);
    const results = messages.filter((m) => m.role === 'tool').map((m) => m.content[0] as { sandboxDenied?: boolean; artifacts?: Array<{ type: string }> });
    expect(results.map((r) => r.sandboxDenied)).toEqual([undefined, true, false, true]);
    expect(results[0]!.artifacts?.[0]?.type).toBe('file_change');

    await run.core.flushTrace();
    const spans = (await storage.listTraceSpans({ turnId })).filter((s) => s.kind === 'tool_call');
    expect(spans.map((s) => [s.attributes.permissionDecisionSource, s.attributes.sandboxDenied, s.attributes.sandboxMode, s.attributes.escalationPaths])).toEqual([
      ['sandbox', false, 'auto', []],
      ['sandbox', true, 'auto', []],
      ['user', false, 'auto', [{ path: target, access: 'write', scope: 'exact' }]],
      ['sandbox', true, 'auto', []],
    ]);
  });

  it('allow_for_turn covers the same escalation again in that turn only; allow_for_session covers it in later turns', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const target = join(env.outside, 'scoped.txt');
    const call = { name: 'bash', arguments: { command: `echo x >> ${target}`, ...escalate(target) } };
    const run = await start([
      { toolCalls: [call] },
      { toolCalls: [call] },
      { text: 'turn 1' },
      { toolCalls: [call] },
      { text: 'turn 2' },
      { toolCalls: [call] },
      { text: 'turn 3' },
    ]);
    decide(run, ['allow_for_turn', 'allow_for_session']);
    await turn(run, 'one');
    expect(cards(run)).toHaveLength(1);
    await turn(run, 'two');
    expect(cards(run)).toHaveLength(2);
    await turn(run, 'three');
    expect(cards(run)).toHaveLength(2);
    expect(readFileSync(target, 'utf8')).toBe('x\nx\nx\nx\n');
    // A grant is keyed by the exact paths: another path asks again.
    expect(new Set(cards(run).map((c) => c.grantKey)).size).toBe(1);
  });

  it('a mode switch in the middle of a turn applies from the next call', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    let session!: SessionHandle;
    const run = await start([
      { toolCalls: [{ name: 'bash', arguments: { command: 'echo a >> mid-turn.txt' } }] },
      async () => {
        await session.setPermissionMode('accept_edits');
        return { toolCalls: [{ name: 'bash', arguments: { command: 'echo b >> mid-turn.txt' } }, { name: 'write', arguments: { path: 'mid-turn-file.txt', content: 'ok' } }] };
      },
      { text: 'done' },
    ]);
    session = run.session;
    await turn(run, 'switch');
    const texts = toolTexts(run.model.requests[2]);
    expect(texts[0]).toMatch(/^\[exit 0/);
    expect(texts[1]!.endsWith(bashDenialText('accept_edits'))).toBe(true);
    expect(texts[2]).toMatch(/^Created /);
    expect(readFileSync(join(env.ws, 'mid-turn.txt'), 'utf8')).toBe('a\n');
    expect(run.session.snapshot().permissionMode).toBe('accept_edits');
  });

  it('a danger card: approved, the command still runs inside the sandbox; denied, the turn stops with permission_denied', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const run = await start([
      { toolCalls: [{ name: 'bash', arguments: { command: 'rm -rf ../outside' } }] },
      { toolCalls: [{ name: 'bash', arguments: { command: 'rm -rf src' } }] },
    ]);
    decide(run, ['allow_once', 'deny']);
    const { outcome } = await turn(run, 'clean up');
    expect(outcome).toMatchObject({ status: 'failed', code: 'permission_denied' });
    expect(cards(run).map((c) => c.kind)).toEqual(['danger', 'danger']);
    expect(existsSync(join(env.outside, 'data.txt'))).toBe(true);
    expect(existsSync(join(env.ws, 'src', 'main.txt'))).toBe(true);
    const first = (await storage.listMessages(run.session.sessionId)).filter((m) => m.role === 'tool')[0]!.content[0] as { sandboxDenied?: boolean };
    expect(first.sandboxDenied).toBe(true);
  });

  it('a sub-agent cannot ask: escalations and auto-mode danger commands are refused at once and the turn goes on', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const parent = await start([]);
    const target = join(env.outside, 'child.txt');
    const run = await start(
      [
        { toolCalls: [{ name: 'bash', arguments: { command: `echo x > ${target}`, ...escalate(target) } }, { name: 'bash', arguments: { command: 'rm -rf src' } }] },
        { text: 'reported' },
      ],
      { parentSessionId: parent.session.sessionId },
    );
    const { outcome } = await turn(run, 'explore');
    expect(outcome).toEqual({ status: 'completed', finalText: 'reported' });
    expect(toolTexts(run.model.requests[1])).toEqual([NON_INTERACTIVE_REFUSAL_TEXT, NON_INTERACTIVE_REFUSAL_TEXT]);
    expect(cards(run)).toEqual([]);
    expect(existsSync(target)).toBe(false);
    await expect(run.session.setPermissionMode('accept_edits')).rejects.toMatchObject({ code: 'sub_agent_mode_fixed' });
  });

  it('without a sandbox bash answers sandbox_unavailable, the turn goes on, and the snapshot says why', async () => {
    const disabled = await toolEnv({ sandbox: 'disabled' });
    try {
      const run = await start([{ toolCalls: [{ name: 'bash', arguments: { command: 'rm -rf src' } }, { name: 'read', arguments: { path: 'src/main.txt' } }] }, { text: 'ok' }], { toolEnv: disabled });
      const { outcome } = await turn(run, 'try');
      expect(outcome.status).toBe('completed');
      const texts = toolTexts(run.model.requests[1]);
      expect(texts).toEqual([sandboxUnavailableText('the sandbox was disabled by configuration'), `1\thello\n2\tworld\n(lines 1-2 of 2; end of file)`]);
      const finished = run.updates.find((u) => u.update.type === 'tool_call_finished')!.update as { status: string; error?: { code: string } };
      expect(finished).toMatchObject({ status: 'denied', error: { code: 'sandbox_unavailable' } });
      expect(cards(run)).toEqual([]);
      expect(run.session.snapshot().sandbox).toEqual({ available: false, kind: 'none', detail: 'the sandbox was disabled by configuration' });
      expect(run.model.requests[0]!.tools.find((t) => t.name === 'bash')!.parameters).not.toHaveProperty('properties.sandboxPermissions');
    } finally {
      disabled.cleanup();
    }
  });

  it('bash progress reaches the host as tool_call_progress before tool_call_finished', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const run = await start([{ toolCalls: [{ name: 'bash', arguments: { command: 'echo one; sleep 0.2; echo two' } }] }, { text: 'ok' }]);
    await turn(run, 'progress');
    const types = run.updates.map((u) => u.update.type);
    const progress = run.updates.filter((u) => u.update.type === 'tool_call_progress').map((u) => (u.update as { progress: { chunk: string } }).progress.chunk);
    expect(progress.join('')).toBe('one\ntwo\n');
    expect(types.lastIndexOf('tool_call_progress')).toBeLessThan(types.indexOf('tool_call_finished'));
    expect(run.session.snapshot().sandbox).toMatchObject({ available: true, kind: 'bubblewrap' });
  });

  it('cancelling a turn kills the running command', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const run = await start([{ toolCalls: [{ name: 'bash', arguments: { command: 'echo started; sleep 305.5' } }] }]);
    const { turnId } = await run.session.startTurn({ clientRequestId: 'req-cancel', input: [{ type: 'text', text: 'long' }] });
    await new Promise<void>((resolve) => {
      const sub = run.session.updates$.subscribe((u) => {
        if (u.update.type === 'tool_call_progress') {
          sub.unsubscribe();
          resolve();
        }
      });
    });
    await run.session.cancelTurn(turnId);
    expect(await run.session.waitForTurn(turnId)).toEqual({ status: 'cancelled' });
    const result = (await storage.listMessages(run.session.sessionId)).filter((m) => m.role === 'tool')[0]!.content[0] as { status: string; text: string };
    expect(result.status).toBe('cancelled');
    expect(result.text).toMatch(/^started\n\[cancelled; duration \d+ ms\]$/);
  });

  it('any other tool result past 32,000 bytes is cut by the core and saved whole in the spill directory', async () => {
    const big = Array.from({ length: 4000 }, (_, i) => `row ${i} ${'z'.repeat(30)}`).join('\n');
    const bigTool = defineTool({ name: 'big', description: 'Returns a lot.', parameters: z.object({}), execute: () => big });
    const run = await start([{ toolCalls: [{ name: 'big', arguments: {} }] }, { text: 'ok' }], { extraTools: [bigTool] });
    await turn(run, 'big');
    // The stored result (the request copy may project it further, reference §2.5).
    const text = ((await storage.listMessages(run.session.sessionId)).find((m) => m.role === 'tool')!.content[0] as { text: string }).text;
    expect(Buffer.byteLength(text!)).toBeLessThanOrEqual(MAX_RESULT_BYTES);
    const saved = /Full output saved at (\S+) — use read/.exec(text!)![1]!;
    expect(saved.startsWith(join(env.home, '.openwork', 'spill', run.session.sessionId.replace(/[^A-Za-z0-9_-]/g, '_')))).toBe(true);
    expect(readFileSync(saved, 'utf8')).toBe(big);
    expect(big.startsWith(text!.slice(0, text!.indexOf('\n... (')))).toBe(true);
  });
});
