/**
 * A store that cannot be opened answers a typed error through `createCore` (branch trust-typed):
 * never a bare Node error. PGlite's directory: a file in its place (EEXIST), a file on its path
 * (ENOTDIR), a read-only file system (EROFS) and one with no inode left (ENOSPC), both on a small
 * tmpfs mounted here (root only; the suite runs as root), and another program's directory, are
 * `persistence_error` naming the directory and the cause; a store migrated by a newer version is
 * `migration_error` naming the migrations it does not know. Postgres: a connection string that is
 * not a URL is `configuration_invalid` (and does not quote it: it may hold a password), a server
 * that does not answer is `persistence_error`.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createCore } from '../../src/core.js';
import { InputError, OpenworkError, StorageError } from '../../src/errors.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { pgliteStorage } from '../../src/storage/pglite.js';
import { postgresStorage } from '../../src/storage/postgres.js';

const root = mkdtempSync(join(tmpdir(), 'openwork-open-errors-'));
const mounts: string[] = [];
afterAll(() => {
  for (const mount of mounts) spawnSync('umount', ['-l', mount]);
  rmSync(root, { recursive: true, force: true });
});

/** What `createCore` on a PGlite store in `dataDir` rejects with. */
async function openFails(dataDir: string): Promise<unknown> {
  const storage = pgliteStorage({ dataDir });
  try {
    const core = await createCore({ storage, model: scriptedModel([]), worldState: false });
    await core.shutdown();
    return null;
  } catch (error) {
    await storage.close().catch(() => undefined);
    return error;
  }
}

/** A tmpfs mounted at a new directory with `options`. */
function tmpfs(options: string): string {
  const mount = mkdtempSync(join(root, 'mnt-'));
  const result = spawnSync('mount', ['-t', 'tmpfs', '-o', options, 'tmpfs', mount], { encoding: 'utf8' });
  // The suite runs as root: a test that cannot mount says so instead of passing.
  if (result.status !== 0) throw new Error(`cannot mount a tmpfs (${options}): ${result.stderr}`);
  mounts.push(mount);
  return mount;
}

describe('an embedded store that cannot be opened', { timeout: 120_000 }, () => {
  it('a file where the directory should be: persistence_error naming the directory and EEXIST; the file is untouched', async () => {
    const dataDir = join(root, 'a-file');
    writeFileSync(dataDir, 'not a store');
    const error = await openFails(dataDir);
    expect(error).toBeInstanceOf(StorageError);
    expect(error).toMatchObject({ code: 'persistence_error', details: { dataDir, errno: 'EEXIST', syscall: 'mkdir' } });
    expect((error as Error).message).toContain(dataDir);
    expect(readFileSync(dataDir, 'utf8')).toBe('not a store');
  });

  it('a file on the path: persistence_error with ENOTDIR', async () => {
    const file = join(root, 'in-the-way');
    writeFileSync(file, '');
    const dataDir = join(file, 'db');
    const error = await openFails(dataDir);
    expect(error).toBeInstanceOf(StorageError);
    expect(error).toMatchObject({ code: 'persistence_error', details: { dataDir, errno: 'ENOTDIR' } });
  });

  it('a read-only file system and one without a free inode (ENOSPC): persistence_error naming the cause', async () => {
    const readOnly = join(tmpfs('ro,size=1m'), 'db');
    // Node's recursive mkdir reports a read-only file system as ENOENT (it retries the parent).
    const refused = await openFails(readOnly);
    expect(refused).toBeInstanceOf(StorageError);
    expect(refused).toMatchObject({ code: 'persistence_error', details: { dataDir: readOnly, errno: expect.stringMatching(/^E[A-Z]+$/), syscall: 'mkdir' } });
    expect((refused as Error).message).toContain(`${readOnly} cannot be created`);
    const full = join(tmpfs('size=1m,nr_inodes=1'), 'db');
    const error = await openFails(full);
    expect(error).toBeInstanceOf(StorageError);
    expect(error).toMatchObject({ code: 'persistence_error', details: { dataDir: full, errno: 'ENOSPC' } });
    expect((error as Error).message).toMatch(/no space left on device/i);
  });

  it("another program's directory (files, no PG_VERSION): persistence_error, and nothing is written into it", async () => {
    const dataDir = join(root, 'photos');
    mkdirSync(dataDir);
    writeFileSync(join(dataDir, 'holiday.jpg'), 'jpeg');
    const error = await openFails(dataDir);
    expect(error).toBeInstanceOf(StorageError);
    expect(error).toMatchObject({ code: 'persistence_error', details: { dataDir } });
    expect((error as Error).message).toContain('"holiday.jpg"');
    expect(readdirSync(dataDir)).toEqual(['holiday.jpg']);
  });

  it('a store migrated by a newer version: migration_error naming the unknown migration, and the store is left as it was', async () => {
    const dataDir = join(root, 'newer');
    const storage = pgliteStorage({ dataDir });
    await storage.migrate();
    await storage.db.query("INSERT INTO openwork_migrations (id, checksum) VALUES ('9999_from_the_future', 'x')");
    await storage.close();
    const error = await openFails(dataDir);
    expect(error).toBeInstanceOf(OpenworkError);
    expect(error).toMatchObject({ code: 'migration_error', details: { unknownMigrations: ['9999_from_the_future'] } });
    expect((error as Error).message).toContain('9999_from_the_future');
    // The refused open released the directory: it opens again once the row is gone.
    const again = pgliteStorage({ dataDir });
    await again.db.query("DELETE FROM openwork_migrations WHERE id = '9999_from_the_future'");
    const core = await createCore({ storage: again, model: scriptedModel([]), worldState: false });
    await core.shutdown();
    expect(existsSync(join(dataDir, 'PG_VERSION'))).toBe(true);
  });
});

describe('a Postgres store that cannot be opened', { timeout: 60_000 }, () => {
  it('a connection string that is not a URL is configuration_invalid and does not quote the string', () => {
    for (const connectionString of ['not a url secret-password', 'postgres://user:secret-password@[bad/db']) {
      let thrown: unknown;
      try {
        postgresStorage({ connectionString });
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(InputError);
      expect(thrown).toMatchObject({ code: 'configuration_invalid' });
      expect((thrown as Error).message).not.toContain('secret-password');
    }
    // The forms pg reads stay accepted: URLs with a scheme and a socket directory.
    for (const connectionString of ['postgres://u:p@127.0.0.1:1/db', 'postgresql://u@/db', 'socket:/var/run/postgresql?db=x', '/var/run/postgresql db']) {
      expect(() => postgresStorage({ connectionString })).not.toThrow();
    }
  });

  it('a server that refuses connections: createCore answers persistence_error', async () => {
    const storage = postgresStorage({ connectionString: 'postgres://u:p@127.0.0.1:1/db' });
    const error = await createCore({ storage, model: scriptedModel([]), worldState: false }).catch((e: unknown) => e);
    await storage.close().catch(() => undefined);
    expect(error).toBeInstanceOf(StorageError);
    expect(error).toMatchObject({ code: 'persistence_error' });
    expect((error as Error).message).toContain('ECONNREFUSED');
  });
});
