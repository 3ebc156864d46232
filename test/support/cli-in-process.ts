/**
 * The CLI's `exec` run in this process, on streams the test reads (no child process, no `dist/`),
 * and the renderer's style with every colour off, for tests that compare what a human would read.
 */
import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import { runExec } from '../../src/cli/exec.js';
import type { Style } from '../../src/cli/render.js';

type ExecOptions = Parameters<typeof runExec>[0];

/** Runs `openwork exec` with the given parsed options, an empty stdin and no environment. */
export async function runExecInProcess(options: ExecOptions): Promise<{ code: number; stdout: string; stderr: string }> {
  const output = new PassThrough();
  const error = new PassThrough();
  let stdout = '';
  let stderr = '';
  output.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  error.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const input = new PassThrough();
  input.end();
  const code = await runExec(options, { input, output, error, env: {}, signals: new EventEmitter() });
  return { code, stdout, stderr };
}

/** The renderer's style with no colour: what the text says, without escapes. */
export const PLAIN_STYLE: Style = { on: false, dim: (t) => t, bold: (t) => t, red: (t) => t, green: (t) => t, yellow: (t) => t, cyan: (t) => t };
