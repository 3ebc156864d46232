/**
 * The package as a host installs it (issue 2, item 1): `openwork-core` and `openwork-core/testing`
 * imported by package name from outside the repository, resolved through package.json `exports`
 * to the built dist/ — at run time (a tiny turn with the scripted model) and in the type checker.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync, mkdirSync, writeFileSync, realpathSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt, ROOT } from '../support/cli-process.js';

/** A host project: its own directory, with the package linked into node_modules as npm would. */
let host: string;

const RUN = `
import * as core from 'openwork-core';
import * as testing from 'openwork-core/testing';

const model = testing.scriptedModel([
  { toolCalls: [{ name: 'echo', arguments: { text: 'from the package' }, callId: 'c1' }] },
  { text: 'done' },
]);
const runtime = await core.createCore({ plan: true, conversationHistory: true, agents: true, storage: core.pgliteStorage(), model, tools: [testing.echoTool] });
const session = await runtime.createSession({ workingDirectory: process.cwd() });
const updates = [];
session.updates$.subscribe((e) => updates.push(e.update.type));
const { turnId } = await session.startTurn({ clientRequestId: 'pkg-1', input: [{ type: 'text', text: 'echo something' }] });
const outcome = await session.waitForTurn(turnId);
const roles = (await session.messages()).map((m) => m.role);
model.assertDone();
const lastInSecondRequest = model.requests[1].messages.at(-1);
await runtime.shutdown();
let internal = null;
try {
  await import('openwork-core/dist/core.js');
} catch (error) {
  internal = error.code;
}
console.log(JSON.stringify({
  outcome,
  roles,
  lastInSecondRequest,
  updates,
  internal,
  resolved: { core: import.meta.resolve('openwork-core'), testing: import.meta.resolve('openwork-core/testing') },
  coreExports: Object.keys(core),
  testingExports: Object.keys(testing),
}));
`;

const TYPES = `
import { createCore, pgliteStorage, type Core, type SessionRecord, type SessionUpdate, type UserInputAnswers } from 'openwork-core';
import { scriptedModel, echoTool, ScriptError, type ScriptedModel, type ScriptedStep } from 'openwork-core/testing';

/** A host answering the model's questions from the update stream. */
export function answerFirstOption(update: SessionUpdate): UserInputAnswers | null {
  if (update.type !== 'user_input_requested') return null;
  return Object.fromEntries(update.request.questions.map((q) => [q.id, q.options?.[0]?.label ?? 'yes']));
}

const steps: ScriptedStep[] = [{ text: 'hi' }, { toolCalls: [{ name: 'echo', arguments: { text: 'x' } }] }];
export async function run(): Promise<[Core, ScriptedModel, SessionRecord | null, boolean]> {
  const model = scriptedModel(steps, { delayMs: 1 });
  const core = await createCore({ plan: true, conversationHistory: true, agents: true, storage: pgliteStorage(), model, tools: [echoTool] });
  return [core, model, await core.storage.getSession('x'), new ScriptError('e') instanceof Error];
}
// @ts-expect-error: the scripted model is not part of the root entry point.
export { scriptedModel as notFromRoot } from 'openwork-core';
// @ts-expect-error: a step must be one of the scripted shapes.
export const bad: ScriptedStep = { text: 42 };
`;

beforeAll(() => {
  ensureBuilt();
  host = realpathSync(mkdtempSync(join(tmpdir(), 'openwork-host-')));
  mkdirSync(join(host, 'node_modules'));
  symlinkSync(ROOT, join(host, 'node_modules', 'openwork-core'), 'dir');
  writeFileSync(join(host, 'package.json'), JSON.stringify({ name: 'host', private: true, type: 'module' }));
}, 300_000);

afterAll(() => {
  if (host) rmSync(host, { recursive: true, force: true });
});

describe('openwork-core as an installed package', () => {
  it('runs a turn through the package entry points, resolved to dist/ by the exports map', { timeout: 120_000 }, () => {
    writeFileSync(join(host, 'run.mjs'), RUN);
    const out = execFileSync(process.execPath, ['run.mjs'], { cwd: host, encoding: 'utf8', env: { ...process.env, NODE_OPTIONS: '' } });
    const result = JSON.parse(out.trim().split('\n').at(-1)!) as Record<string, unknown>;
    expect(result.outcome).toEqual({ status: 'completed', finalText: 'done' });
    // (World State is on by default: its user-role context messages come before the request.)
    expect((result.roles as string[]).slice(-4)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(result.lastInSecondRequest).toEqual({ role: 'tool', callId: 'c1', toolName: 'echo', status: 'success', text: 'from the package' });
    expect(result.updates).toContain('turn_finished');
    // The built files, not the TypeScript sources; internals are not reachable.
    expect(result.resolved).toEqual({
      core: pathToFileURL(join(ROOT, 'dist', 'index.js')).href,
      testing: pathToFileURL(join(ROOT, 'dist', 'testing', 'index.js')).href,
    });
    expect(result.internal).toBe('ERR_PACKAGE_PATH_NOT_EXPORTED');
    expect(result.coreExports).toEqual(expect.arrayContaining(['createCore', 'pgliteStorage', 'postgresStorage', 'defineTool', 'openaiModel', 'CommandError']));
    expect(result.coreExports).not.toContain('scriptedModel');
    expect(result.testingExports).toEqual(expect.arrayContaining(['scriptedModel', 'ScriptError', 'echoTool', 'failTool', 'approvalTool', 'slowTool', 'journalTool', 'sequentialIds']));
  });

  it('type-checks a host file against the published declarations', { timeout: 180_000 }, () => {
    writeFileSync(join(host, 'host.ts'), TYPES);
    const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
    const args = [tsc, '--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--skipLibCheck', 'host.ts'];
    let output = '';
    try {
      execFileSync(process.execPath, args, { cwd: host, encoding: 'utf8', stdio: 'pipe' });
    } catch (error) {
      output = `${(error as { stdout?: string }).stdout ?? ''}${(error as { stderr?: string }).stderr ?? ''}`;
    }
    expect(output).toBe('');
    // And the checker does look: a wrong import is reported.
    writeFileSync(join(host, 'wrong.ts'), `import { noSuchExport } from 'openwork-core/testing';\nexport const x = noSuchExport;\n`);
    const wrong = (() => {
      try {
        execFileSync(process.execPath, [...args.slice(0, -1), 'wrong.ts'], { cwd: host, encoding: 'utf8', stdio: 'pipe' });
        return '';
      } catch (error) {
        return String((error as { stdout?: string }).stdout);
      }
    })();
    expect(wrong).toMatch(/has no exported member 'noSuchExport'/);
  });
});
