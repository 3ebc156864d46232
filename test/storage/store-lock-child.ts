/**
 * A second process for the store-lock test (issue 13.5): opens the PGlite directory given in
 * STORE_DIR, creates a session titled STORE_TITLE, then reports on stdout as one JSON line either
 * `{"ready":true,"sessionId":...}` (and stays until killed or its stdin closes) or the typed error
 * `{"error":{"code":...,"details":...}}`. With STORE_MODE=lock-only it takes the directory's lock
 * and nothing else (a cheap holder to kill).
 */
import { pgliteStorage } from '../../src/storage/pglite.js';
import { acquireStoreLock } from '../../src/storage/store-lock.js';
import { isOpenworkError } from '../../src/errors.js';

if (process.env.STORE_MODE === 'lock-only') {
  acquireStoreLock(process.env.STORE_DIR!);
  process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
  process.stdin.resume();
  await new Promise(() => undefined);
}

const storage = pgliteStorage({ dataDir: process.env.STORE_DIR! });
try {
  await storage.migrate();
  const session = await storage.createSession({ id: `ses_child_${process.pid}`, workingDirectory: process.cwd(), title: process.env.STORE_TITLE ?? 'child' });
  process.stdout.write(`${JSON.stringify({ ready: true, sessionId: session.id })}\n`);
  process.stdin.resume();
  process.stdin.on('end', () => {
    void storage.close().then(() => process.exit(0));
  });
} catch (error) {
  process.stdout.write(`${JSON.stringify({ error: isOpenworkError(error) ? { code: error.code, details: error.details, message: error.message } : { message: String(error) } })}\n`);
  process.exit(3);
}
