/**
 * A child process for the Stately bridge tests: it connects (or fails to connect) to a relay, runs
 * one turn, shuts everything down and prints `done`. It never calls process.exit: the test checks
 * that nothing is left that keeps Node alive, and prints `exit` when its event loop has emptied.
 */
import { writeSync } from 'node:fs';
import { createCore } from '../../src/core.js';
import { connectStatelyInspector } from '../../src/inspector/server/stately.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { pgliteStorage } from '../../src/storage/pglite.js';
import { echoTool } from '../../src/testing/tools.js';

const [mode, url] = process.argv.slice(2);
// When the event loop has emptied (Node emits `exit` then, as this script never calls process.exit):
// the test measures from `done` to here, on this process's own clock, and not to the moment the
// parent sees the process gone, which adds the process's teardown (about 0.3 s idle, seconds under
// heavy load) to what it measures.
process.on('exit', () => writeSync(1, `exit ${Date.now()}\n`));
if (mode === 'unreachable') {
  try {
    await connectStatelyInspector({ url: url!, connectTimeoutMs: 2_000 });
    process.stdout.write('connected?!\n');
  } catch (error) {
    process.stdout.write(`error ${(error as { code?: string }).code}\n`);
  }
} else {
  const stately = await connectStatelyInspector({ url: url! });
  const core = await createCore({ plan: true, conversationHistory: true, agents: true,
    storage: pgliteStorage(),
    model: scriptedModel([{ toolCalls: [{ name: 'echo', arguments: { text: 'a' } }] }, { text: 'done' }]),
    tools: [echoTool],
    inspect: stately.inspect,
  });
  const session = await core.createSession({ workingDirectory: process.cwd() });
  const { turnId } = await session.startTurn({ clientRequestId: 'child', input: [{ type: 'text', text: 'go' }] });
  const outcome = await session.waitForTurn(turnId);
  await core.shutdown();
  await stately.stop();
  process.stdout.write(`outcome ${outcome.status}\n`);
}
process.stdout.write(`done ${Date.now()}\n`);
