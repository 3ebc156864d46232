/**
 * Self time per function of a V8 CPU profile, per step: `node bench/peers/top.mjs <file.cpuprofile> <steps> [rows]`
 * (rows: 60). Natives are charged to themselves as V8 names them (`writev`, `(garbage collector)`).
 */
import { readFileSync } from 'node:fs';

const [file, steps, rows = '60'] = process.argv.slice(2);
const p = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const dt = new Map();
for (let i = 0; i < p.samples.length; i++) dt.set(p.samples[i], (dt.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0));
const self = new Map();
for (const [id, t] of dt) {
  const cf = byId.get(id).callFrame;
  const k = `${cf.functionName || '(anon)'} ${cf.url.replace(/.*\/(node_modules|dist)\//, '$1/')}:${cf.lineNumber}`;
  self.set(k, (self.get(k) ?? 0) + t);
}
for (const [k, t] of [...self].sort((a, b) => b[1] - a[1]).slice(0, Number(rows))) console.log((t / 1000 / Number(steps)).toFixed(3), k);
