/**
 * Explorers and skills with the real tools, permission policy and sandbox (reference §5.10 items
 * 15-17, §7.9 items 32-33): an explorer runs read-only commands without a card, the kernel denies
 * its workspace writes, it has no write tools; the skill root is never writable, always readable.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../../src/core.js';
import type { ModelRequest } from '../../../src/services/model/port.js';
import { scriptedModel, type ScriptedStep } from '../../../src/services/model/scripted.js';
import { protectedPathText } from '../../../src/services/permissions/texts.js';
import { workspaceToolOptions } from '../../../src/services/tools/workspace.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../../support/tool-env.js';
import { usePglite } from '../../support/databases.js';

function isChild(request: ModelRequest): boolean {
  return request.system[0]!.content.startsWith('You are an explorer');
}

function lastResult(request: ModelRequest): { status: string; text: string; toolName: string } {
  return request.messages.filter((m) => m.role === 'tool').at(-1) as { status: string; text: string; toolName: string };
}

describe('explorers and skills on the real tools', () => {
  let storage: SqlSessionStorage;
  let env: ToolEnv;
  const cores: Core[] = [];
  usePglite((s) => (storage = s));
  useToolEnv((e) => (env = e));
  afterAll(async () => {
    for (const core of cores) await core.shutdown();
  });

  async function runtime(root: (request: ModelRequest, i: number) => ScriptedStep, child: (request: ModelRequest, i: number) => ScriptedStep) {
    let r = 0;
    let c = 0;
    const model = scriptedModel((request) => (isChild(request) ? child(request, c++) : root(request, r++)));
    const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, closeStorageOnShutdown: false, ...workspaceToolOptions(env.runtime), worldState: false });
    cores.push(core);
    const session = await core.createSession({ workingDirectory: env.ws });
    const run = async (text: string) => {
      const { turnId } = await session.startTurn({ clientRequestId: `r-${Math.random()}`, input: [{ type: 'text', text }] });
      return session.waitForTurn(turnId);
    };
    return { core, session, model, run };
  }

  it('an explorer lists without a card, is denied workspace writes by the kernel, and has no write tools [reference §5.10 acc 15-17]', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const { model, run, core, session } = await runtime(
      (_r, i) =>
        i === 0
          ? { toolCalls: [{ name: 'spawn_agent', arguments: { task_name: 'probe', message: 'look around' } }] }
          : i === 1
            ? { toolCalls: [{ name: 'wait_agent', arguments: {} }] }
            : { text: 'done' },
      (_req, i) =>
        [
          { toolCalls: [{ name: 'bash', arguments: { command: 'ls src' } }] },
          { toolCalls: [{ name: 'bash', arguments: { command: 'touch created-by-explorer.txt' } }] },
          { toolCalls: [{ name: 'write', arguments: { path: 'x.txt', content: 'x' } }] },
          { text: 'src has main.txt; I cannot write the workspace.' },
        ][i]!,
    );
    expect(await run('probe the workspace')).toMatchObject({ status: 'completed' });
    const [child] = await core.listChildSessions(session.sessionId);
    expect(child!.permissionMode).toBe('accept_edits');
    const childRequests = model.requests.filter(isChild);
    expect(childRequests[0]!.tools.map((t) => t.name).sort()).toEqual(['bash', 'glob', 'grep', 'list', 'read']);
    expect(lastResult(childRequests[1]!)).toMatchObject({ status: 'success', text: expect.stringContaining('main.txt') });
    const denied = lastResult(childRequests[2]!);
    expect(denied.text).toContain('[sandbox: file access denied under accept-edits mode]');
    expect(existsSync(join(env.ws, 'created-by-explorer.txt'))).toBe(false);
    expect(lastResult(childRequests[3]!)).toMatchObject({ status: 'error', text: "tool 'write' not found" });
    // No card was ever shown for the explorer.
    expect(model.requests.filter(isChild).length).toBe(4);
    // Its tool spans say it ran under a snapshot of its parent's mode (reference §4.14).
    await core.flushTrace();
    const childTurn = (await storage.listTurns(child!.id))[0]!;
    const bashSpans = (await storage.listTraceSpans({ turnId: childTurn.id })).filter((s) => s.kind === 'tool_call' && s.resolvedToolName === 'bash');
    expect(bashSpans.map((s) => [s.attributes.sessionMode, s.attributes.sessionModeOrigin, s.attributes.sandboxMode, s.attributes.sandboxDenied])).toEqual([
      ['accept_edits', 'inherited', 'accept_edits', false],
      ['accept_edits', 'inherited', 'accept_edits', true],
    ]);
  });

  it('the skill root is readable, never writable: file tools are refused by rule, bash by the kernel [reference §7.9 acc 32-33]', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const skillFile = join(env.home, '.agents', 'skills', 'demo', 'SKILL.md');
    const { model, run } = await runtime(
      (_r, i) =>
        [
          { toolCalls: [{ name: 'read', arguments: { path: skillFile } }] },
          { toolCalls: [{ name: 'write', arguments: { path: skillFile, content: 'owned' } }] },
          { toolCalls: [{ name: 'bash', arguments: { command: `echo owned > ${skillFile}` } }] },
          { text: 'the skill root is protected' },
        ][i]!,
      () => ({ text: 'unused' }),
    );
    expect(await run('try the skill root')).toMatchObject({ status: 'completed' });
    const [afterRead, afterWrite, afterBash] = model.requests.slice(1).map(lastResult);
    expect(afterRead).toMatchObject({ status: 'success', text: expect.stringContaining('demo skill') });
    expect(afterWrite).toMatchObject({ status: 'denied', text: protectedPathText(skillFile) });
    expect(afterBash!.text).toMatch(/\[sandbox: file access denied under auto mode\]|Read-only file system|Permission denied/);
    expect(readFileSync(skillFile, 'utf8')).toBe('# demo skill\n');
  });
});
