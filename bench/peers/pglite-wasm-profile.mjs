/**
 * Names the Postgres functions inside PGlite's WebAssembly frames of a CPU profile (which V8 shows as
 * `wasm-function[N]`): PGlite's module exports about 2,000 of its functions by name (for dynamic
 * linking; export indices count imported functions first, as V8's numbering does), so each sample is charged to the nearest exported function on its stack. Prints self time
 * by that function and inclusive time per exported function, in ms per step.
 *
 * Usage: node bench/peers/pglite-wasm-profile.mjs <file.cpuprofile> <steps> [rows]
 * (the profile of `BENCH_PEERS_CPU_PROF`, e.g. openwork-pglite-mem.serial.cpuprofile, 300 steps).
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const [file, stepsArg, rowsArg = '30'] = process.argv.slice(2);
const steps = Number(stepsArg);
if (!file || !steps) throw new Error('usage: node pglite-wasm-profile.mjs <file.cpuprofile> <steps> [rows]');
const require = createRequire(import.meta.url);
const wasm = readFileSync(join(dirname(require.resolve('@electric-sql/pglite')), 'pglite.wasm'));

/** Function index -> exported name, from the module's export section. */
function exportedNames(bytes) {
  let p = 8;
  const leb = () => {
    let result = 0;
    let shift = 0;
    let byte;
    do {
      byte = bytes[p++];
      result |= (byte & 0x7f) << shift;
      shift += 7;
    } while (byte & 0x80);
    return result >>> 0;
  };
  const names = new Map();
  while (p < bytes.length) {
    const id = bytes[p++];
    const size = leb();
    const end = p + size;
    if (id === 7) {
      const count = leb();
      for (let i = 0; i < count; i++) {
        const length = leb();
        const name = bytes.subarray(p, p + length).toString();
        p += length;
        const kind = bytes[p++];
        const index = leb();
        if (kind === 0) names.set(index, name);
      }
    }
    p = end;
  }
  return names;
}

const exported = exportedNames(wasm);
const profile = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map();
for (const node of profile.nodes) for (const c of node.children ?? []) parent.set(c, node.id);
const self = new Map();
for (let i = 0; i < profile.samples.length; i++) self.set(profile.samples[i], (self.get(profile.samples[i]) ?? 0) + (profile.timeDeltas[i] ?? 0));
const nameOf = (frame) => {
  const m = /^wasm-function\[(\d+)\]/.exec(frame.functionName);
  return m ? exported.get(Number(m[1])) ?? null : null;
};
const selfByName = new Map();
const inclusive = new Map();
let all = 0;
for (const [id, us] of self) {
  if (!byId.get(id).callFrame.url.startsWith('wasm://')) continue;
  all += us;
  let nearest = null;
  const seen = new Set();
  for (let n = id; n !== undefined; n = parent.get(n)) {
    const name = nameOf(byId.get(n).callFrame);
    if (!name) continue;
    nearest ??= name;
    if (!seen.has(name)) {
      seen.add(name);
      inclusive.set(name, (inclusive.get(name) ?? 0) + us);
    }
  }
  nearest ??= '(no exported frame)';
  selfByName.set(nearest, (selfByName.get(nearest) ?? 0) + us);
}
const ms = (us) => (us / 1000 / steps).toFixed(3);
const rows = Number(rowsArg);
console.log(`${file}: WebAssembly ${ms(all)} ms per step`);
console.log('| self, by nearest exported function | ms/step |   | inclusive, by exported function | ms/step |');
console.log('|---|---|---|---|---|');
const a = [...selfByName].sort((x, y) => y[1] - x[1]).slice(0, rows);
const b = [...inclusive].sort((x, y) => y[1] - x[1]).slice(0, rows);
for (let i = 0; i < rows; i++) console.log(`| ${a[i]?.[0] ?? ''} | ${a[i] ? ms(a[i][1]) : ''} | | ${b[i]?.[0] ?? ''} | ${b[i] ? ms(b[i][1]) : ''} |`);
