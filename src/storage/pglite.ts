/**
 * @module storage/pglite
 * The embedded default: PGlite, a real Postgres compiled to WebAssembly. With pglite-protocol.ts (how
 * statements reach it), pglite-array-types.ts and pglite-seed-files.ts, the only module that imports it.
 *
 * What it guarantees: PGlite runs Postgres with `fsync` off. In a directory, every committed write has
 * reached the operating system, so it survives a killed process, but not a power cut or a kernel crash.
 * In memory (no `dataDir`), nothing survives the process. One instance serialises every query.
 * A directory belongs to one process at a time: a second opener gets `store_locked` (store-lock.ts).
 *
 * Start-up: a new store (a new directory, or memory) starts from the seed, a data directory that
 * `npm run build` initialised and migrated once and shipped as `dist/storage/pglite-seed.tar.gz`;
 * a new directory gets its files written before PGlite starts (pglite-seed-files.ts), memory loads
 * it through PGlite's `loadDataDir`. Either skips PGlite's `initdb` (most of a new store's start-up,
 * see docs/benchmarks.md). The migrations still run on every open as usual, so a seed older than the code is brought up to date
 * by the migration table like any other store. Without a seed (running from `src/`), initdb runs.
 */
import { PGlite } from '@electric-sql/pglite';
import { existsSync, mkdirSync, readdirSync, readFileSync, statfsSync, statSync, type Stats } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { OpenworkError, StorageError, errorMessage } from '../errors.js';
import type { NamedStatement, SqlDatabase, SqlExecutor, Row } from './sql.js';
import { SqlSessionStorage, type StorageOptions } from './sql-storage.js';
import { acquireStoreLock, STORE_LOCK_FILE, type StoreLock } from './store-lock.js';
import { migrate } from './migrate.js';
import { PgliteProtocol } from './pglite-protocol.js';
import { installBuiltinArrayTypes } from './pglite-array-types.js';
import { SeededNodeFS } from './pglite-seed-files.js';

/**
 * PGlite, minus the catalog query its start ends with: the array types come from a table
 * (pglite-array-types.ts says why), so the store answers its first statement sooner. PGlite calls
 * this method once at the end of its start; `refreshArrayTypes()` (force) still asks the catalog.
 */
class StorePGlite extends PGlite {
  override async _initArrayTypes(options: { force?: boolean } = {}): Promise<void> {
    if (options.force) return super._initArrayTypes(options);
    installBuiltinArrayTypes(this);
  }
}

/** Where the build puts the seed: beside this module in `dist/storage/`. */
export const SHIPPED_PGLITE_SEED = fileURLToPath(new URL('./pglite-seed.tar.gz', import.meta.url));

export interface PgliteStorageOptions extends StorageOptions {
  /** A directory for the database files; omitted means in memory. */
  dataDir?: string;
  /** Extra `-c name=value` Postgres settings; defaults keep memory use down (see docs/benchmarks.md). */
  postgresSettings?: Record<string, string>;
  /**
   * A gzipped data-directory tarball (`createPgliteSeed`) that a new store starts from instead of
   * running initdb; `null` always runs initdb. Default: the seed shipped in `dist/`, when present.
   */
  seed?: string | null;
}

/**
 * Settings that trim PGlite's memory without changing semantics (measured in docs/benchmarks.md).
 * PGlite's own configuration keeps Postgres's 128 MB of shared buffers, all of it inside the WASM
 * heap and touched as the cache fills; a session store's working set is far smaller, and a page that
 * falls out of 16 MB is read back from the operating system's cache. That takes about 140 MB off the
 * peak RSS and some start-up time (zeroing the buffers).
 */
export const PGLITE_DEFAULT_SETTINGS: Record<string, string> = { shared_buffers: '16MB' };

/**
 * Settings for a store in memory only, where nothing outlives the process: the WAL exists there for
 * nothing but crash recovery, which memory never does. `synchronous_commit=off` lets a commit return
 * without writing its WAL out of the WAL buffers (into memory files that no one will replay), and
 * `full_page_writes=off` drops the page images written after each checkpoint against torn pages on
 * a crash. Within the process nothing changes: a commit is visible at once, as before. A directory
 * keeps both on: there, "acknowledged means durable" (against a killed process) rests on the commit's
 * WAL reaching the OS before the statement returns. (docs/decisions.md, "PGlite in memory: no WAL
 * flush at commit".)
 */
export const PGLITE_MEMORY_SETTINGS: Record<string, string> = { synchronous_commit: 'off', full_page_writes: 'off' };

export class PgliteDatabase implements SqlDatabase {
  readonly kind = 'pglite' as const;
  // Private, so that the published declarations never name a PGlite type (its own declarations
  // need Emscripten's types, which a host checking library types with skipLibCheck false lacks).
  private readonly db: PGlite;
  /** Every statement goes through the extended protocol, named ones prepared once (pglite-protocol.ts). */
  private readonly protocol: PgliteProtocol;

  /**
   * The data directory as a gzipped tarball (the seed of `createPgliteSeed`). A CHECKPOINT first:
   * in memory a commit's WAL may still be in the WAL buffers (`PGLITE_MEMORY_SETTINGS`), and the
   * tarball holds only files; after it every committed page is in the files, so a store started from
   * the tarball has every commit and no WAL to replay.
   */
  async dumpDataDir(): Promise<Blob> {
    await this.protocol.query('CHECKPOINT');
    return this.db.dumpDataDir('gzip') as Promise<Blob>;
  }
  /** The directory's lock (issue 13.5); none in memory. */
  private readonly lock: StoreLock | null;

  constructor(options: PgliteStorageOptions) {
    // Before PGlite touches the directory: a second process would overwrite this one's pages.
    this.lock = options.dataDir ? openDataDir(options.dataDir) : null;
    const settings = { ...PGLITE_DEFAULT_SETTINGS, ...(options.dataDir ? {} : PGLITE_MEMORY_SETTINGS), ...options.postgresSettings };
    const extra = Object.entries(settings).flatMap(([k, v]) => ['-c', `${k}=${v}`]);
    // PGlite's start parameters replace its defaults (single-user mode and friends), so extend them.
    const startParams = [...PGlite.defaultStartParams, ...extra];
    try {
      const seed = seedFor(options);
      // A new directory gets the seed's files as PGlite's start begins (pglite-seed-files.ts says
      // why); memory has no directory to write, so PGlite loads the tarball itself.
      this.db = new StorePGlite({
        ...(options.dataDir ? (seed ? { fs: new SeededNodeFS(options.dataDir, seed) } : { dataDir: options.dataDir }) : {}),
        ...(extra.length > 0 ? { startParams } : {}),
        ...(seed && !options.dataDir ? { loadDataDir: new Blob([readFileSync(seed)]) } : {}),
      });
    } catch (error) {
      this.lock?.release();
      if (error instanceof OpenworkError) throw error;
      throw new StorageError(`the embedded store${options.dataDir ? ` in ${options.dataDir}` : ''} cannot be started: ${errorMessage(error)}`, {
        cause: error,
        details: { ...(options.dataDir ? { dataDir: options.dataDir } : {}), ...errnoDetails(error) },
      });
    }
    // A failed start (a seed that cannot be written, a damaged directory) reaches the first statement,
    // which awaits the same promise; until then it must not count as an unhandled rejection.
    this.db.waitReady.catch(() => undefined);
    this.protocol = new PgliteProtocol(this.db);
  }

  /** How many named statements this database has prepared so far (a re-opened one starts at 0). */
  get preparedStatements(): number {
    return this.protocol.preparedCount;
  }

  query<R extends Row = Row>(text: string | NamedStatement, params?: readonly unknown[]) {
    return this.protocol.query<R>(text, params);
  }

  transaction<T>(fn: (tx: SqlExecutor) => Promise<T>): Promise<T> {
    return this.protocol.transaction(fn);
  }

  withConnection<T>(fn: (conn: SqlExecutor & { transaction: SqlDatabase['transaction'] }) => Promise<T>): Promise<T> {
    // A PGlite instance is one connection already.
    return fn({ query: (t, p) => this.query(t, p), transaction: (f) => this.transaction(f) });
  }

  async close(): Promise<void> {
    try {
      if (!this.db.closed) await this.db.close();
    } finally {
      this.lock?.release();
    }
  }
}

/**
 * What a PGlite data directory holds at its top level (Postgres 17's `initdb`, as PGlite writes it
 * and as the seed holds it), with the store's lock file and the lock files moved aside by a
 * takeover. A directory without `PG_VERSION` that holds only these is a new store, or one whose
 * seed a killed process left half written; anything else is another program's directory.
 */
const STORE_ENTRIES = new Set([
  'PG_VERSION', 'base', 'global', 'pg_commit_ts', 'pg_dynshmem', 'pg_hba.conf', 'pg_ident.conf', 'pg_logical',
  'pg_multixact', 'pg_notify', 'pg_replslot', 'pg_serial', 'pg_snapshots', 'pg_stat', 'pg_stat_tmp', 'pg_subtrans',
  'pg_tblspc', 'pg_twophase', 'pg_wal', 'pg_xact', 'postgresql.auto.conf', 'postgresql.conf', 'postmaster.opts',
  'postmaster.pid', STORE_LOCK_FILE,
]);

/** `errno` and `syscall` of a Node file system error, for `details`. */
function errnoDetails(error: unknown): Record<string, string> {
  const { code, syscall } = (error ?? {}) as { code?: unknown; syscall?: unknown };
  return { ...(typeof code === 'string' ? { errno: code } : {}), ...(typeof syscall === 'string' ? { syscall } : {}) };
}

/**
 * Creates the data directory if need be, refuses one that is another program's, and takes its lock
 * (store-lock.ts). A directory that cannot be created or locked (EACCES, ENOTDIR, EEXIST for a
 * file, ENOSPC, EROFS) is a `persistence_error` naming the directory and the cause, as is a
 * directory that holds files but no store: PGlite would write its own files among them.
 * `store_locked` stays `store_locked`.
 */
function openDataDir(dataDir: string): StoreLock {
  const refuse = (what: string, error?: unknown, more: Record<string, string> = {}): never => {
    throw new StorageError(`the embedded store's directory ${dataDir} ${what}${error === undefined ? '' : `: ${errorMessage(error)}`}`, {
      ...(error === undefined ? {} : { cause: error }),
      details: { dataDir, ...errnoDetails(error), ...more },
    });
  };
  let existing: string;
  try {
    existing = nearestExisting(dataDir);
  } catch (error) {
    return refuse('cannot be created', error);
  }
  // Before any mkdir (integ8): on a kernel interface a store never answers or never lasts.
  const kernel = kernelFileSystem(existing);
  if (kernel !== null) refuse(`is on the kernel's ${kernel} file system (${existing}), which holds no files of a store: give a directory on a disk`, undefined, { fileSystem: kernel });
  try {
    makeDirectories(dataDir, existing);
  } catch (error) {
    refuse('cannot be created', error);
  }
  let entries: string[] = [];
  try {
    entries = readdirSync(dataDir);
  } catch (error) {
    refuse('cannot be read', error);
  }
  // A FIFO, socket or device among the store's files (its PG_VERSION, its lock) would block the
  // first read of it for ever, or fail it late as a migration error (integ8).
  for (const name of entries) {
    const kind = specialKind(join(dataDir, name));
    if (kind !== null) refuse(`holds ${JSON.stringify(name)}, which is ${kind}, not a file or directory of a store`, undefined, { entry: join(dataDir, name) });
  }
  if (!entries.includes('PG_VERSION')) {
    const foreign = entries.filter((name) => !STORE_ENTRIES.has(name) && !name.startsWith(`${STORE_LOCK_FILE}.stale-`));
    if (foreign.length > 0) {
      refuse(`holds files but no store (no PG_VERSION; found ${foreign.slice(0, 5).map((n) => JSON.stringify(n)).join(', ')}${foreign.length > 5 ? ', ...' : ''}): give an empty or new directory`);
    }
  }
  try {
    return acquireStoreLock(dataDir);
  } catch (error) {
    if (error instanceof OpenworkError) throw error;
    return refuse('cannot be locked', error);
  }
}

/**
 * `statfs` magic numbers of the kernel's own interfaces: `/proc`, `/sys` and the like hold no
 * files a store could write (a recursive mkdir below `/proc` loops for ever in Node: `mkdir` answers
 * ENOENT there while the parent exists), and `mqueue` takes files that are message queues.
 */
const KERNEL_FILE_SYSTEMS = new Map<number, string>([
  [0x9fa0, 'proc'],
  [0x62656572, 'sysfs'],
  [0x1cd1, 'devpts'],
  [0x19800202, 'mqueue'],
  [0x27e0eb, 'cgroup'],
  [0x63677270, 'cgroup2'],
  [0x64626720, 'debugfs'],
  [0x74726163, 'tracefs'],
  [0x73636673, 'securityfs'],
  [0xcafe4a11, 'bpf'],
  [0x62656570, 'configfs'],
  [0x6165676c, 'pstore'],
  [0x42494e4d, 'binfmt_misc'],
  [0xde5e81e4, 'efivarfs'],
  [0x65735543, 'fusectl'],
  [0xf97cff8c, 'selinuxfs'],
  [0x6e736673, 'nsfs'],
]);

/** The kernel interface `path` is on (see `KERNEL_FILE_SYSTEMS`), or null. */
function kernelFileSystem(path: string): string | null {
  try {
    return KERNEL_FILE_SYSTEMS.get(Number(statfsSync(path).type)) ?? null;
  } catch {
    return null;
  }
}

/**
 * `path` itself, or its nearest ancestor that exists. Throws what `stat` answers other than ENOENT
 * (ENOTDIR for a file on the way, EACCES).
 */
function nearestExisting(path: string): string {
  for (let at = path; ; at = dirname(at)) {
    try {
      statSync(at);
      return at;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT' || dirname(at) === at) throw error;
    }
  }
}

/**
 * Creates `dataDir` and the missing directories above it, one `mkdir` each, from `existing` (its
 * nearest existing ancestor) down: Node's recursive mkdir retries a parent that exists for ever
 * where `mkdir` answers ENOENT (below `/proc`). A thing already there that is not a directory fails
 * as `mkdir` says (EEXIST).
 */
function makeDirectories(dataDir: string, existing: string): void {
  const missing: string[] = [];
  for (let at = dataDir; at !== existing; at = dirname(at)) missing.unshift(at);
  if (missing.length === 0 && !statSync(dataDir).isDirectory()) mkdirSync(dataDir);
  for (const dir of missing) {
    try {
      mkdirSync(dir);
    } catch (error) {
      // Made by another process meanwhile: a directory there is as good as ours.
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST' || !statSync(dir).isDirectory()) throw error;
    }
  }
}

/** What `path` is when it is neither a file nor a directory (following links), or null. */
function specialKind(path: string): string | null {
  let st: Stats;
  try {
    st = statSync(path);
  } catch {
    return null;
  }
  if (st.isFile() || st.isDirectory()) return null;
  if (st.isFIFO()) return 'a FIFO';
  if (st.isSocket()) return 'a socket';
  if (st.isCharacterDevice() || st.isBlockDevice()) return 'a device';
  return 'not a regular file';
}

/**
 * The seed's path when this open creates a new store and a seed is there, else null. An existing
 * directory (it has `PG_VERSION`) is opened as it is.
 */
function seedFor(options: PgliteStorageOptions): string | null {
  const path = options.seed === undefined ? SHIPPED_PGLITE_SEED : options.seed;
  if (path === null || !existsSync(path)) return null;
  if (options.dataDir && existsSync(join(options.dataDir, 'PG_VERSION'))) return null;
  return path;
}

/**
 * Builds a seed: a new in-memory PGlite store with every migration applied, dumped as a gzipped
 * tarball of its data directory. `scripts/build.mjs` writes it to `dist/storage/pglite-seed.tar.gz`.
 */
export async function createPgliteSeed(): Promise<Uint8Array> {
  const database = new PgliteDatabase({ seed: null });
  try {
    await migrate(database);
    const blob = await database.dumpDataDir();
    return new Uint8Array(await blob.arrayBuffer());
  } finally {
    await database.close();
  }
}

/**
 * Embedded storage, zero set-up. In memory unless `dataDir` is given.
 *
 * @example
 * const core = await createCore({ storage: pgliteStorage({ dataDir: '.openwork/db' }), model });
 */
export function pgliteStorage(options: PgliteStorageOptions = {}): SqlSessionStorage {
  // The data directory is the store itself: a tool that could write it could rewrite history.
  const dataDir = options.dataDir && !options.dataDir.includes('://') ? resolve(options.dataDir) : null;
  const protectedPaths = [...(options.protectedPaths ?? []), ...(dataDir ? [dataDir] : [])];
  return new SqlSessionStorage(() => new PgliteDatabase(options), { ...options, protectedPaths });
}
