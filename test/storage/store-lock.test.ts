/**
 * Issue 13.5: one process per embedded store. Real processes on one PGlite directory: the second
 * opener gets a typed `store_locked` naming the holder, and nothing of the first one's is lost; a
 * lock left by a killed process is taken over.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { StoreLockedError } from '../../src/errors.js';
import { pgliteStorage } from '../../src/storage/pglite.js';
import { STORE_LOCK_FILE } from '../../src/storage/store-lock.js';
import { compiledChild } from '../support/compiled-child.js';

const CHILD = fileURLToPath(new URL('./store-lock-child.ts', import.meta.url));

// Compiled (and dist/ rebuilt when src/ is newer) before the tests, outside their 30 s limit.
beforeAll(() => void compiledChild(CHILD));

interface Child {
  proc: ChildProcessWithoutNullStreams;
  /** The child's one JSON report. */
  report: Promise<{ ready?: true; sessionId?: string; error?: { code: string; details: Record<string, unknown>; message: string } }>;
  exit: Promise<number | null>;
}

const children: Child[] = [];
const dirs: string[] = [];

function openInChild(dir: string, title: string, mode: 'store' | 'lock-only' = 'store'): Child {
  const env = { ...process.env, STORE_DIR: dir, STORE_TITLE: title, STORE_MODE: mode };
  const proc = spawn(process.execPath, [compiledChild(CHILD)], { env, stdio: 'pipe' });
  let out = '';
  let err = '';
  proc.stderr.setEncoding('utf8').on('data', (c: string) => (err += c));
  const report = new Promise<Child['report'] extends Promise<infer R> ? R : never>((resolve, reject) => {
    proc.stdout.setEncoding('utf8').on('data', (c: string) => {
      out += c;
      const line = out.split('\n')[0];
      if (out.includes('\n') && line) resolve(JSON.parse(line));
    });
    proc.on('close', () => reject(new Error(`the child exited without a report\n${out}\n${err}`)));
  });
  const exit = new Promise<number | null>((resolve) => proc.on('close', (code) => resolve(code)));
  const child = { proc, report, exit };
  children.push(child);
  return child;
}

function storeDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'openwork-lock-'));
  dirs.push(dir);
  return join(dir, 'db');
}

afterEach(async () => {
  for (const c of children.splice(0)) {
    c.proc.kill('SIGKILL');
    await c.exit;
  }
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('one process per PGlite directory (issue 13.5)', { timeout: 180_000 }, () => {
  it('a second process gets store_locked naming the holder; the first keeps every session', async () => {
    const dir = storeDir();
    const first = openInChild(dir, 'first');
    const ready = await first.report;
    expect(ready).toMatchObject({ ready: true });

    // Another process (this one) is refused, typed, and told who holds the directory.
    const second = pgliteStorage({ dataDir: dir });
    const refused = await second.migrate().then(
      () => null,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(StoreLockedError);
    expect(refused).toMatchObject({
      code: 'store_locked',
      details: { lockPath: join(dir, STORE_LOCK_FILE), holderPid: first.proc.pid, holderHostname: hostname() },
    });
    expect((refused as Error).message).toContain(`process ${first.proc.pid}`);
    expect((refused as Error).message).toContain('--database-url');
    await second.close();

    // So is a third real process.
    const third = openInChild(dir, 'third');
    expect(await third.report).toMatchObject({ error: { code: 'store_locked', details: { holderPid: first.proc.pid } } });
    expect(await third.exit).toBe(3);

    // The holder closes cleanly: the lock goes with it, and its session is all there.
    first.proc.stdin.end();
    expect(await first.exit).toBe(0);
    expect(existsSync(join(dir, STORE_LOCK_FILE))).toBe(false);
    const after = pgliteStorage({ dataDir: dir });
    try {
      await after.migrate();
      expect((await after.listSessions()).map((s) => [s.id, s.title])).toEqual([[ready.sessionId, 'first']]);
      expect(JSON.parse(readFileSync(join(dir, STORE_LOCK_FILE), 'utf8'))).toMatchObject({ pid: process.pid, hostname: hostname() });
    } finally {
      await after.close();
    }
    expect(existsSync(join(dir, STORE_LOCK_FILE))).toBe(false);
  });

  it('a lock left by a killed process is taken over', async () => {
    const dir = storeDir();
    mkdirSync(dir, { recursive: true });
    const holder = openInChild(dir, 'killed', 'lock-only');
    expect(await holder.report).toEqual({ ready: true });
    holder.proc.kill('SIGKILL');
    await holder.exit;
    // The dead holder's lock file is still there.
    expect(JSON.parse(readFileSync(join(dir, STORE_LOCK_FILE), 'utf8'))).toMatchObject({ pid: holder.proc.pid });

    const next = pgliteStorage({ dataDir: dir });
    try {
      await next.migrate();
      expect(JSON.parse(readFileSync(join(dir, STORE_LOCK_FILE), 'utf8'))).toMatchObject({ pid: process.pid });
    } finally {
      await next.close();
    }
    expect(existsSync(join(dir, STORE_LOCK_FILE))).toBe(false);
  });

  it('an unreadable lock file (being written this instant) is not taken over', async () => {
    const dir = storeDir();
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, STORE_LOCK_FILE), '');
    const storage = pgliteStorage({ dataDir: dir });
    await expect(storage.migrate()).rejects.toMatchObject({ code: 'store_locked', details: { lockPath: join(dir, STORE_LOCK_FILE) } });
    await storage.close();
    expect(readFileSync(join(dir, STORE_LOCK_FILE), 'utf8')).toBe('');
  });
});
