/**
 * Integrity round 8 (branch integ8): the bind sources a bash call pins (`O_PATH` descriptors, see
 * `bubblewrap.ts`, `pinSources`) were left open by an exception between the pinning and the spawn.
 * The launcher wrote or checked the seccomp program in the runtime's state directory after pinning,
 * outside the clean-up that closes them: when that failed (the state directory unwritable, the disk
 * full, the program's path not a file) every call that failed there kept one descriptor per bound
 * path (4 a call in this test), until the host ran out of descriptors and nothing could open a file.
 *
 * Through the built-in bash tool under the real bubblewrap: the seccomp program's path is made a
 * directory after the runtime's self-check (so the self-check passed and the launcher works), and
 * each call then fails after pinning. The process's descriptors are counted in `/proc/self/fd`
 * before and after: they must not grow. Then the path is put back and a call runs again.
 */
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { requireSandbox, toolEnv, type ToolEnv, useToolEnv } from '../support/tool-env.js';

let env: ToolEnv;
useToolEnv((e) => (env = e));

const CALLS = 30;

function openDescriptors(): number {
  return readdirSync('/proc/self/fd').length;
}

describe('pinned bind sources on a call that fails before the spawn (integ8)', () => {
  it('bash calls that fail after pinning leave no descriptor open', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    // A call that runs first: the seccomp program exists, the pins and the spawn work.
    const first = await env.call('bash', { command: 'echo ready' });
    expect(first.result.text).toContain('ready');
    const program = join(env.runtime.environment.openworkHome, 'sandbox', `seccomp-no-unix-sockets-${process.arch}.bpf`);
    rmSync(program);
    mkdirSync(program);
    try {
      // One failing call first, so that anything opened once per process (not per call) is counted in `before`.
      const warm = await env.call('bash', { command: 'echo never' });
      expect(warm.result.status).toBe('failed');
      const before = openDescriptors();
      for (let i = 0; i < CALLS; i += 1) {
        const { executed, result } = await env.call('bash', { command: `echo never-${i}` });
        expect(executed).toBe(true);
        expect(result.status).toBe('failed');
        expect(result.error?.code).toBe('execution_failed');
        expect(result.text).toContain('the sandbox could not be prepared');
        expect(result.text).not.toContain(`never-${i}\n`);
      }
      const after = openDescriptors();
      // A few descriptors may come and go with the event loop; one call's pins alone are more than 4.
      expect(after - before).toBeLessThan(4);
    } finally {
      rmSync(program, { recursive: true, force: true });
    }
    const again = await env.call('bash', { command: 'echo again' });
    expect(again.result.status).toBe('succeeded');
    expect(again.result.text).toContain('again');
  });

  it('bash calls whose launcher cannot be started (bwrap removed after the self-check) leave no descriptor open', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const dir = mkdtempSync(join(tmpdir(), 'openwork-bwrap-copy-'));
    const bwrap = join(dir, 'bwrap');
    copyFileSync('/usr/bin/bwrap', bwrap);
    const own = await toolEnv({ bwrapPath: bwrap });
    try {
      requireSandbox(ctx, own.runtime);
      rmSync(bwrap);
      const warm = await own.call('bash', { command: 'echo never' });
      expect(warm.result.error?.code).toBe('execution_failed');
      const before = openDescriptors();
      for (let i = 0; i < CALLS; i += 1) {
        const { result } = await own.call('bash', { command: `echo never-${i}` });
        expect(result.status).toBe('failed');
        // Reference §4.6: a launcher that cannot even start is an ordinary execution error.
        expect(result.error?.code).toBe('execution_failed');
        expect(result.text).toContain('could not be started');
      }
      expect(openDescriptors() - before).toBeLessThan(4);
    } finally {
      own.cleanup();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
