/**
 * Integrity round 8 (branch integ8): a PGlite store path that never answers. `createCore` with a
 * `dataDir` on a kernel interface or with a FIFO among the store's files hung or failed late:
 *
 * - a new directory below `/proc`: Node's recursive `mkdirSync` looped for ever (mkdir answers
 *   ENOENT there while the parent exists, and Node retries the parent), the whole process frozen;
 * - a FIFO at the store's lock file (`openwork.lock`): reading the holder blocked for ever;
 * - a FIFO at `PG_VERSION`: PGlite failed after seconds with `migration_error` and `ErrnoError`,
 *   naming no path.
 *
 * Each now refuses at once with `persistence_error` naming the path (and the file system or the
 * entry). The opens run in a child process bounded from here, since the hangs were synchronous.
 * A FIFO or a device in the directory's place, and a read-only file system, were already refused
 * at once (`open-errors.test.ts`); the FIFO and `/dev/null` are checked here again with the rest.
 */
import { spawn } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compiledChild } from '../support/compiled-child.js';

const CHILD = join(import.meta.dirname, 'store-path-child.ts');
/** The child's bound: a refusal takes milliseconds, the child's boot about a second, loaded a few. */
const CHILD_BOUND_MS = 40_000;
/** "At once": a refusal that comes after this was found late (PGlite's failed start took 4.5 s). */
const AT_ONCE_MS = 2_000;

interface Report {
  path: string;
  ms: number;
  opened?: true;
  error?: { code?: string; message: string; details?: Record<string, unknown> };
}

const root = mkdtempSync(join(tmpdir(), 'openwork-store-path-'));
beforeAll(() => void compiledChild(CHILD));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** Opens each path in a child, in order; the reports it gave before it was stopped at the bound. */
function openInChild(paths: string[]): Promise<{ reports: Report[]; timedOut: boolean; stderr: string }> {
  const proc = spawn(process.execPath, [compiledChild(CHILD)], { env: { ...process.env, STORE_PATHS: JSON.stringify(paths) }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let stderr = '';
  proc.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
  proc.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    proc.kill('SIGKILL');
  }, CHILD_BOUND_MS);
  return new Promise((resolve) => {
    proc.on('close', () => {
      clearTimeout(timer);
      const reports = out.split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l) as Report);
      resolve({ reports, timedOut, stderr });
    });
  });
}

describe('a store path that never answers (integ8)', { timeout: CHILD_BOUND_MS + 20_000 }, () => {
  it('kernel interfaces, FIFOs and a device: persistence_error at once, naming the path', async () => {
    const newInProc = `/proc/openwork-integ8-${process.pid}`;
    const fifo = join(root, 'fifo');
    execFileSync('mkfifo', [fifo]);
    const lockFifo = join(root, 'lock-fifo');
    mkdirSync(lockFifo);
    execFileSync('mkfifo', [join(lockFifo, 'openwork.lock')]);
    const versionFifo = join(root, 'version-fifo');
    mkdirSync(versionFifo);
    execFileSync('mkfifo', [join(versionFifo, 'PG_VERSION')]);
    const paths = [newInProc, '/proc/self', `/sys/kernel/openwork-integ8-${process.pid}`, lockFifo, versionFifo, fifo, '/dev/null'];
    const { reports, timedOut, stderr } = await openInChild(paths);
    // Every path answered (a hang leaves the rest unreported and the child killed at the bound).
    expect({ answered: reports.map((r) => r.path), timedOut }, stderr).toEqual({ answered: paths, timedOut: false });
    const by = new Map(reports.map((r) => [r.path, r]));
    for (const report of reports) {
      expect(report.opened, report.path).toBeUndefined();
      expect(report.error?.code, `${report.path}: ${report.error?.message}`).toBe('persistence_error');
      expect(report.error?.message, report.path).toContain(report.path);
      expect(report.error?.details?.dataDir, report.path).toBe(report.path);
      expect(report.ms, `${report.path} answered after ${report.ms} ms`).toBeLessThan(AT_ONCE_MS);
    }
    expect(by.get(newInProc)!.error).toMatchObject({ details: { fileSystem: 'proc' } });
    expect(by.get('/proc/self')!.error).toMatchObject({ details: { fileSystem: 'proc' } });
    expect(by.get(paths[2]!)!.error).toMatchObject({ details: { fileSystem: 'sysfs' } });
    expect(by.get(lockFifo)!.error).toMatchObject({ details: { entry: join(lockFifo, 'openwork.lock') } });
    expect(by.get(lockFifo)!.error!.message).toContain('"openwork.lock", which is a FIFO');
    expect(by.get(versionFifo)!.error).toMatchObject({ details: { entry: join(versionFifo, 'PG_VERSION') } });
    expect(by.get(fifo)!.error).toMatchObject({ details: { errno: 'EEXIST' } });
    expect(by.get('/dev/null')!.error).toMatchObject({ details: { errno: 'EEXIST' } });
    // Nothing was made on the kernel's file systems.
    expect(existsSync(newInProc)).toBe(false);
  });
});
