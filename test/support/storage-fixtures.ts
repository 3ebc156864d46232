/**
 * @module test/support/storage-fixtures
 * The rows the storage suites start from, written through the port as the runtime writes them:
 * unique ids, a user message, a tool result, and a session with one running turn.
 */
import pg from 'pg';
import type { NewMessage } from '../../src/protocol/content.js';
import type { SessionStorage } from '../../src/storage/storage.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';

let counter = 0;

/** An id unique in this process and across runs against one database. */
export function uid(prefix: string): string {
  counter += 1;
  return `${prefix}_${counter}_${Math.random().toString(36).slice(2, 8)}`;
}

export function userMessage(text: string, id = uid('msg')): NewMessage {
  return { id, role: 'user', kind: 'normal', content: [{ type: 'text', text }] };
}

/** A succeeded result of the `echo` tool for the call `callId`. */
export function toolResultMessage(callId: string, id = uid('msg')): NewMessage {
  return { id, role: 'tool', kind: 'normal', content: [{ type: 'tool_result', callId, status: 'succeeded', text: 'ok' }], providerCallId: callId, toolName: 'echo' };
}

/**
 * A new session with one running turn begun by a user message (plus `messages` before it), as
 * `startTurn` writes it; `reserveModelCall` as the Turn passes it for its first model call.
 */
export async function beginRunningTurn(
  storage: Pick<SessionStorage, 'createSession' | 'beginTurn'>,
  options: { sessionId?: string; messages?: NewMessage[]; reserveModelCall?: boolean } = {},
): Promise<{ sessionId: string; turnId: string }> {
  const sessionId = options.sessionId ?? uid('ses');
  if (!options.sessionId) await storage.createSession({ id: sessionId, workingDirectory: '/work' });
  const turnId = uid('turn');
  await storage.beginTurn({
    turnId,
    sessionId,
    clientRequestId: uid('req'),
    modelId: 'scripted/m',
    resolvedProviderId: 'scripted',
    resolvedModelName: 'm',
    appVersion: 'test',
    messages: [...(options.messages ?? []), userMessage('hello')],
    ...(options.reserveModelCall !== undefined ? { reserveModelCall: options.reserveModelCall } : {}),
  });
  return { sessionId, turnId };
}

/**
 * Counts what `fn` sends through the storage's database handle: each `query` is one round trip, each
 * `transaction` a BEGIN … COMMIT around the queries it runs.
 */
export async function countRoundTrips(storage: SqlSessionStorage, fn: () => Promise<unknown>): Promise<{ queries: number; transactions: number }> {
  const db = storage.db;
  const query = db.query.bind(db);
  const transaction = db.transaction.bind(db);
  const seen = { queries: 0, transactions: 0 };
  db.query = ((...args: Parameters<typeof query>) => {
    seen.queries += 1;
    return query(...args);
  }) as typeof db.query;
  db.transaction = ((inner: Parameters<typeof transaction>[0]) => {
    seen.transactions += 1;
    return transaction(inner);
  }) as typeof db.transaction;
  try {
    await fn();
  } finally {
    db.query = query;
    db.transaction = transaction;
  }
  return seen;
}

/**
 * Records the name of every named (prepared) statement any `pg` client sends until `restore()`:
 * how the suites check that the step's statements are parsed once per connection.
 */
export function recordStatementNames(): { names: string[]; restore(): void } {
  const names: string[] = [];
  const original = pg.Client.prototype.query;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    const config = args[0] as { name?: string } | string;
    if (typeof config === 'object' && config?.name) names.push(config.name);
    return (original as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof original;
  return { names, restore: () => void (pg.Client.prototype.query = original) };
}
