/**
 * @module cli/early-store
 * Starts opening the CLI's session store before the runtime's modules are loaded (issue 14.4). A
 * PGlite start is partly work off the main thread (reading its files, compiling its WASM) and
 * importing the runtime (XState, RxJS, zod, the OpenAI client, the tools) is all main-thread work,
 * so begun together they overlap; begun one after the other, as before, they add up. This module
 * imports only the storage modules, so the store starts before the rest is even read.
 */
import type { SqlSessionStorage } from '../storage/sql-storage.js';
import type { StorageOptions } from './options.js';

/** A store being opened (`migrated` settles once its migrations ran), or why it could not be. */
export type EarlyStore = { storage: SqlSessionStorage; migrated: Promise<unknown> } | { error: unknown };

/** Opens the store and starts its migrations; any failure is kept for the command to report. */
export async function openStoreEarly(options: StorageOptions): Promise<EarlyStore> {
  try {
    const { openStorage } = await import('./storage.js');
    const storage = openStorage(options);
    // Opening the database takes the directory's lock now (a second process gets store_locked
    // here), so that chat shows its prompt before the store is ready only to the lock's holder.
    void storage.db;
    const migrated = storage.migrate();
    // Heard by openCliCore; until then a failure must not count as an unhandled rejection.
    migrated.catch(() => undefined);
    return { storage, migrated };
  } catch (error) {
    return { error };
  }
}

/**
 * Whether the model flags can open a model at all. Without a key and with the default endpoint the
 * command fails before it needs a store, and then no store is created (a first run without a key
 * leaves no `.openwork/` behind); the model's own check still decides, this only skips the head start.
 */
export function modelLikelyOpens(options: { baseURL?: string }, env: NodeJS.ProcessEnv = process.env): boolean {
  return Boolean(env.OPENAI_API_KEY?.trim() || options.baseURL || env.OPENAI_BASE_URL?.trim());
}

/** Closes a store opened early that the command will not use (its model could not be opened). */
export async function discardEarlyStore(store: EarlyStore | undefined): Promise<void> {
  if (!store || !('storage' in store)) return;
  await store.migrated.catch(() => undefined);
  await store.storage.close().catch(() => undefined);
}
