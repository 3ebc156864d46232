/**
 * Tool arguments that are not paths. A NUL byte in a path made Node throw from inside the file
 * tools (an untyped fault the machine could only call `execution_failed`), and a path past PATH_MAX
 * threw ENAMETOOLONG the same way. Both are bad input: every file tool answers them with
 * `invalid_arguments` and a clear text, and nothing is read or written.
 */
import { existsSync, readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { type ToolEnv, useToolEnv } from '../support/tool-env.js';

let env: ToolEnv;
useToolEnv((e) => (env = e), { sandbox: 'disabled' });

describe('malformed path arguments', () => {
  const nul = 'src/main.txt\u0000.env';
  const long = `src/${'x'.repeat(5_000)}`;
  const calls: Array<[string, Record<string, unknown>]> = [
    ['read', { path: nul }],
    ['write', { path: nul, content: 'x' }],
    ['edit', { path: nul, oldString: 'hello', newString: 'bye' }],
    ['grep', { pattern: 'x', path: nul }],
    ['glob', { pattern: '*', path: nul }],
    ['list', { path: nul }],
    ['read', { path: long }],
    ['write', { path: long, content: 'x' }],
    ['list', { path: long }],
  ];

  it.each(calls)('%s with a NUL byte or an overlong path is invalid_arguments', async (tool, args) => {
    const before = readdirSync(env.ws).sort();
    const { result } = await env.call(tool, args);
    expect(result.status).toBe('failed');
    expect(result.error?.code).toBe('invalid_arguments');
    expect(result.text).toMatch(/NUL byte|more than 4096/);
    expect(readdirSync(env.ws).sort()).toEqual(before);
    expect(existsSync(`${env.ws}/src/main.txt`)).toBe(true);
  });
});
