/**
 * Issue 16.3: `workingDirectory` is optional for a host without file tools. Such a session runs in
 * an empty directory of the runtime's own, so World State never samples the host process's own
 * directory into the model's context (the attack: a host started in a directory holding AGENTS.md
 * with secrets). With file tools registered, leaving it out is `invalid_request` and nothing is stored.
 */
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCore } from '../../src/core.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { builtinTools } from '../../src/services/tools/builtin.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { echoTool } from '../../src/testing/tools.js';
import { toolEnv, type ToolEnv } from '../support/tool-env.js';
import { usePglite } from '../support/databases.js';

describe('createSession without workingDirectory', () => {
  let storage: SqlSessionStorage;
  let home: string;
  let hostDir: string;
  let env: ToolEnv;
  const cwd = process.cwd();
  usePglite((s) => (storage = s));
  beforeAll(async () => {
    home = mkdtempSync(join(tmpdir(), 'openwork-home-'));
    hostDir = mkdtempSync(join(tmpdir(), 'openwork-hostdir-'));
    writeFileSync(join(hostDir, 'AGENTS.md'), 'HOST SECRET: the deploy key is HOST-SECRET-7f3a\n');
    env = await toolEnv();
  });
  afterAll(async () => {
    process.chdir(cwd);
    rmSync(home, { recursive: true, force: true });
    rmSync(hostDir, { recursive: true, force: true });
    await env.cleanup?.();
  });

  it('a host without file tools needs none; the session runs in an empty directory, not the host process directory', async () => {
    process.chdir(hostDir);
    const model = scriptedModel([{ text: 'fine' }]);
    // World State on (the default): it samples the session's working directory before the model call.
    const core = await createCore({ storage, model, tools: [echoTool], closeStorageOnShutdown: false, openworkHome: home, skills: { root: null } });
    try {
      const session = await core.createSession();
      expect(session.info.workingDirectory).toBe(join(home, 'no-workspace'));
      expect(readdirSync(session.info.workingDirectory)).toEqual([]);
      expect((await session.run('hello')).text).toBe('fine');
      expect(JSON.stringify(model.requests[0])).not.toContain('HOST-SECRET-7f3a');
    } finally {
      process.chdir(cwd);
      await core.shutdown();
    }
  });

  it('with file tools registered it is invalid_request, and no session is stored', async () => {
    const core = await createCore({ storage, model: scriptedModel([]), tools: builtinTools(env.runtime), closeStorageOnShutdown: false, openworkHome: home });
    try {
      const before = (await storage.listSessions({ limit: 1000 })).length;
      await expect(core.createSession()).rejects.toMatchObject({ code: 'invalid_request', details: { field: 'workingDirectory' } });
      await expect(core.createSession({ title: 'no dir' })).rejects.toMatchObject({ code: 'invalid_request' });
      expect(await storage.listSessions({ limit: 1000 })).toHaveLength(before);
    } finally {
      await core.shutdown();
    }
  });
});
