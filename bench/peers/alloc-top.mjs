/**
 * Reads a sampled allocation profile written by `BENCH_ALLOC_PROF=<file> node bench/peers/cpu-split.mjs`
 * and prints the bytes allocated per step by function, exclusive (self; a native frame such as
 * Object.assign or JSON.stringify is charged to its nearest JavaScript caller) and inclusive (the
 * function or anything it called; a function counted once per stack even when it recurses).
 *
 * `node bench/peers/alloc-top.mjs <file> <steps> [filter] [n]`: steps is the number of measured steps
 * (BENCH_PEERS_TURNS x K); filter, a substring of the file path (e.g. `dist/`), keeps only the
 * functions of matching files; n (30) rows per table.
 */
import { readFileSync } from 'node:fs';

const [file, stepsArg, filter = '', nArg = '30'] = process.argv.slice(2);
if (!file || !stepsArg) {
  console.error('usage: node bench/peers/alloc-top.mjs <heapprofile> <steps> [filter] [n]');
  process.exit(2);
}
const profile = JSON.parse(readFileSync(file, 'utf8'));
const steps = Number(stepsArg);
const n = Number(nArg);

/** A readable name of one frame: function, file shortened to dist/ or the package, line. */
function name(frame) {
  const { functionName, url, lineNumber } = frame;
  const where = url.includes('/node_modules/') ? url.replace(/^.*\/node_modules\//, 'node_modules/') : url.replace(/^.*\/(dist|bench)\//, '$1/');
  return `${functionName || '(anonymous)'} ${where}:${lineNumber + 1}`;
}

const self = new Map();
const inclusive = new Map();
let total = 0;

/** Returns the subtree's bytes; charges self to the nearest JavaScript frame and inclusive to every distinct frame on the stack. */
function walk(node, caller, onStack) {
  const own = node.callFrame.url === '' ? caller : name(node.callFrame);
  const at = own ?? (node.callFrame.functionName || '(root)');
  self.set(at, (self.get(at) ?? 0) + node.selfSize);
  total += node.selfSize;
  let sum = node.selfSize;
  const pushed = own !== null && own !== undefined && !onStack.has(own);
  if (pushed) onStack.add(own);
  for (const child of node.children) sum += walk(child, own, onStack);
  if (pushed) {
    onStack.delete(own);
    inclusive.set(own, (inclusive.get(own) ?? 0) + sum);
  }
  return sum;
}
walk(profile.head, null, new Set());

const kb = (b) => (b / steps / 1024).toFixed(1).padStart(6);
const top = (map) => [...map].filter(([fn]) => fn.includes(filter)).sort((a, b) => b[1] - a[1]).slice(0, n);
console.log(`allocated ${kb(total).trim()} kB per step (sampled), ${steps} steps`);
console.log(`exclusive (kB per step)${filter ? `, files matching "${filter}"` : ''}:`);
for (const [fn, b] of top(self)) console.log(`  ${kb(b)}  ${fn}`);
console.log(`inclusive (kB per step)${filter ? `, files matching "${filter}"` : ''}:`);
for (const [fn, b] of top(inclusive)) console.log(`  ${kb(b)}  ${fn}`);
