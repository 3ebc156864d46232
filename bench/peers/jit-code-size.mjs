/**
 * How much optimised code V8's TurboFan makes over the peers scenario (branch perf-jit2): runs
 * `cpu-split.mjs` in a child under `--log-code` and sums the size of every TurboFan code object
 * (`*` in V8's log) by file, and lists the functions of the files named in BENCH_CODE_SIZE_FILES
 * (comma-separated parts of a path; default `turn-actors`). Unlike the compile times of
 * `jit-split.mjs` (wall time on the compiler threads, inflated by load), the sizes barely move with
 * the machine's load, so a before/after reads on a shared machine.
 *
 * `node bench/peers/jit-code-size.mjs [dist-dir]`; BENCH_PEERS_WARMUP and BENCH_PEERS_TURNS as for cpu-split.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const dist = process.argv[2];
const tmp = mkdtempSync(join(tmpdir(), 'openwork-jit-size-'));
const log = join(tmp, 'v8.log');
const child = spawnSync(process.execPath, ['--log-code', `--logfile=${log}`, '--no-logfile-per-isolate', join(here, 'cpu-split.mjs'), ...(dist ? [dist] : [])], {
  encoding: 'utf8',
  maxBuffer: 1 << 30,
});
if (child.status !== 0) throw new Error(`cpu-split failed: ${child.stderr}`);
const wanted = (process.env.BENCH_CODE_SIZE_FILES ?? 'turn-actors').split(',');
let total = 0;
let count = 0;
const byFile = new Map();
const listed = [];
for (const line of readFileSync(log, 'utf8').split('\n')) {
  if (!line.startsWith('code-creation,JS,') || !line.endsWith(',*')) continue;
  const p = line.split(',');
  const size = Number(p[5]);
  const name = p.slice(6, -2).join(',');
  total += size;
  count += 1;
  const file = (name.split(' ').pop() ?? '').replace(/:\d+:\d+$/, '').replace(/.*\/(node_modules\/[^/]+|dist)\//, '$1/');
  byFile.set(file, (byFile.get(file) ?? 0) + size);
  if (wanted.some((w) => name.includes(w))) listed.push(`${(size / 1024).toFixed(1).padStart(7)} kB  ${name.replace(/.*\/dist\//, 'dist/')}`);
}
rmSync(tmp, { recursive: true, force: true });
console.log(child.stdout.split('\n').filter((l) => /^(openwork|process|main thread)/.test(l)).join('\n'));
console.log(`TurboFan code objects over the whole run: ${count}, ${(total / 1024).toFixed(0)} kB`);
console.log('by file (kB):');
for (const [file, size] of [...byFile].sort((a, b) => b[1] - a[1]).slice(0, 15)) console.log(`  ${(size / 1024).toFixed(1).padStart(7)}  ${file}`);
console.log(`functions of ${wanted.join(', ')}:`);
for (const l of listed) console.log(`  ${l}`);
