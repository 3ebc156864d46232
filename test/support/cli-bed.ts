/**
 * What an end-to-end test of the real `openwork` command sets up once per describe block: a built
 * `dist/`, the fake OpenAI server, a Postgres database, and a sandbox probe (a tool runtime in a
 * temporary home) to skip or require the sandbox by.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { prepareToolRuntime, type ToolRuntime } from '../../src/services/tools/tool-runtime.js';
import { ensureBuilt } from './cli-process.js';
import { createTestDatabase } from './databases.js';
import { startFakeOpenAI, type FakeOpenAIServer } from './fake-openai-server.js';

export interface CliBed {
  server: FakeOpenAIServer;
  databaseUrl: string;
  /** A tool runtime in `dir`, for `requireSandbox`. */
  probe: ToolRuntime;
  /** A temporary directory, removed after the block. */
  dir: string;
}

/** Registers the set-up and tear-down in the calling describe block; read the fields inside its tests. */
export function useCliBed(prefix: string): CliBed {
  const bed = {} as CliBed;
  beforeAll(async () => {
    bed.dir = mkdtempSync(join(tmpdir(), prefix));
    bed.probe = await prepareToolRuntime({ home: bed.dir, tempDirs: [bed.dir] });
    ensureBuilt();
    bed.server = await startFakeOpenAI();
    bed.databaseUrl = await createTestDatabase();
  }, 300_000);
  afterAll(async () => {
    await bed.server?.close();
    if (bed.dir) rmSync(bed.dir, { recursive: true, force: true });
  });
  return bed;
}
