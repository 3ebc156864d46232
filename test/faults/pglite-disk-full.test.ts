/**
 * The embedded store's disk fills up (faults-review). PGlite's directory lives on a small tmpfs
 * mounted for the test (root only; as another user the test says why it cannot run), the rest of
 * the tmpfs is filled, and turns with large inputs are started until Postgres cannot extend a file.
 * That turn fails typed (`persistence_error`, the kernel's "No space left on device" in its message),
 * within a bound, with no model call for a turn that could not begin; every turn acknowledged before
 * is still stored; and once space is freed the same session, on the same open store, completes its
 * next turn.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCore, type Core } from '../../src/core.js';
import type { ModelRequest } from '../../src/services/model/port.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { pgliteStorage } from '../../src/storage/pglite.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { assertNoRunningAfterTerminal, assertStoredInvariants } from '../support/invariants.js';

const isRoot = process.getuid?.() === 0;

/** The model answers each request with the length of its last user text. */
function answer(request: ModelRequest): { text: string } {
  const user = request.messages.filter((m) => m.role === 'user').at(-1);
  const text = user && user.role === 'user' ? user.content.map((b) => ('text' in b ? b.text : '')).join('') : '';
  return { text: `got ${text.length}` };
}

describe.skipIf(!isRoot)('PGlite on a full disk', () => {
  let mountPoint: string;
  let storage: SqlSessionStorage;
  let core: Core;
  const model = scriptedModel(answer);

  beforeAll(async () => {
    mountPoint = mkdtempSync(join(tmpdir(), 'openwork-full-'));
    const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=64m', 'tmpfs', mountPoint], { encoding: 'utf8' });
    // As root the mount must work: a test that cannot run says so instead of passing.
    if (mounted.status !== 0) throw new Error(`cannot mount a tmpfs for the disk-full test: ${mounted.stderr}`);
    mkdirSync(join(mountPoint, 'db'));
    storage = pgliteStorage({ dataDir: join(mountPoint, 'db') });
    await storage.migrate();
    core = await createCore({ storage, model, tools: [], closeStorageOnShutdown: false, worldState: false });
  }, 120_000);

  afterAll(async () => {
    await core?.shutdown().catch(() => undefined);
    await storage?.close().catch(() => undefined);
    if (mountPoint) {
      spawnSync('umount', ['-l', mountPoint]);
      rmSync(mountPoint, { recursive: true, force: true });
    }
  });

  it('a write that cannot extend a file fails persistence_error; what was acknowledged stays; space back, the next turn completes', { timeout: 120_000 }, async () => {
    const session = await core.createSession({ workingDirectory: process.cwd() });
    let n = 0;
    const turn = async (text: string) => {
      n += 1;
      const { turnId } = await session.startTurn({ clientRequestId: `full-${n}`, input: [{ type: 'text', text }] });
      return { turnId, outcome: await session.waitForTurn(turnId) };
    };
    expect((await turn('before')).outcome).toEqual({ status: 'completed', finalText: 'got 6' });

    const filler = join(mountPoint, 'filler');
    // dd stops at ENOSPC with a non-zero status; the disk is full either way.
    spawnSync('dd', ['if=/dev/zero', `of=${filler}`, 'bs=1M', 'count=200'], { encoding: 'utf8' });
    expect(execFileSync('df', ['--output=avail', '-k', mountPoint], { encoding: 'utf8' }).split('\n')[1]!.trim()).toBe('0');

    const big = 'x'.repeat(100_000);
    const completed: string[] = [];
    let failed: { turnId: string; outcome: Awaited<ReturnType<typeof session.waitForTurn>> } | null = null;
    for (let i = 0; i < 30 && !failed; i += 1) {
      const started = Date.now();
      const r = await turn(big);
      expect(Date.now() - started).toBeLessThan(15_000);
      if (r.outcome.status === 'completed') completed.push(r.turnId);
      else failed = r;
    }
    expect(failed, 'some write met the full disk').not.toBeNull();
    expect(failed!.outcome).toMatchObject({ status: 'failed', code: 'persistence_error' });
    expect((failed!.outcome as { message: string }).message).toMatch(/No space left on device/);

    rmSync(filler);
    writeFileSync(join(mountPoint, 'freed'), '');
    expect((await turn('after')).outcome).toEqual({ status: 'completed', finalText: 'got 5' });
    const stored = await assertStoredInvariants(storage, session.sessionId);
    assertNoRunningAfterTerminal(stored.turns, session.status());
    expect(session.status()).toEqual({ type: 'idle' });
    // Every turn acknowledged while the disk filled is stored completed.
    for (const id of completed) expect(stored.turns.find((t) => t.id === id)).toMatchObject({ status: 'completed' });
  });
});

if (!isRoot) {
  describe('PGlite on a full disk', () => {
    it.skip('needs root to mount a small tmpfs (run the suite as root, as CI does)', () => undefined);
  });
}
