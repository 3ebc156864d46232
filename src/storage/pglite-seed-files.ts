/**
 * @module storage/pglite-seed-files
 * Writes the PGlite seed (a gzipped tarball of a migrated data directory, pglite.ts) into a new
 * store's directory with Node's own zlib and file system, as the first step of PGlite's start (its
 * file system's `init`), so that PGlite then opens an existing directory.
 *
 * Why not PGlite's `loadDataDir`: it inflates the 40 MB of the tarball and unpacks it on the main
 * thread and writes every file through the Emscripten file system, which cost a new store about 2 s
 * of main-thread CPU more than opening an existing one (docs/benchmarks.md, "The store ready
 * sooner"). Here a worker thread inflates it in one native zlib call and writes the files with
 * plain synchronous writes, off the main thread, which meanwhile goes on (the CLI shows its prompt
 * and loads the runtime's modules). Measured on the main thread: the synchronous version cost about
 * 1 s of it, and the asynchronous zlib and `fs/promises` as much (callbacks and buffer copies for
 * about 1,000 files).
 *
 * A store half written by a killed process is never taken for a store: `PG_VERSION`, the file by
 * which both PGlite and pglite.ts tell an existing data directory, is written last, and a directory
 * without it gets the seed again, over whatever the first attempt left.
 */
import type { PGlite } from '@electric-sql/pglite';
import { NodeFS } from '@electric-sql/pglite/nodefs';
import { Worker } from 'node:worker_threads';
import { OpenworkError } from '../errors.js';

/**
 * Writes the seed at `seedPath` into `dataDir` (which exists and has no `PG_VERSION`), files and
 * their modification times as PGlite's `loadDataDir` writes them, `PG_VERSION` last. Runs in a
 * worker thread (`writeSeedInto`), so it is self-contained: it reaches Node only through `require`.
 */
function seedWriter({ seedPath, dataDir }: { seedPath: string; dataDir: string }): void {
  const fs = require('node:fs') as typeof import('node:fs');
  const path = require('node:path') as typeof import('node:path');
  const zlib = require('node:zlib') as typeof import('node:zlib');
  const tar = zlib.gunzipSync(fs.readFileSync(seedPath));
  const root = path.resolve(dataDir);
  const text = (at: number, length: number) => {
    const bytes = tar.subarray(at, at + length);
    const end = bytes.indexOf(0);
    return (end < 0 ? bytes : bytes.subarray(0, end)).toString('utf8');
  };
  const octal = (at: number, length: number) => parseInt(text(at, length).trim() || '0', 8);
  const write = (target: string, data: Uint8Array, mtime: number) => {
    fs.mkdirSync(path.dirname(target), { recursive: true });
    fs.writeFileSync(target, data);
    fs.utimesSync(target, mtime, mtime);
  };
  let version: { data: Uint8Array; mtime: number } | null = null;
  for (let at = 0; at + 512 <= tar.length; ) {
    if (tar.subarray(at, at + 512).every((b) => b === 0)) break;
    const prefix = text(at + 345, 155);
    const name = prefix ? `${prefix}/${text(at, 100)}` : text(at, 100);
    const size = octal(at + 124, 12);
    const mtime = octal(at + 136, 12);
    const type = String.fromCharCode(tar[at + 156]!);
    const data = tar.subarray(at + 512, at + 512 + size);
    at += 512 + Math.ceil(size / 512) * 512;
    const target = path.resolve(root, name.replace(/^\/+/, ''));
    const rel = path.relative(root, target);
    if (rel.startsWith('..') || path.isAbsolute(rel)) throw new Error(`the PGlite seed holds a path outside the data directory: ${name}`);
    if (target === root) continue;
    if (type === '5') fs.mkdirSync(target, { recursive: true });
    else if (type !== '0' && type !== '\0') throw new Error(`the PGlite seed holds an entry of type '${type}' (${name}); only files and directories are expected`);
    else if (target === path.join(root, 'PG_VERSION')) version = { data, mtime };
    else write(target, data, mtime);
  }
  if (!version) throw new Error(`the PGlite seed ${seedPath} has no PG_VERSION`);
  write(path.join(root, 'PG_VERSION'), version.data, version.mtime);
}

/** `seedWriter` in a worker thread; its failure is a `persistence_error`. */
export function writeSeedInto(seedPath: string, dataDir: string): Promise<void> {
  return new Promise((resolve, reject) => {
    // `__name`: tsx and esbuild's keepNames wrap functions in a helper that the worker lacks.
    const source = `var __name = (f) => f; (${seedWriter.toString()})(require('node:worker_threads').workerData)`;
    const worker = new Worker(source, { eval: true, workerData: { seedPath, dataDir } });
    worker.once('error', (error) => reject(new OpenworkError('persistence_error', error.message, { cause: error })));
    worker.once('exit', (code) => (code === 0 ? resolve() : reject(new OpenworkError('persistence_error', `writing the PGlite seed into ${dataDir} stopped (exit ${code})`))));
  });
}

/**
 * PGlite's Node file system for a new directory that starts from the seed: the seed's files are
 * written when PGlite initialises its file system, the first thing its start waits for, so the
 * constructor stays synchronous and a failure reaches the first statement as PGlite's start failing.
 */
export class SeededNodeFS extends NodeFS {
  constructor(
    dataDir: string,
    private readonly seedPath: string,
  ) {
    super(dataDir);
  }

  override async init(pg: PGlite, options: Parameters<NodeFS['init']>[1]): ReturnType<NodeFS['init']> {
    await writeSeedInto(this.seedPath, this.rootDir);
    return super.init(pg, options);
  }
}
