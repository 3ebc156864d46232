/**
 * The built-in tools and the permission policy inside real turns (createCore + scripted model on
 * PGlite): the full escalation story, grant scopes, a mid-turn mode switch, user denial, a danger
 * card, sub-agent (non-interactive) refusals, and bash without a sandbox.
 */
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../../src/core.js';
import type { ModelRequest } from '../../../src/services/model/port.js';
import { scriptedModel, type ScriptedModel, type ScriptedStep } from '../../../src/services/model/scripted.js';
import { permissionPolicy } from '../../../src/services/permissions/authorizer.js';
import { bashDenialText, NON_INTERACTIVE_REFUSAL_TEXT, sandboxUnavailableText } from '../../../src/services/permissions/texts.js';
import { builtinTools } from '../../../src/services/tools/builtin.js';
import { defineTool, type AnyTool } from '../../../src/services/tools/define.js';
import { MAX_RESULT_BYTES } from '../../../src/services/tools/output.js';
import { z } from 'zod';
import type { PermissionCard, SessionUpdateEnvelope } from '../../../src/protocol/updates.js';
import type { SandboxLauncher } from '../../../src/services/sandbox/launcher.js';
import type { SessionHandle } from '../../../src/session-handle.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { assertAllRequests } from '../../support/invariants.js';
import { requireSandbox, toolEnv, type ToolEnv } from '../../support/tool-env.js';
import { useToolTurnBed } from '../../support/tool-turn-bed.js';

let storage: SqlSessionStorage;
let env: ToolEnv;
const open = useToolTurnBed((s) => (storage = s), (e) => (env = e));

interface Run {
  core: Core;
  session: SessionHandle;
  model: ScriptedModel;
  updates: SessionUpdateEnvelope[];
}

async function start(steps: ScriptedStep[], options: { toolEnv?: ToolEnv; parentSessionId?: string; extraTools?: AnyTool[] } = {}): Promise<Run> {
  const tools = options.toolEnv ?? env;
  const model = scriptedModel(steps);
  const core = await createCore({ plan: true, conversationHistory: true, agents: true,
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
    const record = await storage.createSession({ id: `ses_child_${Math.random().toString(36).slice(2)}`, workingDirectory: tools.ws, parentSessionId: options.parentSessionId, taskName: 'explore_repo', agentRole: 'explorer', permissionMode: 'auto' });
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

  it('a danger card carries the command, the matched key, the note, the span of the match (string offsets) and the summary', async () => {
    // No command runs here (the card is denied): a launcher that fails the test if it is used lets
    // this run whether or not bubblewrap works on this machine.
    const unused: SandboxLauncher = {
      kind: 'bubblewrap',
      prepare: () => {
        throw new Error('a denied danger command must not be prepared');
      },
    };
    const guarded: ToolEnv = { ...env, runtime: { ...env.runtime, launcher: unused } };
    const command = 'echo "Größe ✓ ünïcode" && rm -rf src';
    const run = await start([{ toolCalls: [{ name: 'bash', arguments: { command } }] }], { toolEnv: guarded });
    decide(run, ['deny']);
    const { outcome } = await turn(run, 'clean up');
    expect(outcome).toMatchObject({ status: 'failed', code: 'permission_denied' });
    const requested = run.updates.find((u) => u.update.type === 'permission_requested')!.update as { card: PermissionCard };
    const card = requested.card;
    expect(card).toEqual({
      toolName: 'bash',
      kind: 'danger',
      summary: 'this once, still inside the sandbox: run a command that deletes files (rm_recursive_or_force)',
      command,
      dangerNote: "this command deletes files: `rm -rf src` (rm_recursive_or_force); it still runs inside the current mode's sandbox",
      dangerMatch: 'rm_recursive_or_force',
      dangerSpan: { start: command.indexOf('rm -rf src'), end: command.length },
      environmentId: `workspace:${env.ws}`,
      grantKey: `danger:rm_recursive_or_force:${command}`,
      decisions: ['allow_once', 'deny', 'allow_for_turn', 'allow_for_session'],
    });
    // The span highlights the match in the command as the host shows it (JavaScript string offsets).
    expect(command.slice(card.dangerSpan!.start, card.dangerSpan!.end)).toBe('rm -rf src');
    expect(existsSync(join(env.ws, 'src', 'main.txt'))).toBe(true);
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
    const { turnId, outcome } = await turn(run, 'explore');
    expect(outcome).toEqual({ status: 'completed', finalText: 'reported' });
    expect(toolTexts(run.model.requests[1])).toEqual([NON_INTERACTIVE_REFUSAL_TEXT, NON_INTERACTIVE_REFUSAL_TEXT]);
    expect(cards(run)).toEqual([]);
    expect(existsSync(target)).toBe(false);
    // The trace tells a non-interactive refusal from a user's denial (reference §4.14): source
    // non_interactive, decision deny, never executed (no sandboxMode), with what the card would have shown.
    await run.core.flushTrace();
    const spans = (await storage.listTraceSpans({ turnId })).filter((s) => s.kind === 'tool_call');
    expect(spans.map((s) => ({ ...s.attributes, errorCode: s.errorCode }))).toEqual([
      expect.objectContaining({
        permissionDecision: 'deny',
        permissionDecisionSource: 'non_interactive',
        escalationPaths: [{ path: target, access: 'write', scope: 'exact' }],
        dangerMatch: '',
        errorCode: 'permission_denied',
      }),
      expect.objectContaining({ permissionDecision: 'deny', permissionDecisionSource: 'non_interactive', escalationPaths: [], dangerMatch: 'rm_recursive_or_force', errorCode: 'permission_denied' }),
    ]);
    for (const span of spans) expect(span.attributes).not.toHaveProperty('sandboxMode');
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

  it('a sandbox that passed its self-check but fails when a command starts: sandbox_unavailable in the turn, which goes on', async () => {
    // A stand-in for bubblewrap failing after start-up (it reports the child's pid, never an exit code).
    const failing = join(env.base, 'bwrap-fails-in-turn');
    writeFileSync(failing, `#!/bin/sh\necho '{ "child-pid": 7 }' >&3\necho "bwrap: Can't mount proc on /newroot/proc: Operation not permitted" >&2\nexit 1\n`);
    chmodSync(failing, 0o755);
    const launcher: SandboxLauncher = { kind: 'bubblewrap', prepare: () => ({ file: failing, args: [], statusFd: true, hidden: [], cleanup: () => {} }) };
    const broken: ToolEnv = { ...env, runtime: { ...env.runtime, launcher } };
    const run = await start([{ toolCalls: [{ name: 'bash', arguments: { command: 'ls' } }] }, { text: 'I will ask the user to run it.' }], { toolEnv: broken });
    const { outcome } = await turn(run, 'list files');
    expect(outcome).toEqual({ status: 'completed', finalText: 'I will ask the user to run it.' });
    const text = sandboxUnavailableText("bubblewrap failed: Can't mount proc on /newroot/proc: Operation not permitted");
    expect(toolTexts(run.model.requests[1])).toEqual([text]);
    const finished = run.updates.find((u) => u.update.type === 'tool_call_finished')!.update;
    expect(finished).toMatchObject({ toolName: 'bash', status: 'failed', error: { code: 'sandbox_unavailable', message: text, retryable: false } });
    expect(cards(run)).toEqual([]);
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

/**
 * Grant scopes (seed 004 §5, DECISIONS §5). Grants are recorded per environment id: a grant for one
 * environment never covers the same grant key in another. A session-scoped grant goes to the session
 * whichever turn asked; a turn-scoped one to the turn that asked. A response can only pair with a
 * card that is still waiting: cancelling a turn clears its waiters (seed §5 `clear_pending_waiters`),
 * so a decision arriving after that has nothing to answer and leaves no grant of any scope.
 */
describe('grant scopes', () => {
  /** A host tool whose cards name the host it acts on as the environment, with one grant key for all hosts. */
  const remoteTool = defineTool({
    name: 'remote',
    description: 'Runs an action on a host.',
    parameters: z.object({ host: z.string(), action: z.string() }),
    authorize: ({ host, action }) => ({
      kind: 'card',
      card: { toolName: 'remote', kind: 'approval', summary: `run ${action} on ${host}`, command: action, environmentId: `host:${host}`, grantKey: 'remote:deploy' },
    }),
    execute: ({ host, action }) => `ran ${action} on ${host}`,
  });
  const remote = (host: string, action = 'deploy') => ({ name: 'remote', arguments: { host, action } });
  const askedEnvironments = (run: Run) => run.updates.filter((u) => u.update.type === 'permission_requested').map((u) => (u.update as { card: PermissionCard }).card.environmentId);

  it('grants are keyed by environment id: a session grant for host a does not cover host b, nor a turn grant for b the next turn', async () => {
    const run = await start(
      [
        { toolCalls: [remote('a', 'one')] },
        { toolCalls: [remote('a', 'two'), remote('b', 'three')] },
        { toolCalls: [remote('b', 'four')] },
        { text: 'turn 1' },
        { toolCalls: [remote('a', 'five'), remote('b', 'six')] },
        { text: 'turn 2' },
      ],
      { extraTools: [remoteTool] },
    );
    // a: for the session; b: for this turn; b again in turn 2: once.
    decide(run, ['allow_for_session', 'allow_for_turn', 'allow_once']);
    expect((await turn(run, 'one')).outcome).toEqual({ status: 'completed', finalText: 'turn 1' });
    // "two" on a ran under a's session grant; "three" on b asked although the key is the same; "four" ran under b's turn grant.
    expect(askedEnvironments(run)).toEqual(['host:a', 'host:b']);
    expect(toolTexts(run.model.requests[3])).toEqual(['ran one on a', 'ran two on a', 'ran three on b', 'ran four on b']);
    expect((await turn(run, 'two')).outcome).toEqual({ status: 'completed', finalText: 'turn 2' });
    // Turn 2: a is still granted (session), b's turn grant went with turn 1.
    expect(askedEnvironments(run)).toEqual(['host:a', 'host:b', 'host:b']);
    expect(toolTexts(run.model.requests[5]).slice(-2)).toEqual(['ran five on a', 'ran six on b']);
  });

  it('the built-in policy keys its cards by workspace: the same dangerous command in another workspace is another environment', async () => {
    // Only authorisation runs here; a launcher stub makes the policy treat bash as sandboxed on any machine.
    const stub: SandboxLauncher = {
      kind: 'bubblewrap',
      prepare: () => {
        throw new Error('nothing runs in this test');
      },
    };
    const policy = permissionPolicy({ ...env.runtime, launcher: stub });
    const bash = env.tools.get('bash')!;
    const ask = (workingDirectory: string) => policy.authorize(bash, { command: 'rm -rf src' }, { sessionId: 's', turnId: 't', workingDirectory, permissionMode: 'auto', nonInteractive: false });
    const key = 'danger:rm_recursive_or_force:rm -rf src';
    expect(await ask(env.ws)).toMatchObject({ kind: 'card', card: { environmentId: `workspace:${env.ws}`, grantKey: key } });
    expect(await ask(env.outside)).toMatchObject({ kind: 'card', card: { environmentId: `workspace:${env.outside}`, grantKey: key } });
  });

  it('a late allow_for_session (its turn was cancelled meanwhile) is refused, never reaches the newer turn, and leaves no session grant', async () => {
    const run = await start(
      [{ toolCalls: [remote('a', 'old')] }, { toolCalls: [remote('a', 'new')] }, { text: 'new done' }, { toolCalls: [remote('a', 'later')] }, { text: 'later done' }],
      { extraTools: [remoteTool] },
    );
    const cardOf = (turnId: string) =>
      new Promise<string>((resolve) => {
        const seen = run.updates.find((u) => u.turnId === turnId && u.update.type === 'permission_requested');
        if (seen) return resolve((seen.update as { toolCallId: string }).toolCallId);
        const sub = run.session.updates$.subscribe((u) => {
          if (u.turnId === turnId && u.update.type === 'permission_requested') {
            sub.unsubscribe();
            resolve(u.update.toolCallId);
          }
        });
      });
    const { turnId: oldTurn } = await run.session.startTurn({ clientRequestId: 'late-old', input: [{ type: 'text', text: 'old' }] });
    const oldCall = await cardOf(oldTurn);
    await run.session.cancelTurn(oldTurn);
    expect(await run.session.waitForTurn(oldTurn)).toEqual({ status: 'cancelled' });

    const { turnId: newTurn } = await run.session.startTurn({ clientRequestId: 'late-new', input: [{ type: 'text', text: 'new' }] });
    const newCall = await cardOf(newTurn);
    // The old card's answer arrives while the new turn waits on a card with the same environment and key.
    await expect(run.session.resolvePermission(oldTurn, oldCall, 'allow_for_session')).rejects.toMatchObject({ code: 'turn_not_active' });
    expect(run.session.snapshot().runtime).toMatchObject({ type: 'running', turnId: newTurn, phase: 'waiting_permission' });
    await run.session.resolvePermission(newTurn, newCall, 'allow_once');
    expect(await run.session.waitForTurn(newTurn)).toEqual({ status: 'completed', finalText: 'new done' });

    // No session grant was left behind: the same call in a later turn asks again.
    const { turnId: laterTurn } = await run.session.startTurn({ clientRequestId: 'late-later', input: [{ type: 'text', text: 'later' }] });
    const laterCall = await cardOf(laterTurn);
    await run.session.resolvePermission(laterTurn, laterCall, 'allow_once');
    expect(await run.session.waitForTurn(laterTurn)).toEqual({ status: 'completed', finalText: 'later done' });
    expect(askedEnvironments(run)).toEqual(['host:a', 'host:a', 'host:a']);
    const resolved = run.updates.filter((u) => u.update.type === 'permission_resolved').map((u) => [u.turnId, (u.update as { decision: string }).decision]);
    expect(resolved).toEqual([
      [oldTurn, 'cancelled'],
      [newTurn, 'allow_once'],
      [laterTurn, 'allow_once'],
    ]);
  });
});
