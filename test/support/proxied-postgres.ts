/**
 * A test database reached two ways, for the suites that break the network to Postgres
 * (test/faults/postgres-*.test.ts, test/storage/unknown-outcome.test.ts): `direct` migrates and
 * inspects it over a healthy connection, and `open` makes a storage that talks to it through a proxy
 * the suite controls (a TCP proxy that stalls, a wire proxy that cuts answers). What `open` made, the
 * direct storage and the proxy are closed after the suite. `useStoppablePostgres` is the same bed on
 * a server of the suite's own, for the suites that stop the server itself.
 */
import { afterAll, beforeAll } from 'vitest';
import { postgresStorage, type PostgresStorageOptions } from '../../src/storage/postgres.js';
import type { SqlSessionStorage } from '../../src/storage/sql-storage.js';
import { createTestDatabase } from './databases.js';
import { startPostgres, type PostgresServer } from './postgres-server.js';
import { startTcpProxy, type TcpProxy } from './tcp-proxy.js';

interface Proxy {
  urlFor(url: string): string;
  close(): Promise<void>;
}

export interface ProxiedPostgres<P extends Proxy> {
  url: string;
  proxy: P;
  direct: SqlSessionStorage;
  /** A storage on the database through the proxy, closed after the suite. */
  open(options?: Omit<PostgresStorageOptions, 'connectionString'>): SqlSessionStorage;
  /** A storage on the database without the proxy (its own pool), closed after the suite. */
  openDirect(options?: Omit<PostgresStorageOptions, 'connectionString'>): SqlSessionStorage;
}

/**
 * Registers the suite's set-up and clean-up; the bed's fields are set once `beforeAll` ran.
 * `beforeClose` runs first in the clean-up (say, a stalled proxy resumed so that closing can finish).
 */
export function useProxiedPostgres<P extends Proxy>(
  start: (target: { host: string; port: number }) => Promise<P>,
  options: { directMax?: number; beforeClose?: (proxy: P) => void } = {},
): ProxiedPostgres<P> {
  const opened: SqlSessionStorage[] = [];
  const opening = (connectionString: string, storageOptions: Omit<PostgresStorageOptions, 'connectionString'>) => {
    const storage = postgresStorage({ ...storageOptions, connectionString });
    opened.push(storage);
    return storage;
  };
  const bed = {
    open: (storageOptions = {}) => opening(bed.proxy.urlFor(bed.url), storageOptions),
    openDirect: (storageOptions = {}) => opening(bed.url, storageOptions),
  } as ProxiedPostgres<P>;

  beforeAll(async () => {
    bed.url = await createTestDatabase();
    bed.direct = postgresStorage({ connectionString: bed.url, max: options.directMax ?? 2 });
    await bed.direct.migrate();
    const target = new URL(bed.url);
    bed.proxy = await start({ host: target.hostname, port: Number(target.port) });
  });

  afterAll(async () => {
    if (bed.proxy) options.beforeClose?.(bed.proxy);
    for (const storage of opened) await storage.close().catch(() => undefined);
    await bed.direct?.close().catch(() => undefined);
    await bed.proxy?.close();
  });

  return bed;
}

/** A Postgres server of the suite's own, which it may stop (`halt`/`restart`) or black-hole (`proxy.stall`). */
export interface StoppablePostgres {
  server: PostgresServer;
  /** A TCP proxy in front of the server: `proxy.urlFor(server.url)` reaches it through the proxy. */
  proxy: TcpProxy;
  /** A migrated storage on the server without the proxy. */
  direct: SqlSessionStorage;
  /** A storage at `url` (the server's or the proxy's), closed after the suite. */
  open(url: string, options?: Omit<PostgresStorageOptions, 'connectionString'>): SqlSessionStorage;
}

/**
 * Registers the set-up and clean-up of a server the suite owns (the outage suites stop it, which the
 * shared test server must never be). Clean-up resumes the proxy, closes what `open` made, the direct
 * storage and the proxy, then stops the server; a suite's own `afterAll` registered later runs first.
 */
export function useStoppablePostgres(): StoppablePostgres {
  const opened: SqlSessionStorage[] = [];
  const bed = {
    open: (url: string, options = {}) => {
      const storage = postgresStorage({ ...options, connectionString: url });
      opened.push(storage);
      return storage;
    },
  } as StoppablePostgres;

  beforeAll(async () => {
    bed.server = await startPostgres();
    bed.direct = postgresStorage({ connectionString: bed.server.url, max: 2 });
    await bed.direct.migrate();
    bed.proxy = await startTcpProxy({ host: '127.0.0.1', port: bed.server.port });
  });

  afterAll(async () => {
    bed.proxy?.resume();
    for (const storage of [bed.direct, ...opened]) await storage?.close().catch(() => undefined);
    await bed.proxy?.close();
    bed.server?.stop();
  });

  return bed;
}
