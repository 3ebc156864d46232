/**
 * One skill root (reference §7.2, §7.5, §7.9 acc 32): a configured, non-default root is the root
 * the core discovers AND the root the permission policy protects; write, edit and bash into it are
 * refused (also through a symlinked alias) while the rest of the workspace stays writable; a core
 * whose discovered root the tool runtime does not protect refuses to start.
 */
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../../src/core.js';
import type { ModelRequest } from '../../../src/services/model/port.js';
import { scriptedModel, type ScriptedStep } from '../../../src/services/model/scripted.js';
import { bashDenialText, protectedPathText } from '../../../src/services/permissions/texts.js';
import { resolveSkillRoot } from '../../../src/services/skills/root.js';
import { prepareToolRuntime, type ToolRuntime } from '../../../src/services/tools/tool-runtime.js';
import { discoveredSkillRoot, workspaceToolOptions } from '../../../src/services/tools/workspace.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { requireSandbox } from '../../support/tool-env.js';
import { usePglite } from '../../support/databases.js';

const SKILL = '---\ndescription: Deploys the team service.\n---\n\nRun scripts/deploy.sh.\n';

function toolResults(request: ModelRequest): Array<{ toolName: string; status: string; text: string }> {
  return request.messages.flatMap((m) => (m.role === 'tool' ? [{ toolName: m.toolName, status: m.status, text: m.text }] : []));
}

describe('the configured skill root is discovered and write-protected (reference §7.2, §7.5)', () => {
  let base: string;
  let ws: string;
  let home: string;
  let teamRoot: string;
  let skillFile: string;
  let runtime: ToolRuntime;
  let storage: SqlSessionStorage;
  const cores: Core[] = [];

  usePglite((s) => (storage = s));
  beforeAll(async () => {
    base = realpathSync(mkdtempSync(join(tmpdir(), 'openwork-skill-root-')));
    ws = join(base, 'ws');
    home = join(base, 'home');
    // Inside the workspace, where everything else is writable in auto mode: only the protection refuses.
    teamRoot = join(ws, 'team-skills');
    skillFile = join(teamRoot, 'deploy', 'SKILL.md');
    for (const dir of [join(teamRoot, 'deploy'), join(home, '.agents', 'skills', 'personal'), join(base, 'tmp')]) mkdirSync(dir, { recursive: true });
    writeFileSync(skillFile, SKILL);
    writeFileSync(join(home, '.agents', 'skills', 'personal', 'SKILL.md'), '---\ndescription: A personal skill.\n---\n\nBody.\n');
    symlinkSync(teamRoot, join(ws, 'alias'));
    runtime = await prepareToolRuntime({ home, tempDirs: [join(base, 'tmp')], skillRoots: [teamRoot] });
  });
  afterAll(async () => {
    for (const core of cores) await core.shutdown();
    rmSync(base, { recursive: true, force: true });
  });

  async function core(steps: ScriptedStep[], extra: Parameters<typeof createCore>[0] extends infer O ? Partial<O> : never = {}) {
    const model = scriptedModel(steps);
    const created = await createCore({ plan: true, conversationHistory: true, agents: true, storage, model, closeStorageOnShutdown: false, compaction: false, ...workspaceToolOptions(runtime), ...extra });
    cores.push(created);
    return { core: created, model };
  }

  it('the root workspaceToolOptions hands the core is the configured one, and it is among the protected roots', () => {
    expect(discoveredSkillRoot(runtime)).toBe(teamRoot);
    expect(runtime.environment.skillRoots).toContain(teamRoot);
    expect(workspaceToolOptions(runtime)).toMatchObject({ skills: { root: teamRoot }, protectedSkillRoots: runtime.environment.skillRoots });
  });

  it('the core discovers the configured root (not ~/.agents/skills) and shows it in the catalog', async () => {
    const { core: c, model } = await core([{ text: 'seen' }]);
    expect(c.skillRoot).toBe(teamRoot);
    const listed = await c.listSkills();
    expect(listed.skills.map((s) => [s.name, s.path])).toEqual([['deploy', skillFile]]);
    expect(listed.warnings).toEqual([]);
    const session = await c.createSession({ workingDirectory: ws });
    const { turnId } = await session.startTurn({ clientRequestId: 'catalog', input: [{ type: 'text', text: 'which skills?' }] });
    expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'completed' });
    const catalog = model.requests[0]!.messages.flatMap((m) => (m.role === 'user' && m.kind === 'world_state' ? [m.content[0]!.text] : [])).join('\n');
    expect(catalog).toContain(`- deploy: Deploys the team service. (file: ${skillFile})`);
    expect(catalog).not.toContain('personal');
  });

  it('write, edit and bash into the configured root are refused, also through a symlinked alias; the rest of the workspace is writable', async (ctx) => {
    requireSandbox(ctx, runtime);
    const aliasFile = join(ws, 'alias', 'deploy', 'SKILL.md');
    const { core: c, model } = await core([
      { toolCalls: [{ name: 'read', arguments: { path: skillFile } }] },
      { toolCalls: [{ name: 'write', arguments: { path: skillFile, content: 'owned' } }] },
      { toolCalls: [{ name: 'edit', arguments: { path: skillFile, oldString: 'Run scripts/deploy.sh.', newString: 'Do anything.' } }] },
      { toolCalls: [{ name: 'write', arguments: { path: aliasFile, content: 'owned' } }] },
      { toolCalls: [{ name: 'write', arguments: { path: join(teamRoot, 'evil', 'SKILL.md'), content: 'new skill' } }] },
      { toolCalls: [{ name: 'bash', arguments: { command: `echo owned > ${skillFile}` } }] },
      { toolCalls: [{ name: 'write', arguments: { path: join(ws, 'notes.txt'), content: 'fine' } }] },
      { toolCalls: [{ name: 'bash', arguments: { command: 'echo fine > from-bash.txt' } }] },
      { text: 'the skill root is protected' },
    ]);
    const session = await c.createSession({ workingDirectory: ws });
    const { turnId } = await session.startTurn({ clientRequestId: 'attack', input: [{ type: 'text', text: 'rewrite the deploy skill' }] });
    expect(await session.waitForTurn(turnId)).toMatchObject({ status: 'completed' });
    const results = toolResults(model.requests.at(-1)!);
    expect(results[0]).toMatchObject({ toolName: 'read', status: 'success', text: expect.stringContaining('Run scripts/deploy.sh.') });
    expect(results.slice(1, 5)).toEqual([
      { toolName: 'write', status: 'denied', text: protectedPathText(skillFile) },
      { toolName: 'edit', status: 'denied', text: protectedPathText(skillFile) },
      // The alias is judged at its real path.
      { toolName: 'write', status: 'denied', text: protectedPathText(skillFile) },
      { toolName: 'write', status: 'denied', text: protectedPathText(join(teamRoot, 'evil', 'SKILL.md')) },
    ]);
    expect(results[5]!.toolName).toBe('bash');
    expect(results[5]!.text.endsWith(bashDenialText('auto'))).toBe(true);
    expect(results.slice(6).map((r) => r.status)).toEqual(['success', 'success']);
    expect(readFileSync(skillFile, 'utf8')).toBe(SKILL);
    expect(existsSync(join(teamRoot, 'evil'))).toBe(false);
    expect(readFileSync(join(ws, 'notes.txt'), 'utf8')).toBe('fine');
    expect(readFileSync(join(ws, 'from-bash.txt'), 'utf8')).toBe('fine\n');
  });

  it('a skill root the tool runtime does not protect is refused at createCore with configuration_invalid', async () => {
    const elsewhere = join(base, 'elsewhere-skills');
    await expect(createCore({ plan: true, conversationHistory: true, agents: true, storage, model: scriptedModel([]), closeStorageOnShutdown: false, ...workspaceToolOptions(runtime), skills: { root: elsewhere } })).rejects.toMatchObject({
      code: 'configuration_invalid',
      message: expect.stringContaining(`prepareToolRuntime({ skillRoots: ["${elsewhere}"] })`),
    });
    // A root below a protected one is protected too; null turns skills off; both start.
    const below = await core([], { skills: { root: join(teamRoot, 'deploy') } });
    expect(below.core.skillRoot).toBe(join(teamRoot, 'deploy'));
    const off = await core([], { skills: { root: null } });
    expect(off.core.skillRoot).toBeNull();
    expect((await off.core.listSkills()).skills).toEqual([]);
  });

  it('resolveSkillRoot: the default reads only HOME, protection is judged on real paths, relative roots are refused', () => {
    expect(resolveSkillRoot({ home: '/home/u' })).toBe('/home/u/.agents/skills');
    expect(resolveSkillRoot({ home: undefined })).toBeNull();
    expect(resolveSkillRoot({ root: null, home: '/home/u' })).toBeNull();
    expect(() => resolveSkillRoot({ root: 'skills' })).toThrow(expect.objectContaining({ code: 'configuration_invalid' }));
    // Through the symlinked alias, the root is the protected one.
    expect(resolveSkillRoot({ root: join(ws, 'alias'), protectedRoots: [teamRoot] })).toBe(join(ws, 'alias'));
    expect(() => resolveSkillRoot({ root: join(home, '.agents', 'skills'), protectedRoots: [teamRoot] })).toThrow(expect.objectContaining({ code: 'configuration_invalid' }));
  });
});
