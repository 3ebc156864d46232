/**
 * Reads a V8 CPU profile (`--cpu-prof`) of an openwork-core child and prints its self time per step
 * by category: XState's interpreter, the storage client (`pg`, `pg-protocol`, the storage layer),
 * the trace recorder, request assembly, the update stream (RxJS and services/updates), the
 * statechart definitions and actors, zod, the socket writes, GC, idle, and the rest.
 *
 * Usage: node profile.mjs <file.cpuprofile> <steps>
 * where steps is the number of tool steps the child ran ((warm-up + serial + sessions) x K).
 */
import { readFileSync } from 'node:fs';

const [file, stepsArg] = process.argv.slice(2);
const steps = Number(stepsArg);
if (!file || !steps) throw new Error('usage: node profile.mjs <file.cpuprofile> <steps>');
const profile = JSON.parse(readFileSync(file, 'utf8'));

/** The first matching rule names a node's category; order matters (most specific first). */
const RULES = [
  ['idle', (n, u) => n === '(idle)'],
  ['GC', (n) => n === '(garbage collector)'],
  ['socket writes (writev)', (n) => /^writev|writeBuffer|writeUtf8String/.test(n) && true],
  ['XState interpreter', (n, u) => u.includes('/node_modules/xstate/')],
  ['pg client + protocol', (n, u) => /\/node_modules\/pg(-protocol|-pool|-types)?\//.test(u)],
  // PGlite: Postgres itself (the WASM module: parse, plan, execute, WAL) and its JS wrapper.
  ['PGlite WASM (the Postgres backend)', (n, u) => u.startsWith('wasm://')],
  ['PGlite JS (protocol, parsing, mutexes)', (n, u) => u.includes('/node_modules/@electric-sql/pglite/')],
  ['storage layer (dist/storage)', (n, u) => u.includes('/dist/storage/')],
  ['trace recorder', (n, u) => u.includes('/dist/services/trace/')],
  ['request assembly (dist/services/context)', (n, u) => u.includes('/dist/services/context/')],
  ['updates (RxJS, dist/services/updates, protocol/updates)', (n, u) => u.includes('/node_modules/rxjs/') || u.includes('/dist/services/updates/') || u.includes('/dist/protocol/updates')],
  ['machines + actors (dist/machines, *-actors)', (n, u) => u.includes('/dist/machines/') || /\/dist\/services\/[a-z-]*actors\.js/.test(u)],
  ['zod', (n, u) => u.includes('/node_modules/zod/')],
  ['rest of openwork-core (dist/)', (n, u) => u.includes('/dist/')],
  ['bench harness + fake model', (n, u) => u.includes('/bench/peers/')],
  ['other Node/JS (node:*, runtime, program)', () => true],
];

const byId = new Map(profile.nodes.map((node) => [node.id, node]));
const selfUs = new Map();
// Self time from samples and their time deltas.
for (let i = 0; i < profile.samples.length; i += 1) {
  const id = profile.samples[i];
  selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
}
const totals = new Map(RULES.map(([c]) => [c, 0]));
let all = 0;
for (const [id, us] of selfUs) {
  const { functionName: n, url: u } = byId.get(id).callFrame;
  const [category] = RULES.find(([, test]) => test(n, u ?? ''));
  totals.set(category, totals.get(category) + us);
  all += us;
}
/**
 * The second view charges each sample to the openwork-core component that caused it, from the whole
 * stack rather than the leaf: a socket write inside `pg` called by the storage layer called by the
 * trace recorder counts for the trace. The first matching rule over the stack wins.
 */
const parent = new Map();
for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
const STACK_RULES = [
  ['trace recorder (incl. its storage writes)', (u) => u.includes('/dist/services/trace/')],
  ['storage client (dist/storage, pg, socket, PGlite)', (u) => u.includes('/dist/storage/') || /\/node_modules\/pg(-protocol|-pool|-types)?\//.test(u) || u.includes('/node_modules/@electric-sql/pglite/') || u.startsWith('wasm://')],
  ['request assembly', (u) => u.includes('/dist/services/context/')],
  // The model call was an RxJS Observable (services/turn-actors `callModel`; a callback actor since
  // branch perf-fold-model): RxJS on the stack under it is the Turn's, not the update stream's
  // (branch perf-session: of a loaded profile's 0.595 ms a step charged here, 0.536 were).
  ['updates (RxJS, services/updates, session-handle/update-stream)', (u, urls) => (u.includes('/node_modules/rxjs/') && !urls.some((x) => x.includes('/dist/services/turn-actors'))) || u.includes('/dist/services/updates/') || u.includes('/dist/protocol/updates') || u.includes('/dist/session-handle/update-stream')],
  ['zod', (u) => u.includes('/node_modules/zod/')],
  ['machines + actors (own code)', (u) => u.includes('/dist/machines/') || /\/dist\/services\/[a-z-]*actors\.js/.test(u)],
  ['XState interpreter', (u) => u.includes('/node_modules/xstate/')],
  ['rest of openwork-core', (u) => u.includes('/dist/')],
  ['bench harness + fake model', (u) => u.includes('/bench/peers/')],
];
const stackTotals = new Map();
for (const [id, us] of selfUs) {
  const leaf = byId.get(id).callFrame.functionName;
  let category = leaf === '(idle)' ? 'idle' : leaf === '(garbage collector)' ? 'GC' : null;
  if (!category) {
    const urls = [];
    for (let n = id; n !== undefined; n = parent.get(n)) urls.push(byId.get(n).callFrame.url ?? '');
    category = STACK_RULES.find(([, test]) => urls.some((u) => test(u, urls)))?.[0] ?? 'other (Node internals, timers, program)';
  }
  stackTotals.set(category, (stackTotals.get(category) ?? 0) + us);
}

console.log(`profile ${file}: ${(all / 1000).toFixed(0)} ms sampled, ${steps} steps`);
console.log('| category | ms per step | share |');
console.log('|---|---|---|');
for (const [category, us] of [...totals].sort((a, b) => b[1] - a[1])) {
  if (us === 0) continue;
  console.log(`| ${category} | ${(us / 1000 / steps).toFixed(3)} | ${((100 * us) / all).toFixed(1)}% |`);
}
console.log('');
console.log('charged to the component on the stack:');
console.log('| component | ms per step | share |');
console.log('|---|---|---|');
for (const [category, us] of [...stackTotals].sort((a, b) => b[1] - a[1])) {
  console.log(`| ${category} | ${(us / 1000 / steps).toFixed(3)} | ${((100 * us) / all).toFixed(1)}% |`);
}
