/**
 * @module storage/pglite-seed-files
 * Writes the PGlite seed (a gzipped tarball of a migrated data directory, pglite.ts) into a new
 * store's directory with Node's own zlib and file system, as the first step of PGlite's start (its
 * file system's `init`), so that PGlite then opens an existing directory.
 *
 * Why not PGlite's `loadDataDir`: it inflates the 40 MB of the tarball and unpacks it on the main
 * thread and writes every file through the Emscripten file system, which cost a new store about 2 s
 * of main-thread CPU more than opening an existing one (docs/benchmarks.md, "The store ready
 * sooner"). Here zlib inflates it in one native call and the files are written with plain
 * synchronous writes: about a quarter of that. (The asynchronous zlib and file system, measured too,
 * cost the main thread more than this in callbacks and buffer copies, for 1,000 small files.)
 *
 * A store half written by a killed process is never taken for a store: `PG_VERSION`, the file by
 * which both PGlite and pglite.ts tell an existing data directory, is written last, and a directory
 * without it gets the seed again, over whatever the first attempt left.
 */
import type { PGlite } from '@electric-sql/pglite';
import { NodeFS } from '@electric-sql/pglite/nodefs';
import { mkdirSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve, isAbsolute } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { OpenworkError } from '../errors.js';

const BLOCK = 512;

/** One member of the tarball: a directory, or a file with its bytes and modification time. */
interface Member {
  path: string;
  directory: boolean;
  data: Uint8Array;
  mtimeSeconds: number;
}

function field(header: Uint8Array, start: number, length: number): string {
  const bytes = header.subarray(start, start + length);
  const end = bytes.indexOf(0);
  return Buffer.from(end < 0 ? bytes : bytes.subarray(0, end)).toString('utf8');
}

function octal(header: Uint8Array, start: number, length: number): number {
  const text = field(header, start, length).trim();
  return text === '' ? 0 : parseInt(text, 8);
}

/** The members of a ustar archive (what PGlite's `dumpDataDir` writes): files and directories only. */
function* members(tar: Uint8Array): Generator<Member> {
  for (let at = 0; at + BLOCK <= tar.length; ) {
    const header = tar.subarray(at, at + BLOCK);
    if (header.every((b) => b === 0)) return;
    const name = field(header, 0, 100);
    const prefix = field(header, 345, 155);
    const size = octal(header, 124, 12);
    const type = String.fromCharCode(header[156]!);
    const path = prefix ? `${prefix}/${name}` : name;
    const data = tar.subarray(at + BLOCK, at + BLOCK + size);
    at += BLOCK + Math.ceil(size / BLOCK) * BLOCK;
    if (type === '5') yield { path, directory: true, data, mtimeSeconds: 0 };
    else if (type === '0' || type === '\0') yield { path, directory: false, data, mtimeSeconds: octal(header, 136, 12) };
    else throw new OpenworkError('persistence_error', `the PGlite seed holds an entry of type '${type}' (${path}); only files and directories are expected`);
  }
}

/** `path` of a member inside `dataDir`; a member that would land outside it is refused. */
function inside(dataDir: string, path: string): string {
  const target = resolve(dataDir, path.replace(/^\/+/, ''));
  const rel = relative(dataDir, target);
  if (rel.startsWith('..') || isAbsolute(rel)) throw new OpenworkError('persistence_error', `the PGlite seed holds a path outside the data directory: ${path}`);
  return target;
}

/**
 * Writes the seed at `seedPath` into `dataDir` (which exists and has no `PG_VERSION`), files and
 * their modification times as PGlite's `loadDataDir` writes them, `PG_VERSION` last.
 */
export function writeSeedInto(seedPath: string, dataDir: string): void {
  const tar = gunzipSync(readFileSync(seedPath));
  const root = resolve(dataDir);
  let version: Member | null = null;
  for (const member of members(tar)) {
    const target = inside(root, member.path);
    if (target === root) continue;
    if (member.directory) mkdirSync(target, { recursive: true });
    else if (target === join(root, 'PG_VERSION')) version = member;
    else writeMember(target, member);
  }
  if (!version) throw new OpenworkError('persistence_error', `the PGlite seed ${seedPath} has no PG_VERSION`);
  writeMember(join(root, 'PG_VERSION'), version);
}

function writeMember(target: string, member: Member): void {
  mkdirSync(dirname(target), { recursive: true });
  writeFileSync(target, member.data);
  utimesSync(target, member.mtimeSeconds, member.mtimeSeconds);
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
    // PGlite calls this from its constructor: the writes wait for the next turn of the event loop,
    // so that whoever constructed the store (the CLI, about to show its prompt) goes on first.
    await new Promise((resolve) => setImmediate(resolve));
    writeSeedInto(this.seedPath, this.rootDir);
    return super.init(pg, options);
  }
}
