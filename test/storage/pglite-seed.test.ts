/**
 * The PGlite seed (issue 14.4): a new store loads a data directory that was initialised and migrated
 * at build time instead of running initdb. A store made from it must be exactly the store the
 * migrations make from scratch and keep its sessions across reopen.
 *
 * initdb is the cost here (3 s of CPU, 10-20 s at a loaded run's pace): the file runs it twice, for
 * the seed and for one store made from scratch (`seed: null`, in memory, default settings) that the
 * tests share, where each used to run its own (seven in all; docs/verification.md, "suite-time").
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadMigrations, type MigrationReport } from '../../src/storage/migrate.js';
import { PGLITE_DEFAULT_SETTINGS, PgliteDatabase, createPgliteSeed, pgliteStorage } from '../../src/storage/pglite.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';

/** A gzipped ustar archive of regular files, as PGlite's dumpDataDir writes one (name, bytes). */
function tarball(files: Array<[string, string]>): Buffer {
  const blocks: Buffer[] = [];
  for (const [name, text] of files) {
    const data = Buffer.from(text);
    const header = Buffer.alloc(512);
    header.write(name, 0, 100);
    header.write('0000644\0', 100);
    header.write(`${data.length.toString(8).padStart(11, '0')}\0`, 124);
    header.write(`${Math.floor(Date.now() / 1000).toString(8).padStart(11, '0')}\0`, 136);
    header.write('0', 156);
    header.write('ustar\0' + '00', 257);
    header.fill(' ', 148, 156);
    let sum = 0;
    for (const b of header) sum += b;
    header.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
    blocks.push(header, data, Buffer.alloc((512 - (data.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return gzipSync(Buffer.concat(blocks));
}

/** Everything the migrations define in `public`, as sorted text lines, to compare two stores. */
async function schemaDump(storage: SqlSessionStorage): Promise<string[]> {
  const queries = [
    `SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' null=' || is_nullable
       || ' default=' || coalesce(column_default, '') || ' pos=' || ordinal_position AS line
       FROM information_schema.columns WHERE table_schema = 'public'`,
    `SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) AS line
       FROM pg_constraint WHERE connamespace = 'public'::regnamespace`,
    `SELECT 'index ' || indexname || ' ' || indexdef AS line FROM pg_indexes WHERE schemaname = 'public'`,
    `SELECT 'trigger ' || tgrelid::regclass::text || ' ' || tgname || ' ' || pg_get_triggerdef(oid) AS line
       FROM pg_trigger WHERE NOT tgisinternal`,
    `SELECT 'function ' || p.proname || ' ' || pg_get_functiondef(p.oid) AS line
       FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace`,
    `SELECT 'relation ' || relname || ' ' || relkind::text AS line FROM pg_class WHERE relnamespace = 'public'::regnamespace`,
    `SELECT 'type ' || typname || ' ' || typtype::text AS line FROM pg_type WHERE typnamespace = 'public'::regnamespace`,
    `SELECT 'extension ' || extname || ' ' || extversion AS line FROM pg_extension`,
    `SELECT 'migration ' || id || ' ' || checksum AS line FROM openwork_migrations`,
  ];
  const lines: string[] = [];
  for (const text of queries) {
    const { rows } = await storage.db.query<{ line: string }>(text);
    lines.push(...rows.map((r) => r.line));
  }
  return lines.sort();
}

/** A seed made by this file's code, and where it lives. */
let dir: string;
let seedPath: string;
/**
 * One store made from scratch: initdb, in memory, the default settings, every migration applied by
 * its first migrate (`scratchReport`). The schema comparison, the default settings and the dump test
 * read it; the dump test drops the table it adds.
 */
let fromScratch: SqlSessionStorage;
let scratchReport: MigrationReport;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'openwork-seed-'));
  seedPath = join(dir, 'seed.tar.gz');
  writeFileSync(seedPath, await createPgliteSeed());
  fromScratch = pgliteStorage({ seed: null });
  scratchReport = await fromScratch.migrate();
}, 120_000);

afterAll(async () => {
  await fromScratch?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('PGlite seed', () => {
  it('a new directory store loaded from the seed has exactly the schema the migrations make from scratch', async () => {
    const fromSeed = pgliteStorage({ dataDir: join(dir, 'db-schema'), seed: seedPath });
    try {
      const seedReport = await fromSeed.migrate();
      const all = (await loadMigrations()).map((m) => m.id);
      // The seed really was loaded: its migrations were already applied when the store opened.
      expect(scratchReport).toEqual({ applied: all, alreadyApplied: [] });
      expect(seedReport).toEqual({ applied: [], alreadyApplied: all });
      const [a, b] = [await schemaDump(fromScratch), await schemaDump(fromSeed)];
      expect(a.length).toBeGreaterThan(100);
      expect(b).toEqual(a);
    } finally {
      await fromSeed.close();
    }
  }, 120_000);

  it('a store from the seed keeps its sessions across reopen, which opens the directory and not the seed again', async () => {
    const dataDir = join(dir, 'db-reopen');
    const first = pgliteStorage({ dataDir, seed: seedPath });
    try {
      await first.migrate();
      await first.createSession({ id: 'seeded-session', workingDirectory: '/work' });
    } finally {
      await first.close();
    }
    const second = pgliteStorage({ dataDir, seed: seedPath });
    try {
      expect(await second.migrate()).toMatchObject({ applied: [] });
      expect((await second.getSession('seeded-session'))?.workingDirectory).toBe('/work');
    } finally {
      await second.close();
    }
  }, 120_000);

  it('a directory that a killed first start left without PG_VERSION gets the seed again and opens as a new store', async () => {
    const dataDir = join(dir, 'db-half-written');
    // What a process killed while it wrote the seed leaves: some files, never PG_VERSION (written last).
    mkdirSync(join(dataDir, 'base', '5'), { recursive: true });
    writeFileSync(join(dataDir, 'base', '5', '1259'), 'torn');
    writeFileSync(join(dataDir, 'postgresql.conf'), '');
    const storage = pgliteStorage({ dataDir, seed: seedPath });
    try {
      const all = (await loadMigrations()).map((m) => m.id);
      expect(await storage.migrate()).toEqual({ applied: [], alreadyApplied: all });
      await storage.createSession({ id: 'after-torn-seed', workingDirectory: '/work' });
      expect((await storage.getSession('after-torn-seed'))?.workingDirectory).toBe('/work');
    } finally {
      await storage.close();
    }
    expect(existsSync(join(dataDir, 'PG_VERSION'))).toBe(true);
  }, 120_000);

  it('a seed whose entries point outside the data directory is refused (persistence_error) and writes nothing there', async () => {
    const bad = join(dir, 'bad-seed.tar.gz');
    writeFileSync(bad, tarball([['PG_VERSION', '18\n'], ['base/ok', 'fine'], ['../escaped', 'outside']]));
    const dataDir = join(dir, 'db-bad-seed');
    const storage = pgliteStorage({ dataDir, seed: bad });
    try {
      await expect(storage.migrate()).rejects.toMatchObject({ code: 'persistence_error' });
    } finally {
      await storage.close().catch(() => undefined);
    }
    expect(existsSync(join(dir, 'escaped'))).toBe(false);
    // Never taken for a store: PG_VERSION, written last, is not there.
    expect(readdirSync(dataDir)).not.toContain('PG_VERSION');
  }, 120_000);

  it('an in-memory store starts from the seed too', async () => {
    const storage = pgliteStorage({ seed: seedPath });
    try {
      const all = (await loadMigrations()).map((m) => m.id);
      expect(await storage.migrate()).toEqual({ applied: [], alreadyApplied: all });
      await storage.createSession({ id: 'in-memory', workingDirectory: '/work' });
      expect((await storage.listSessions()).map((s) => s.id)).toEqual(['in-memory']);
    } finally {
      await storage.close();
    }
  }, 120_000);
});

describe('PGlite settings', () => {
  it("run with the memory-trimming defaults, and settings given by the host extend them and PGlite's own start parameters", async () => {
    // The settings are start parameters, the same whether the store began with initdb (the shared
    // store) or from a seed (what a built package does).
    const plain = fromScratch;
    const tuned = pgliteStorage({ seed: seedPath, postgresSettings: { work_mem: '2MB' } });
    try {
      await tuned.migrate();
      const show = async (s: SqlSessionStorage, name: string) => (await s.db.query<Record<string, string>>(`SHOW ${name}`)).rows[0]![name];
      expect(await show(plain, 'shared_buffers')).toBe(PGLITE_DEFAULT_SETTINGS.shared_buffers);
      expect(await show(tuned, 'shared_buffers')).toBe(PGLITE_DEFAULT_SETTINGS.shared_buffers);
      expect(await show(tuned, 'work_mem')).toBe('2MB');
      // PGlite's own defaults are still there (they would be dropped if the settings replaced them).
      expect(await show(tuned, 'search_path')).toBe('public');
      expect(await show(tuned, 'max_parallel_workers')).toBe('0');
      await tuned.createSession({ id: 'tuned', workingDirectory: '/work' });
      expect((await tuned.getSession('tuned'))?.id).toBe('tuned');
    } finally {
      await tuned.close();
    }
  }, 120_000);

  it('memory alone runs without a WAL flush at commit or page images; a directory keeps both (acknowledged means durable there)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ow-pglite-settings-'));
    // Memory from initdb (the shared store), the directory from the seed (as a built package starts
    // one): the seed must not carry memory's settings into a directory.
    const memory = fromScratch;
    const disk = pgliteStorage({ seed: seedPath, dataDir: join(dir, 'db') });
    try {
      const show = async (s: SqlSessionStorage, name: string) => (await s.db.query<Record<string, string>>(`SHOW ${name}`)).rows[0]![name];
      expect([await show(memory, 'synchronous_commit'), await show(memory, 'full_page_writes')]).toEqual(['off', 'off']);
      expect([await show(disk, 'synchronous_commit'), await show(disk, 'full_page_writes')]).toEqual(['on', 'on']);
    } finally {
      await disk.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it('a dump of a store in memory holds its last commit, though that commit never flushed its WAL', async () => {
    const source = fromScratch.db;
    if (!(source instanceof PgliteDatabase)) throw new Error('the shared store is not a PGlite database');
    let copy: PgliteDatabase | undefined;
    try {
      await source.query('CREATE TABLE dumped (n int)');
      for (let n = 1; n <= 3; n += 1) await source.query('INSERT INTO dumped VALUES ($1)', [n]);
      const dir = mkdtempSync(join(tmpdir(), 'ow-pglite-dump-'));
      const tarball = join(dir, 'dump.tar.gz');
      writeFileSync(tarball, new Uint8Array(await (await source.dumpDataDir()).arrayBuffer()));
      copy = new PgliteDatabase({ seed: tarball });
      expect((await copy.query<{ n: number }>('SELECT n FROM dumped ORDER BY n')).rows).toEqual([{ n: 1 }, { n: 2 }, { n: 3 }]);
      rmSync(dir, { recursive: true, force: true });
    } finally {
      await source.query('DROP TABLE IF EXISTS dumped');
      await copy?.close();
    }
  }, 120_000);
});
