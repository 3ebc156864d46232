/**
 * `prepareToolRuntime`: option validation, the spill purge at start-up, and the tool surface it
 * hands out.
 */
import { mkdirSync, mkdtempSync, realpathSync, rmSync, utimesSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { builtinTools, BUILTIN_TOOL_NAMES } from '../../../src/services/tools/builtin.js';
import { prepareToolRuntime } from '../../../src/services/tools/tool-runtime.js';

const base = realpathSync(mkdtempSync(join(tmpdir(), 'openwork-runtime-')));
afterAll(() => rmSync(base, { recursive: true, force: true }));

describe('prepareToolRuntime', () => {
  it('refuses relative paths with invalid_request', async () => {
    await expect(prepareToolRuntime({ home: 'relative/home' })).rejects.toMatchObject({ code: 'invalid_request', name: 'InputError' });
    await expect(prepareToolRuntime({ home: join(base, 'h'), tempDirs: ['tmp'] })).rejects.toMatchObject({ code: 'invalid_request' });
    await expect(prepareToolRuntime({ home: join(base, 'h'), skillRoots: ['skills'] })).rejects.toMatchObject({ code: 'invalid_request' });
  });

  it('creates ~/.openwork, purges spill directories older than 7 days, and keeps configured skill roots protected', async () => {
    const home = join(base, 'home');
    const old = join(home, '.openwork', 'spill', 'ses_old');
    mkdirSync(old, { recursive: true });
    mkdirSync(join(home, '.openwork', 'spill', 'ses_new'), { recursive: true });
    const now = Date.now();
    utimesSync(old, new Date(now - 8 * 86_400_000), new Date(now - 8 * 86_400_000));
    const runtime = await prepareToolRuntime({ home, tempDirs: [join(base, 'tmp')], skillRoots: [join(base, 'team-skills')], sandbox: 'disabled', now: () => now });
    expect(runtime.startup).toEqual({ purgedSpillDirectories: 1 });
    expect(existsSync(old)).toBe(false);
    expect(existsSync(join(home, '.openwork', 'spill', 'ses_new'))).toBe(true);
    expect(runtime.environment.skillRoots).toEqual([join(home, '.agents', 'skills'), join(base, 'team-skills')]);
    expect(runtime.policy('auto', join(base, 'ws')).tier(join(base, 'team-skills', 'x', 'SKILL.md'))).toBe('hard_protected');
    expect(runtime.sandbox).toEqual({ available: false, kind: 'none', detail: 'the sandbox was disabled by configuration' });
  });

  it('hands out the seven built-in tools, or a subset', async () => {
    const runtime = await prepareToolRuntime({ home: join(base, 'home2'), tempDirs: [join(base, 'tmp')], sandbox: 'disabled' });
    expect(builtinTools(runtime).map((t) => t.name)).toEqual([...BUILTIN_TOOL_NAMES]);
    expect(builtinTools(runtime, { only: ['read', 'grep', 'glob', 'list', 'bash'] }).map((t) => t.name)).toEqual(['read', 'grep', 'glob', 'list', 'bash']);
  });
});
