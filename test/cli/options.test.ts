/**
 * The CLI's command line and its environment defaults.
 */
import { describe, expect, it } from 'vitest';
import { UsageError, parseChatOptions, parseExecOptions, parseSessionsOptions } from '../../src/cli/options.js';
import type { LoadedConfigFile } from '../../src/cli/config.js';

describe('parseChatOptions', () => {
  it('defaults: the Responses API on OpenAI, PGlite under .openwork/db', () => {
    expect(parseChatOptions([], {}, '/work/p')).toEqual({
      model: 'gpt-5-mini',
      api: 'responses',
      mode: 'auto',
      dataDir: '/work/p/.openwork/db',
      workingDirectory: '/work/p',
      sources: {
        model: { kind: 'default' },
        api: { kind: 'default', note: undefined },
        baseURL: { kind: 'default', note: 'https://api.openai.com/v1' },
        mode: { kind: 'default' },
        contextWindow: { kind: 'default', note: 'unknown' },
        mcpServers: {},
        databaseUrl: { kind: 'default', note: 'none: PGlite' },
        dataDir: { kind: 'default' },
      },
    });
  });

  it('a base URL (flag or OPENAI_BASE_URL) defaults to Chat Completions; flags beat the environment', () => {
    expect(parseChatOptions(['hi', 'there'], { OPENAI_BASE_URL: 'http://localhost:11434/v1', OPENAI_MODEL: 'qwen3' }, '/w')).toMatchObject({
      prompt: 'hi there',
      api: 'chat',
      baseURL: 'http://localhost:11434/v1',
      model: 'qwen3',
    });
    expect(
      parseChatOptions(['--api', 'responses', '--base-url', 'http://h/v1', '--model', 'm', '--session', 'ses_1', '--max-output-tokens', '512', '--reasoning-effort', 'low'], { OPENAI_BASE_URL: 'http://x/v1' }, '/w'),
    ).toMatchObject({ api: 'responses', baseURL: 'http://h/v1', model: 'm', sessionId: 'ses_1', maxOutputTokens: 512, reasoningEffort: 'low' });
  });

  it('storage: --database-url or DATABASE_URL, --data-dir relative to the cwd', () => {
    expect(parseChatOptions([], { DATABASE_URL: 'postgres://u@h/db' }, '/w')).toMatchObject({ databaseUrl: 'postgres://u@h/db' });
    expect(parseChatOptions(['--data-dir', 'state'], {}, '/w')).toMatchObject({ dataDir: '/w/state' });
  });

  it('refuses what it cannot use, as usage_error', () => {
    expect(() => parseChatOptions(['--api', 'soap'], {}, '/w')).toThrow(UsageError);
    expect(() => parseChatOptions(['--max-output-tokens', '0'], {}, '/w')).toThrow('--max-output-tokens must be a positive integer');
    expect(() => parseChatOptions(['--nope'], {}, '/w')).toThrow(UsageError);
    let caught: unknown;
    try {
      parseChatOptions(['--max-output-tokens', '-1'], {}, '/w');
    } catch (error) {
      caught = error;
    }
    // One line, whatever the argument parser had to say.
    expect(caught).toMatchObject({ code: 'usage_error', message: expect.not.stringContaining('\n') });
  });
});

describe('config files under the flags and the environment', () => {
  const user: LoadedConfigFile = { path: '/home/u/.openwork/config.json', config: { model: 'user-model', api: 'chat', mode: 'accept_edits', mcpServers: { fs: { command: 'a' } } } };
  const project: LoadedConfigFile = { path: '/w/.openwork/config.json', config: { model: 'project-model', mcpServers: { fs: { command: 'b' }, web: { url: 'http://h/mcp' } } } };

  it('the project file beats the user file; MCP servers merge by name', () => {
    const options = parseChatOptions([], {}, '/w', [user, project]);
    expect(options).toMatchObject({ model: 'project-model', api: 'chat', mode: 'accept_edits', mcpServers: { fs: { command: 'b' }, web: { url: 'http://h/mcp' } } });
    expect(options.sources).toMatchObject({
      model: { kind: 'file', path: project.path },
      api: { kind: 'file', path: user.path },
      mcpServers: { fs: { kind: 'file', path: project.path }, web: { kind: 'file', path: project.path } },
    });
  });

  it('the environment beats the files, and a flag beats both', () => {
    expect(parseChatOptions([], { OPENAI_MODEL: 'env-model' }, '/w', [user, project]).sources.model).toEqual({ kind: 'env', name: 'OPENAI_MODEL' });
    const flagged = parseChatOptions(['--model', 'flag-model', '--mode', 'auto'], { OPENAI_MODEL: 'env-model' }, '/w', [user, project]);
    expect(flagged).toMatchObject({ model: 'flag-model', mode: 'auto', sources: { model: { kind: 'flag', flag: '--model' }, mode: { kind: 'flag', flag: '--mode' } } });
    expect(() => parseChatOptions(['--mode', 'yolo'], {}, '/w')).toThrow('--mode must be "auto" or "accept_edits", not "yolo"');
  });
});

describe('parseSessionsOptions', () => {
  it('takes a limit and the storage options only', () => {
    expect(parseSessionsOptions(['--limit', '5'], {}, '/w')).toEqual({ limit: 5, dataDir: '/w/.openwork/db', workingDirectory: '/w' });
    expect(() => parseSessionsOptions(['extra'], {}, '/w')).toThrow('unexpected argument "extra"');
  });
});

describe('parseExecOptions', () => {
  it('the prompt, --json and --approve (default never) on top of the chat options', () => {
    expect(parseExecOptions(['--json', 'fix', 'it', '--approve', 'full-auto', '--model', 'm'], {}, '/w')).toMatchObject({ prompt: 'fix it', json: true, approve: 'full-auto', model: 'm' });
    expect(parseExecOptions(['--approve=on-request', 'hi'], {}, '/w')).toMatchObject({ prompt: 'hi', json: false, approve: 'on-request' });
    expect(parseExecOptions(['hi'], {}, '/w')).toMatchObject({ approve: 'never' });
    expect(parseExecOptions(['--', '--json', 'is a word'], {}, '/w')).toMatchObject({ prompt: '--json is a word', json: false });
  });

  it('refuses an unknown policy and a missing prompt, as usage_error', () => {
    expect(() => parseExecOptions(['--approve', 'sometimes', 'hi'], {}, '/w')).toThrow(UsageError);
    expect(() => parseExecOptions(['--json'], {}, '/w')).toThrow(/exec needs a prompt/);
  });
});
