/**
 * The CLI's tools stay inside the working directory and ask before reading hidden files.
 */
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliTools } from '../../src/cli/tools.js';
import type { AnyTool, AuthorizeContext, ToolContext } from '../../src/services/tools/define.js';

let root: string;
let outside: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'openwork-tools-'));
  outside = await mkdtemp(join(tmpdir(), 'openwork-outside-'));
  await mkdir(join(root, 'src'));
  await writeFile(join(root, 'src', 'a.ts'), 'export const a = 1;\n');
  await writeFile(join(root, '.env'), 'KEY=1\n');
  await writeFile(join(root, 'big.txt'), 'x'.repeat(70 * 1024));
  await writeFile(join(root, 'bin.dat'), Buffer.from([1, 0, 2]));
  await writeFile(join(outside, 'secret.txt'), 'nope');
  await symlink(join(outside, 'secret.txt'), join(root, 'escape.txt'));
  await symlink(join(root, '.env'), join(root, 'innocent.txt'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
  await rm(outside, { recursive: true, force: true });
});

const tool = (name: string) => cliTools().find((t) => t.name === name)! as AnyTool;

function ctx(decision: ToolContext['approval']['decision'] = 'none'): ToolContext {
  return {
    sessionId: 's',
    turnId: 't',
    toolCallId: 'tc',
    providerCallId: 'p',
    workingDirectory: root,
    permissionMode: 'auto',
    signal: new AbortController().signal,
    progress: () => undefined,
    approval: { decision },
  };
}

const authorizeCtx = (): AuthorizeContext => ({ sessionId: 's', turnId: 't', workingDirectory: root, permissionMode: 'auto', nonInteractive: false });

async function run(name: string, args: unknown, decision?: ToolContext['approval']['decision']) {
  const t = tool(name);
  return t.execute(t.parameters.parse(args), ctx(decision));
}

describe('CLI tools', () => {
  it('the list is list_directory and read_file', () => {
    expect(cliTools().map((t) => t.name)).toEqual(['list_directory', 'read_file']);
  });

  it('list_directory lists sorted entries, directories with a slash', async () => {
    expect(await run('list_directory', {})).toBe(['.env', 'big.txt', 'bin.dat', 'escape.txt', 'innocent.txt', 'src/'].join('\n'));
    expect(await run('list_directory', { path: 'src' })).toBe('a.ts');
  });

  it('nothing outside the working directory, by path or by link', async () => {
    await expect(run('list_directory', { path: '..' })).rejects.toThrow('outside the working directory');
    await expect(run('read_file', { path: join(outside, 'secret.txt') })).rejects.toThrow('outside the working directory');
    await expect(run('read_file', { path: 'escape.txt' })).rejects.toThrow('outside the working directory');
    await expect(run('read_file', { path: 'missing.txt' })).rejects.toThrow('no such file');
  });

  it('read_file reads text, pages large files, and names binary ones', async () => {
    expect(await run('read_file', { path: 'src/a.ts' })).toBe('export const a = 1;\n');
    const page = String(await run('read_file', { path: 'big.txt' }));
    expect(page.endsWith(`[... ${6 * 1024} more bytes: read again with offset ${64 * 1024}]`)).toBe(true);
    expect(String(await run('read_file', { path: 'big.txt', offset: 64 * 1024 })).length).toBe(6 * 1024);
    expect(await run('read_file', { path: 'bin.dat' })).toBe('bin.dat is a binary file (3 bytes)');
  });

  it('hidden files ask first; a link to one is refused without that approval', async () => {
    const read = tool('read_file');
    expect(await read.authorize!({ path: 'src/a.ts', offset: 0 }, authorizeCtx())).toEqual({ kind: 'execute' });
    expect(await read.authorize!({ path: '.env', offset: 0 }, authorizeCtx())).toEqual({
      kind: 'card',
      card: {
        toolName: 'read_file',
        kind: 'approval',
        summary: 'read .env',
        path: join(root, '.env'),
        reason: 'hidden files often hold secrets (.env, .git, .ssh)',
        environmentId: 'local',
        grantKey: 'read_file:hidden',
      },
    });
    expect(await run('read_file', { path: '.env' }, 'allow_once')).toBe('KEY=1\n');
    await expect(run('read_file', { path: 'innocent.txt' })).rejects.toThrow('leads to the hidden file .env');
  });
});
