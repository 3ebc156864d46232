/**
 * Counts what the statecharts do per step of the peers scenario (issue 14 point 3): XState events
 * delivered, actors created (machines and invoked/spawned effect actors) and, by type, on PGlite in
 * memory. `node bench/peers/count-step.mjs [dist-dir]` after `npm run build`.
 */
import { randomUUID } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
import { z } from '../../node_modules/zod/index.js';
import { USER_TEXT, K } from './scenario.mjs';
import { fakeModelPort, instantToolOf } from './openwork-setup.mjs';

const dist = resolve(process.argv[2] ?? new URL('../../dist', import.meta.url).pathname);
const { createCore, defineTool, pgliteStorage } = await import(pathToFileURL(`${dist}/index.js`).href);

const instant = instantToolOf(defineTool, z);
const model = fakeModelPort();

let counting = false;
const events = new Map();
const actors = new Map();
let eventCount = 0;
let actorCount = 0;
let machineCount = 0;
const inspect = (e) => {
  if (!counting) return;
  if (e.type === '@xstate.event') {
    eventCount += 1;
    const t = e.event.type.replace(/^xstate\.(done|error)\.actor\..*/, 'xstate.$1.actor.*');
    events.set(t, (events.get(t) ?? 0) + 1);
  } else if (e.type === '@xstate.actor') {
    actorCount += 1;
    const logic = e.actorRef.logic;
    const isMachine = typeof logic?.id === 'string' && 'states' in logic;
    if (isMachine) machineCount += 1;
    const name = isMachine ? `machine ${logic.id}` : e.actorRef.id;
    actors.set(name, (actors.get(name) ?? 0) + 1);
  }
};

const core = await createCore({ storage: pgliteStorage(), model, tools: [instant], worldState: false, inspect });
const TURNS = 5;
const run = async () => {
  const session = await core.createSession({ workingDirectory: process.cwd() });
  const { turnId } = await session.startTurn({ clientRequestId: randomUUID(), input: [{ type: 'text', text: USER_TEXT }] });
  const outcome = await session.waitForTurn(turnId);
  if (outcome.status !== 'completed') throw new Error(JSON.stringify(outcome));
};
await run();
counting = true;
for (let i = 0; i < TURNS; i++) await run();
counting = false;
const steps = TURNS * K;
const per = (n) => (n / steps).toFixed(1);
console.log(`${dist}: per step (${TURNS} turns x ${K} tool steps, turn overhead included): events ${per(eventCount)}, actors ${per(actorCount)}, machines ${per(machineCount)}`);
console.log('events by type per step:', Object.fromEntries([...events].sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, per(v)])));
console.log('actors by id per step:', Object.fromEntries([...actors].sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, per(v)])));
await core.shutdown();
