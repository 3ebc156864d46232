/**
 * bash's error codes when something other than the command goes wrong: the working directory is
 * gone (`execution_failed`), the launcher cannot prepare the sandbox (`execution_failed`), the
 * launcher binary cannot be started (`execution_failed`, reference §4.6: not `sandbox_unavailable`),
 * the sandbox fails before the command runs (`sandbox_unavailable`, found by classification at run
 * time), and a killed command whose processes cannot be confirmed gone (`outcome_unknown`).
 *
 * The launchers here are small stand-ins for bubblewrap (real processes, no namespaces), so that
 * each failure happens for real and on every machine, whether or not bubblewrap works here.
 */
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { InputError } from '../../../src/errors.js';
import type { ToolProgress } from '../../../src/protocol/updates.js';
import { sandboxUnavailableText } from '../../../src/services/permissions/texts.js';
import type { LaunchSpec, SandboxLauncher } from '../../../src/services/sandbox/launcher.js';
import { bashTool } from '../../../src/services/tools/bash.js';
import { normalizeToolResult, type ToolContext, type ToolResult } from '../../../src/services/tools/define.js';
import { prepareToolRuntime } from '../../../src/services/tools/tool-runtime.js';
import { type ToolEnv, useToolEnv } from '../../support/tool-env.js';

let env: ToolEnv;
useToolEnv((e) => (env = e), { bashKillGraceMs: 300 });

/** A launcher that records what it was asked and hands back `spec` (or throws). */
function launcher(spec: Partial<LaunchSpec> | (() => never)): SandboxLauncher & { prepared: string[]; cleanedUp: number } {
  const fake = {
    kind: 'bubblewrap' as const,
    prepared: [] as string[],
    cleanedUp: 0,
    prepare(_policy: unknown, command: string): LaunchSpec {
      fake.prepared.push(command);
      if (typeof spec === 'function') spec();
      return {
        file: '/bin/sh',
        args: [],
        statusFd: false,
        hidden: [],
        ...(spec as Partial<LaunchSpec>),
        cleanup: () => {
          fake.cleanedUp += 1;
        },
      };
    },
  };
  return fake;
}

let counter = 0;
async function runBash(withLauncher: SandboxLauncher, args: { command: string; timeoutMs?: number }, options: { workingDirectory?: string; onProgress?: (p: ToolProgress) => void } = {}): Promise<ToolResult> {
  const tool = bashTool({ ...env.runtime, launcher: withLauncher });
  counter += 1;
  const ctx: ToolContext = {
    sessionId: 'ses_outcomes',
    turnId: 'turn_outcomes',
    toolCallId: `tc_outcome_${counter}`,
    providerCallId: `call_${counter}`,
    workingDirectory: options.workingDirectory ?? env.ws,
    permissionMode: 'auto',
    signal: new AbortController().signal,
    progress: options.onProgress ?? (() => {}),
    approval: { decision: 'none' },
  };
  return normalizeToolResult(await tool.execute(tool.parameters.parse(args), ctx));
}

/** A stand-in launcher script: bubblewrap's status lines on fd 3 when asked, then `body`. */
function script(name: string, body: string): string {
  const path = join(env.base, name);
  writeFileSync(path, `#!/bin/sh\n${body}\n`);
  chmodSync(path, 0o755);
  return path;
}

describe('execution_failed', () => {
  it('a working directory that does not exist: nothing is prepared or started', async () => {
    const fake = launcher({});
    const gone = join(env.base, 'gone-workspace');
    const result = await runBash(fake, { command: 'echo hi' }, { workingDirectory: gone });
    expect(result).toEqual({
      status: 'failed',
      text: `the working directory ${gone} does not exist`,
      error: { code: 'execution_failed', message: `the working directory ${gone} does not exist`, retryable: false },
    });
    expect(fake.prepared).toEqual([]);
  });

  it('a sandbox that cannot be prepared (the launcher throws): the reason in the text', async () => {
    const fake = launcher(() => {
      throw new Error('cannot create the placeholder for /x: no space left on device');
    });
    const result = await runBash(fake, { command: 'echo hi' });
    const text = 'the sandbox could not be prepared: cannot create the placeholder for /x: no space left on device';
    expect(result).toEqual({ status: 'failed', text, error: { code: 'execution_failed', message: text, retryable: false } });
    expect(fake.prepared).toEqual(['echo hi']);
  });

  it('a launcher binary that cannot be started (removed after the self-check) is an ordinary execution error, and the launch is cleaned up', async () => {
    const missing = join(env.base, 'bwrap-removed-after-self-check');
    const fake = launcher({ file: missing, args: ['--', '/bin/true'], statusFd: true });
    const result = await runBash(fake, { command: 'true' });
    expect(result.status).toBe('failed');
    expect(result.error?.code).toBe('execution_failed');
    expect(result.text).toBe(`${missing} could not be started: spawn ${missing} ENOENT`);
    expect(fake.cleanedUp).toBe(1);
  });
});

describe('sandbox_unavailable at run time (classification)', () => {
  it('bubblewrap failing before the command ran: sandbox_unavailable with its reason, whatever the command printed', async () => {
    // bubblewrap reports the child's pid on fd 3, then dies before reporting an exit code.
    const fakeBwrap = script('bwrap-fails-late', `echo '{ "child-pid": 4242 }' >&3\necho 'bwrap: Creating new namespace failed: Operation not permitted' >&2\nexit 1`);
    const fake = launcher({ file: fakeBwrap, args: [], statusFd: true });
    const result = await runBash(fake, { command: 'echo never' });
    const text = sandboxUnavailableText('bubblewrap failed: Creating new namespace failed: Operation not permitted');
    expect(result).toEqual({ status: 'failed', text, error: { code: 'sandbox_unavailable', message: text, retryable: false } });
    expect(fake.cleanedUp).toBe(1);
  });

  it('the same launcher reporting the exit code is an ordinary result', async () => {
    const fakeBwrap = script('bwrap-ok', `echo '{ "child-pid": 4243 }' >&3\necho hello\necho '{ "exit-code": 3 }' >&3\nexit 3`);
    const result = await runBash(launcher({ file: fakeBwrap, args: [], statusFd: true }), { command: 'ignored' });
    expect(result).toMatchObject({ status: 'succeeded', sandboxDenied: false });
    expect(result.error).toBeUndefined();
    expect(result.text).toMatch(/^hello\n\[exit 3; duration \d+ ms\]$/);
  });
});

describe('outcome_unknown', () => {
  it('a timed-out command whose output pipe outlives SIGKILL (a process that left the group) ends as outcome_unknown after the grace period', async () => {
    // `setsid` takes the first sleep out of the process group: the group kill misses it and it
    // keeps the output pipe open, so the runtime cannot confirm that the command is gone.
    const fake = launcher({ file: '/bin/sh', args: ['-c', 'setsid sleep 306.5 & echo $!; sleep 307.5'], statusFd: false });
    let escaped: number | undefined;
    const started = Date.now();
    try {
      const result = await runBash(fake, { command: 'ignored', timeoutMs: 300 }, {
        onProgress: (p) => {
          if (p.kind === 'stdout') escaped ??= Number.parseInt(p.chunk, 10);
        },
      });
      expect(result.status).toBe('outcome_unknown');
      expect(result.error).toEqual({ code: 'outcome_unknown', message: 'the command did not exit after SIGKILL', retryable: false });
      expect(result.text).toMatch(/^\d+\n\[the command did not exit after SIGKILL; outcome unknown; duration \d+ ms\]$/);
      // The timeout (300 ms) plus the configured grace (300 ms), not the default 5 s.
      expect(Date.now() - started).toBeLessThan(4_000);
      expect(fake.cleanedUp).toBe(1);
    } finally {
      if (escaped !== undefined && Number.isInteger(escaped)) {
        try {
          process.kill(escaped, 'SIGKILL');
        } catch {
          // Already gone.
        }
      }
    }
    expect(escaped).toBeGreaterThan(0);
  });

  it('bashKillGraceMs and maxSpillBytes must be positive integers (invalid_request)', async () => {
    await expect(prepareToolRuntime({ home: env.home, tempDirs: [env.tmp], sandbox: 'disabled', bashKillGraceMs: 0 })).rejects.toMatchObject({ code: 'invalid_request', name: 'InputError' });
    await expect(prepareToolRuntime({ home: env.home, tempDirs: [env.tmp], sandbox: 'disabled', maxSpillBytes: 1.5 })).rejects.toBeInstanceOf(InputError);
    const runtime = await prepareToolRuntime({ home: env.home, tempDirs: [env.tmp], sandbox: 'disabled' });
    expect(runtime.bashKillGraceMs).toBe(5_000);
    expect(runtime.spill).toEqual({ maxSpillBytes: 64 * 1024 * 1024 });
  });
});
