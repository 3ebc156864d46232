/**
 * Attack round 5 (trust-lease): a bash command that fills the host's disk. Through the public API
 * (createCore, a scripted model driving the built-in bash, real bubblewrap), each attack must be
 * stopped by a disk limit: one huge file (`yes > f`, `fallocate`, in the workspace or the temp
 * directory) by RLIMIT_FSIZE; many files each under that limit, or many empty files, by the
 * call's disk budget (bytes and inodes watched with statfs). The call ends `disk_limit_exceeded`,
 * the command's processes are gone, and the session answers its next model step.
 */
import { randomUUID } from 'node:crypto';
import { readdirSync, statSync, rmSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../src/core.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { prepareToolRuntime } from '../../src/services/tools/tool-runtime.js';
import { workspaceToolOptions } from '../../src/services/tools/workspace.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { requireSandbox, type ToolEnv, useToolEnv } from '../support/tool-env.js';
import { usePglite } from '../support/databases.js';

const MiB = 1024 * 1024;
const FILE_LIMIT = 4 * MiB;
const DISK_BYTES = 32 * MiB;
const DISK_INODES = 2_000;

let env: ToolEnv;
let storage: SqlSessionStorage;
const cores: Core[] = [];

usePglite((s) => (storage = s));
useToolEnv((e) => (env = e), { bashFileSizeLimit: FILE_LIMIT, bashDiskLimit: { bytes: DISK_BYTES, inodes: DISK_INODES } });

afterAll(async () => {
  for (const core of cores) await core.shutdown();
});

/** Runs `command` as the model's one bash call; answers the stored tool result and the turn's outcome. */
async function attack(command: string) {
  const model = scriptedModel([{ toolCalls: [{ name: 'bash', arguments: { command, timeoutMs: 60_000 } }] }, { text: 'the session goes on' }]);
  const core = await createCore({ storage, model, closeStorageOnShutdown: false, ...workspaceToolOptions(env.runtime), worldState: false });
  cores.push(core);
  const session = await core.createSession({ workingDirectory: env.ws });
  const { turnId } = await session.startTurn({ clientRequestId: randomUUID(), input: [{ type: 'text', text: 'fill the disk' }] });
  const outcome = await session.waitForTurn(turnId);
  const messages = await storage.listMessages(session.sessionId);
  const block = messages.flatMap((m) => m.content).find((b) => b.type === 'tool_result');
  return { outcome, result: block as Extract<typeof block, { type: 'tool_result' }> };
}

function sizeOf(dir: string): { bytes: number; files: number } {
  let bytes = 0;
  let files = 0;
  for (const name of readdirSync(dir)) {
    bytes += statSync(join(dir, name)).size;
    files += 1;
  }
  return { bytes, files };
}

function freshDir(name: string, base = env.ws): string {
  const dir = join(base, name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir);
  return dir;
}

describe('a bash command that fills the disk (attack round 5)', () => {
  it('`yes > file` in the workspace stops at the file size limit', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const dir = freshDir('yes');
    const { outcome, result } = await attack('yes > yes/big');
    expect(outcome).toEqual({ status: 'completed', finalText: 'the session goes on' });
    expect(result).toMatchObject({ status: 'failed', error: { code: 'disk_limit_exceeded' } });
    expect(result.text).toContain(`file size limit of ${FILE_LIMIT} bytes`);
    expect(sizeOf(dir).bytes).toBeLessThanOrEqual(FILE_LIMIT);
    rmSync(dir, { recursive: true, force: true });
  });

  it('a huge file in the temp directory, by fallocate or by a write, stops at the file size limit', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const dir = freshDir('huge', env.tmp);
    for (const command of [`fallocate -l 1G "$TMPDIR/huge/f"`, `head -c 1073741824 /dev/zero > "$TMPDIR/huge/g"`]) {
      const { outcome, result } = await attack(command);
      expect(outcome).toMatchObject({ status: 'completed' });
      expect(result, command).toMatchObject({ status: 'failed', error: { code: 'disk_limit_exceeded' } });
    }
    expect(sizeOf(dir).bytes).toBeLessThanOrEqual(2 * FILE_LIMIT);
    rmSync(dir, { recursive: true, force: true });
  });

  it('many files each under the file size limit stop at the disk budget', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const dir = freshDir('many');
    // 512 MiB in files of 3 MiB, a little slower than the disk so the look every 100 ms sees it grow.
    const { outcome, result } = await attack('for i in $(seq 1 170); do head -c 3145728 /dev/zero > many/f$i; done; echo finished');
    expect(outcome).toMatchObject({ status: 'completed' });
    expect(result).toMatchObject({ status: 'failed', error: { code: 'disk_limit_exceeded' } });
    expect(result.text).toContain(`more than ${DISK_BYTES} bytes of disk`);
    expect(result.text).not.toContain('finished');
    const { bytes } = sizeOf(dir);
    // Stopped near the budget: one look's worth of writing past it at most, far below the 512 MiB asked for.
    expect(bytes).toBeGreaterThan(DISK_BYTES / 2);
    expect(bytes).toBeLessThan(256 * MiB);
    rmSync(dir, { recursive: true, force: true });
  });

  it('a flood of empty files stops at the inode budget', async (ctx) => {
    requireSandbox(ctx, env.runtime);
    const dir = freshDir('touch');
    // `: > f` creates a file without a fork: as fast as bash can make them.
    const { outcome, result } = await attack('for i in $(seq 1 200000); do : > touch/t$i; done; echo finished');
    expect(outcome).toMatchObject({ status: 'completed' });
    expect(result).toMatchObject({ status: 'failed', error: { code: 'disk_limit_exceeded' } });
    expect(result.text).toContain(`more than ${DISK_INODES} files`);
    const { files } = sizeOf(dir);
    expect(files).toBeGreaterThan(DISK_INODES / 2);
    expect(files).toBeLessThan(100_000);
    rmSync(dir, { recursive: true, force: true });
  });

  it('the limits refuse nonsense with a typed error', async () => {
    for (const options of [{ bashFileSizeLimit: 0 }, { bashFileSizeLimit: 1.5 }, { bashDiskLimit: { bytes: -1 } }, { bashDiskLimit: { inodes: 0 } }]) {
      await expect(prepareToolRuntime({ home: env.home, tempDirs: [env.tmp], ...options })).rejects.toMatchObject({ code: 'invalid_request' });
    }
  });
});
