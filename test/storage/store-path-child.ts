/**
 * A child process for `store-path.test.ts` (integ8): for each directory of the JSON array in
 * STORE_PATHS, in order, `createCore` on a PGlite store there, then one JSON line on stdout:
 * `{"path","ms","opened":true}` or `{"path","ms","error":{code,message,details}}`. Its own process,
 * because an open that blocks does so synchronously (a read of a FIFO, Node's recursive mkdir
 * looping below /proc): the test can only bound it from outside.
 */
import { createCore } from '../../src/core.js';
import { isOpenworkError } from '../../src/errors.js';
import { scriptedModel } from '../../src/services/model/scripted.js';
import { pgliteStorage } from '../../src/storage/pglite.js';

for (const path of JSON.parse(process.env.STORE_PATHS!) as string[]) {
  const started = Date.now();
  const storage = pgliteStorage({ dataDir: path });
  try {
    const core = await createCore({ storage, model: scriptedModel([]), worldState: false });
    process.stdout.write(`${JSON.stringify({ path, ms: Date.now() - started, opened: true })}\n`);
    await core.shutdown();
  } catch (error) {
    const ms = Date.now() - started;
    await storage.close().catch(() => undefined);
    process.stdout.write(`${JSON.stringify({ path, ms, error: isOpenworkError(error) ? { code: error.code, message: error.message, details: error.details } : { message: String(error) } })}\n`);
  }
}
process.exit(0);
