/**
 * What V8's compiler does during the peers scenario's serial phase (issue 14 point 2, branch perf-jit):
 * runs `cpu-split.mjs` in a child under `--trace-opt --trace-deopt --log-code` and prints, for the
 * measured turns only (cpu-split's BENCH_PHASE_MARKS), the TurboFan compiles and deoptimisations per
 * step, the concurrent compile time by file and by function (the time the compiler threads spent,
 * wall on those threads, so inflated on a loaded machine), the deopts by function and reason, and the
 * functions compiled more than once (a deopt loop shows there).
 *
 * `--ic`: instead, megamorphic inline-cache misses (`--log-ic`, new state N) per step, by site, from
 * two runs of BENCH_PEERS_TURNS 5 and 15 after the same warm-up, the difference divided by 100 steps:
 * a site whose misses each bring a map never seen before reads objects that get a V8 map of their own
 * (docs/benchmarks.md, perf-jit: `{ ...small, key }` on Node 20).
 *
 * `node bench/peers/jit-split.mjs [dist-dir] [--ic]` after `npm run build`; BENCH_PEERS_WARMUP and
 * BENCH_PEERS_TURNS as for cpu-split.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { K } from './scenario.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const icMode = args.includes('--ic');
const dist = args.find((a) => !a.startsWith('--'));
const tmp = mkdtempSync(join(tmpdir(), 'openwork-jit-split-'));

/** Runs cpu-split under the given V8 flags; returns its stdout and the V8 log's lines. */
function run(flags, env) {
  const log = join(tmp, `v8-${Math.random().toString(36).slice(2)}.log`);
  const child = spawnSync(process.execPath, [...flags, `--logfile=${log}`, '--no-logfile-per-isolate', join(here, 'cpu-split.mjs'), ...(dist ? [dist] : [])], {
    env: { ...process.env, ...env, BENCH_PHASE_MARKS: '1' },
    encoding: 'utf8',
    maxBuffer: 1 << 30,
  });
  if (child.status !== 0) throw new Error(`cpu-split failed: ${child.stderr}`);
  return { out: child.stdout.split('\n'), log: readFileSync(log, 'utf8').split('\n') };
}

/** Code objects by start address, and shared function infos by address, from a V8 log. */
function codeMap(lines) {
  const codes = [];
  const sfis = new Map();
  for (const line of lines) {
    if (!line.startsWith('code-creation,')) continue;
    const p = line.split(',');
    const start = parseInt(p[4], 16);
    const size = Number(p[5]);
    const name = p[1] === 'JS' ? p.slice(6, -2).join(',') : p[1];
    codes.push([start, start + size, name]);
    if (p[1] === 'JS') sfis.set(parseInt(p[p.length - 2], 16), name);
  }
  codes.sort((a, b) => a[0] - b[0]);
  const at = (pc) => {
    let lo = 0;
    let hi = codes.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (codes[mid][0] <= pc) lo = mid + 1;
      else hi = mid - 1;
    }
    return hi >= 0 && pc < codes[hi][1] ? codes[hi][2] : '?';
  };
  return { at, sfis };
}

const short = (name) => name.replace(/file:\/\/\S*?\/dist\//, 'dist/').replace(/\S*\/node_modules\//, 'node_modules/');
const fileOf = (name) => {
  const f = short(name.split(' ').pop() ?? '').replace(/:\d+:\d+$/, '');
  return f.startsWith('node_modules/') ? f.split('/').slice(0, 2).join('/') : f;
};
const top = (map, n, fmt) => [...map].sort((a, b) => b[1] - a[1]).slice(0, n).forEach(([k, v]) => console.log(`  ${fmt(v).padStart(8)}  ${k}`));

if (!icMode) {
  const { out, log } = run(['--trace-opt', '--trace-deopt', '--log-code'], {});
  const { sfis } = codeMap(log);
  const from = out.indexOf('@@ measured phase begins');
  const to = out.indexOf('@@ measured phase ends');
  const steps = Number(process.env.BENCH_PEERS_TURNS ?? 30) * K;
  // The trace names a function's shared info tagged (+1); the log, untagged.
  const nameOf = (sfi) => short(sfis.get(parseInt(sfi, 16) - 1) ?? `? ${sfi}`);
  const byFile = new Map();
  const byFunction = new Map();
  const compiled = new Map();
  const deopts = new Map();
  let compiles = 0;
  let ms = 0;
  for (const line of out.slice(from, to)) {
    let m = /^\[completed compiling .*?\(sfi = (\S+)\)> \(target TURBOFAN\) - took [\d.]+, ([\d.]+), [\d.]+ ms/.exec(line);
    if (m) {
      const name = nameOf(m[1]);
      const t = Number(m[2]);
      compiles += 1;
      ms += t;
      byFile.set(fileOf(name), (byFile.get(fileOf(name)) ?? 0) + t);
      byFunction.set(name, (byFunction.get(name) ?? 0) + t);
      compiled.set(name, (compiled.get(name) ?? 0) + 1);
      continue;
    }
    m = /^\[bailout \(kind: (\S+), reason: ([^)]*)\): begin\. deoptimizing .*?\(sfi = (\S+)\)/.exec(line);
    if (m) {
      const key = `${nameOf(m[3])} (${m[1]}: ${m[2]})`;
      deopts.set(key, (deopts.get(key) ?? 0) + 1);
    }
  }
  const deoptCount = [...deopts.values()].reduce((a, b) => a + b, 0);
  console.log(out.filter((l) => /^(openwork|process|main thread|voluntary)/.test(l)).join('\n'));
  console.log(`measured phase: ${compiles} TurboFan compiles (${(compiles / steps).toFixed(3)} a step), concurrent compile ${ms.toFixed(0)} ms (${(ms / steps).toFixed(3)} ms a step, wall on the compiler threads), ${deoptCount} deopts (${(deoptCount / steps).toFixed(3)} a step)`);
  console.log('compile time by file or package (ms):');
  top(byFile, 15, (v) => v.toFixed(1));
  console.log('compile time by function (ms):');
  top(byFunction, Number(process.env.JIT_SPLIT_TOP ?? 20), (v) => v.toFixed(1));
  console.log('deopts:');
  top(deopts, 20, String);
  console.log('compiled more than once:', [...compiled].filter(([, n]) => n > 1).map(([k, n]) => `${k} x${n}`).join('; ') || 'none');
} else {
  /** Megamorphic misses by site in one run: count and distinct maps. */
  const misses = (turns) => {
    const { log } = run(['--log-ic'], { BENCH_PEERS_TURNS: String(turns) });
    const { at } = codeMap(log);
    const sites = new Map();
    for (const line of log) {
      if (!/^(Keyed)?(Load|Store)IC,/.test(line)) continue;
      const p = line.split(',');
      if (p[6] !== 'N') continue;
      const name = at(parseInt(p[1], 16));
      const key = `${short(name.split(' ')[0] || '(anonymous)')} ${fileOf(name)}:${p[3]}:${p[4]} .${p[8]}`;
      const s = sites.get(key) ?? { n: 0, maps: new Set() };
      s.n += 1;
      s.maps.add(p[7]);
      sites.set(key, s);
    }
    return sites;
  };
  const a = misses(5);
  const b = misses(15);
  const steps = 10 * K;
  const per = new Map();
  const fresh = new Map();
  const byFile = new Map();
  for (const [k, s] of b) {
    const d = (s.n - (a.get(k)?.n ?? 0)) / steps;
    if (d <= 0) continue;
    per.set(k, d);
    fresh.set(k, s.maps.size / s.n);
    const f = k.split(' ')[1].replace(/:\d+:\d+$/, '');
    byFile.set(f, (byFile.get(f) ?? 0) + d);
  }
  const total = [...per.values()].reduce((x, y) => x + y, 0);
  console.log(`megamorphic IC misses a step: ${total.toFixed(1)}`);
  console.log('by file or package:');
  top(byFile, 20, (v) => v.toFixed(1));
  console.log('by site (misses a step; share of misses that met a map not seen before at the site):');
  for (const [k, v] of [...per].sort((x, y) => y[1] - x[1]).slice(0, 40)) console.log(`  ${v.toFixed(2).padStart(6)}  ${(fresh.get(k) * 100).toFixed(0).padStart(3)}%  ${k}`);
}
rmSync(tmp, { recursive: true, force: true });
