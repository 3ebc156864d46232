/**
 * A runtime per test on a storage shared by the test file.
 */
import { afterEach } from 'vitest';
import { createCore, type Core, type CoreOptions } from '../../src/core.js';
import type { SessionUpdateEnvelope, TurnOutcome } from '../../src/protocol/updates.js';
import type { SessionHandle } from '../../src/session-handle.js';
import { scriptedModel, type ScriptedModel, type ScriptedStep } from '../../src/services/model/scripted.js';
import type { SessionStorage } from '../../src/storage/storage.js';
import { approvalTool, echoTool, failTool, slowTool } from '../../src/testing/tools.js';
import { assertAllRequests } from './invariants.js';

export interface Harness {
  core: Core;
  session: SessionHandle;
  model: ScriptedModel;
  updates: SessionUpdateEnvelope[];
  /** Starts a turn with one text input and waits for its outcome. */
  run(text: string, clientRequestId?: string): Promise<{ turnId: string; outcome: TurnOutcome }>;
  start(text: string, clientRequestId?: string): Promise<string>;
  /** Resolves at the first update matching `predicate` (already seen or future). */
  waitFor(predicate: (e: SessionUpdateEnvelope) => boolean): Promise<SessionUpdateEnvelope>;
}

const open: Core[] = [];
/** Models the harness built from a step list: a test must use every step it scripted. */
const scripted: ScriptedModel[] = [];

afterEach(async () => {
  while (open.length > 0) await open.pop()!.shutdown();
  // (Every recorded request of every scripted model is checked by test/support/setup-request-check.ts.)
  const unfinished: string[] = [];
  while (scripted.length > 0) {
    try {
      scripted.pop()!.assertDone();
    } catch (error) {
      unfinished.push((error as Error).message);
    }
  }
  // A test scripts exactly the model calls it expects: a step never played is a call that did not happen.
  if (unfinished.length > 0) {
    throw new Error(`the test left its scripted model unfinished: ${unfinished.join('; ')}`);
  }
});

let requestCounter = 0;

export async function harness(
  storage: SessionStorage,
  steps: ScriptedStep[] | ScriptedModel,
  allOptions: Partial<CoreOptions> & { workingDirectory?: string } = {},
): Promise<Harness> {
  const { workingDirectory, ...options } = allOptions;
  const model = Array.isArray(steps) ? scriptedModel(steps) : steps;
  const core = await createCore({
    storage,
    model,
    tools: [echoTool, failTool, approvalTool, slowTool],
    closeStorageOnShutdown: false,
    toolCancelGraceMs: 2_000,
    // Runtime suites assert exact request shapes; World State has its own suite.
    worldState: false,
    // The runtime suites were written when these control tools were on by default (issue 16.3 made each opt-in).
    plan: true,
    conversationHistory: true,
    agents: true,
    ...options,
  });
  open.push(core);
  if (Array.isArray(steps)) scripted.push(model);
  const session = await core.createSession({ workingDirectory: workingDirectory ?? process.cwd() });
  const updates: SessionUpdateEnvelope[] = [];
  const waiters: Array<{ predicate: (e: SessionUpdateEnvelope) => boolean; resolve: (e: SessionUpdateEnvelope) => void }> = [];
  session.updates$.subscribe((e) => {
    updates.push(e);
    for (const w of [...waiters]) {
      if (w.predicate(e)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(e);
      }
    }
  });
  const start = async (text: string, clientRequestId?: string) => {
    requestCounter += 1;
    const { turnId } = await session.startTurn({ clientRequestId: clientRequestId ?? `req-${requestCounter}`, input: [{ type: 'text', text }] });
    return turnId;
  };
  return {
    core,
    session,
    model,
    updates,
    start,
    async run(text, clientRequestId) {
      const turnId = await start(text, clientRequestId);
      const outcome = await session.waitForTurn(turnId);
      assertAllRequests(model.requests);
      return { turnId, outcome };
    },
    waitFor(predicate) {
      const seen = updates.find(predicate);
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve) => waiters.push({ predicate, resolve }));
    },
  };
}

export function updateTypes(updates: readonly SessionUpdateEnvelope[]): string[] {
  return updates.map((u) => u.update.type);
}
