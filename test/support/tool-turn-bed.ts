/**
 * The bed of a suite that runs tool turns through a real core: one migrated in-memory PGlite for the
 * file (`usePglite`), a fresh tool environment per test (`useToolEnv`: a workspace, the sandbox
 * settings), and the cores a test opens, shut down after that test so that none outlives it.
 */
import { afterEach } from 'vitest';
import type { Core } from '../../src/core.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { usePglite } from './databases.js';
import { type ToolEnv, useToolEnv } from './tool-env.js';

/** Registers the bed's hooks; returns the list a test pushes the cores it creates onto. */
export function useToolTurnBed(onStorage: (storage: SqlSessionStorage) => void, onEnv: (env: ToolEnv) => void): Core[] {
  usePglite(onStorage);
  useToolEnv(onEnv);
  const open: Core[] = [];
  afterEach(async () => {
    while (open.length > 0) await open.pop()!.shutdown();
  });
  return open;
}
