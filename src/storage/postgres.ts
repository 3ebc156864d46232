/**
 * @module storage/postgres
 * The server Postgres adapter: the only module that imports `pg`.
 */
import { createRequire } from 'node:module';
import { InputError } from '../errors.js';
import type pg from 'pg';
import type { NamedStatement, SqlDatabase, SqlExecutor, Row } from './sql.js';
import { SqlSessionStorage, type StorageOptions } from './sql-storage.js';
import { isAnswerTimeout, poolTimeouts, type PostgresTimeouts } from './postgres-timeouts.js';
import { refusedForNow, retryRefusedConnect } from './postgres-connect.js';
import { leavesConnectionUnusable, StatementLanes } from './pg-lanes.js';
import { ConnectionGenerations } from './pg-generations.js';
import { timestamptzParser } from './pg-timestamps.js';

let loaded: typeof pg | undefined;

/**
 * `pg`, loaded when the first Postgres database is opened rather than with the library: a host on
 * the embedded store (the CLI's default) never needs it, and loading it cost about a tenth of
 * `openwork chat`'s start (issue 14.4, docs/benchmarks.md). `pg` is CommonJS, so a synchronous
 * require keeps the constructor synchronous.
 */
function loadPg(): typeof pg {
  if (loaded) return loaded;
  loaded = createRequire(import.meta.url)('pg') as typeof pg;
  // BIGINT and NUMERIC come back as strings by default; counters and sequences fit in a number.
  loaded.types.setTypeParser(20, (v) => Number(v));
  return loaded;
}

/**
 * `pg`'s type parsers as they are when asked (the host's global overrides included), except that
 * `timestamptz` text (OID 1184) is read by `timestamptzParser` while its parser is still `pg`'s own
 * (postgres-date's `parseDate`): a host that replaced it keeps its own.
 */
function poolTypes(pgModule: typeof pg): NonNullable<pg.PoolConfig['types']> {
  let seen: unknown;
  let fast: ((text: string) => unknown) | undefined;
  return {
    getTypeParser: ((oid: number, format?: 'text' | 'binary') => {
      const parser = pgModule.types.getTypeParser(oid, format);
      if (oid !== 1184 || format === 'binary' || typeof parser !== 'function' || parser.name !== 'parseDate') return parser;
      if (parser !== seen) {
        seen = parser;
        fast = timestamptzParser(parser as (text: string) => unknown);
      }
      return fast;
    }) as NonNullable<pg.PoolConfig['types']>['getTypeParser'],
  };
}

/**
 * Options passed through to `pg.Pool` (node-postgres's `PoolConfig`). Declared here rather than
 * imported so that the published types need no `@types/pg` in a host's project (issue 16.3): the
 * common fields are named, and any other `PoolConfig` field is accepted as is.
 */
export interface PostgresPoolOptions {
  host?: string;
  port?: number;
  user?: string;
  password?: string | (() => string | Promise<string>);
  database?: string;
  connectionString?: string;
  ssl?: boolean | Record<string, unknown>;
  max?: number;
  min?: number;
  idleTimeoutMillis?: number;
  connectionTimeoutMillis?: number;
  statement_timeout?: number;
  query_timeout?: number;
  application_name?: string;
  keepAlive?: boolean;
  [option: string]: unknown;
}

export interface PostgresStorageOptions extends StorageOptions {
  connectionString?: string;
  /** Pool size; defaults to 10. */
  max?: number;
  /**
   * Bounds on every wait for the server (see `postgres-timeouts.ts`): statement 30 s, answer 35 s,
   * connection or free client 30 s, idle transaction 60 s. A database that hangs fails the write
   * (`persistence_error`) instead of wedging the session.
   */
  timeouts?: PostgresTimeouts;
  pool?: PostgresPoolOptions;
}

/**
 * BEGIN ... COMMIT on one client. A ROLLBACK that fails leaves the client in an unknown state (its
 * connection lost, or a transaction still open): `broken` hears of it, and the client is discarded.
 */
async function runTransaction<T>(exec: SqlExecutor, fn: (tx: SqlExecutor) => Promise<T>, broken: (error: Error) => void): Promise<T> {
  await exec.query('BEGIN');
  try {
    const result = await fn(exec);
    await exec.query('COMMIT');
    return result;
  } catch (error) {
    // A statement that never answered leaves the connection unusable: discard it, no ROLLBACK
    // (it would wait behind that statement; the server ends the transaction when the socket closes).
    if (isAnswerTimeout(error)) broken(error as Error);
    else await exec.query('ROLLBACK').catch((rollbackError: Error) => broken(rollbackError));
    throw error;
  }
}

/**
 * `pg`'s query, built from the text and then named: a named statement is parsed and planned once per
 * connection, then only bound and executed. Not from a config object: `pg` copies one property by
 * property through its descriptors (`cloneQueryConfig`), which measured about 15 µs a query against
 * 0.2 µs from a text (Node 20, pg 8.23; 0.10-0.14 ms of Node CPU a step in the profiles).
 */
function makeQuery(text: string | NamedStatement, params?: readonly unknown[]): pg.Query {
  const query = new (loadPg().Query)(typeof text === 'string' ? text : text.text, params as unknown[] | undefined) as pg.Query & { name?: string };
  if (typeof text !== 'string') query.name = text.name;
  return query;
}

/**
 * Sends one query on a checked-out client and answers its result: the promise and the callback are
 * what `client.query(config)` makes; a query `pg` refuses (a client no longer queryable, a bad bind
 * value) still answers through the callback.
 */
function send(client: pg.PoolClient, query: pg.Query): Promise<pg.QueryResult> {
  const q = query as pg.Query & { callback?: (error: Error | null, result: pg.QueryResult) => void };
  return new Promise((resolve, reject) => {
    q.callback = (error, result) => (error ? reject(error) : resolve(result));
    client.query(q);
  });
}

/**
 * The statements of a lane, or of one checked-out client. A checked-out client's statements carry
 * the answer bound (`answerMs`, 0: none) as `pg`'s own per-statement `query_timeout`; a lane's carry
 * none, the lane's watchdog bounds them (pg-lanes.ts `watch`). The pool itself is given no
 * `query_timeout`, or `pg` would arm (and clear) a timer for every lane statement too.
 */
function clientExecutor(client: pg.PoolClient | StatementLanes, answerMs = 0): SqlExecutor {
  return {
    async query<R extends Row = Row>(text: string | NamedStatement, params?: readonly unknown[]) {
      const query = makeQuery(text, params);
      let result: pg.QueryResult;
      if (client instanceof StatementLanes) result = await client.query(query);
      else {
        if (answerMs > 0) (query as pg.Query & { query_timeout?: number }).query_timeout = answerMs;
        result = await send(client, query);
      }
      return { rows: result.rows as R[], rowCount: result.rowCount ?? 0 };
    },
  };
}

export class PostgresDatabase implements SqlDatabase {
  readonly kind = 'postgres' as const;
  // Private, so that the published declarations never name a `pg` type.
  private readonly pool: pg.Pool;
  /** Single statements outside a transaction ride these (pg-lanes.ts). */
  private readonly lanes: StatementLanes;
  private readonly laneExecutor: SqlExecutor;

  /** How long a connection the server refuses for now is asked for again (the pool's connection bound). */
  private readonly connectBoundMs: number;
  /** The client-side answer bound (`query_timeout`, 0: none); see `clientExecutor`. */
  private readonly answerMs: number;
  /** Which connections to distrust after one was found dead (pg-generations.ts). */
  private readonly generations = new ConnectionGenerations();

  constructor(options: PostgresStorageOptions) {
    const config: pg.PoolConfig = {
      connectionString: options.connectionString ?? process.env.DATABASE_URL,
      max: options.max ?? 10,
      // Bounded waits by default (faults-review): pg alone waits forever on a hung server.
      ...poolTimeouts(options.timeouts),
      ...(options.pool as pg.PoolConfig | undefined),
      // Pipeline mode lets a lane carry several single statements at once (pg-lanes.ts); a
      // connection checked out for a transaction is used one statement at a time, as before.
      pipeline: true,
    } as pg.PoolConfig;
    // `timestamptz` read without pg's regular expressions on the usual shape (pg-timestamps.ts),
    // for this pool only and only when the host brought no type parsers of its own.
    if (config.types === undefined) config.types = poolTypes(loadPg());
    this.connectBoundMs = config.connectionTimeoutMillis ?? 0;
    // The answer bound is applied per statement by `clientExecutor` and the lanes, not by the pool.
    this.answerMs = config.query_timeout ?? 0;
    delete config.query_timeout;
    this.pool = new (loadPg().Pool)(config);
    // An idle client losing its server connection must not crash the host process.
    // An idle client's error is its connection's end: the other idle ones are likely gone too.
    this.pool.on('error', (error, client) => this.generations.failed(client, error));
    this.pool.on('connect', (client) => this.generations.born(client));
    this.lanes = new StatementLanes(() => this.checkout(), config.max ?? 10, send, this.answerMs, () => this.pool.waitingCount > 0, this.generations);
    this.laneExecutor = clientExecutor(this.lanes);
  }

  query<R extends Row = Row>(text: string | NamedStatement, params?: readonly unknown[]) {
    // A connection refused for now is asked for again by the lane's checkout (faults-review).
    return this.laneExecutor.query<R>(text, params);
  }

  /**
   * A client from the pool; a connection the server refused for now is asked for again
   * (postgres-connect.ts), and an idle one opened before a connection was found dead is discarded
   * and the pool asked again (pg-generations.ts): it is likely dead too, and a fact write's repeat
   * must not spend itself on it.
   */
  private async checkout(): Promise<pg.PoolClient> {
    for (;;) {
      const client = await this.pool.connect().catch((error: unknown) => this.afterRefused(error, () => this.pool.connect()));
      if (!this.generations.suspect(client)) return client;
      client.release(new Error('Connection opened before a connection of the pool was lost'));
    }
  }

  /** `error` again, unless it is a connection the server refused for now: then `again` is retried (postgres-connect.ts). */
  private afterRefused<T>(error: unknown, again: () => Promise<T>): Promise<T> {
    if (!refusedForNow(error)) return Promise.reject(error as Error);
    return retryRefusedConnect(again, this.connectBoundMs);
  }

  async transaction<T>(fn: (tx: SqlExecutor) => Promise<T>): Promise<T> {
    return this.checkedOut((client, broken) => runTransaction(clientExecutor(client, this.answerMs), fn, broken));
  }

  async withConnection<T>(fn: (conn: SqlExecutor & { transaction: SqlDatabase['transaction'] }) => Promise<T>): Promise<T> {
    return this.checkedOut((client, broken) => {
      const exec = clientExecutor(client, this.answerMs);
      return fn({ query: exec.query, transaction: (f) => runTransaction(exec, f, broken) });
    });
  }

  /**
   * Runs `fn` on a client taken from the pool. A connection lost between two statements makes the
   * client emit `error` with no query to receive it; unheard, that would crash the host process.
   * The next statement fails instead, and the broken client is discarded, not returned to the pool,
   * so the pool opens fresh connections once the server is back (issue 13.1): no restart needed.
   */
  private async checkedOut<T>(fn: (client: pg.PoolClient, broken: (error: Error) => void) => Promise<T>): Promise<T> {
    // A lane resting on a connection gives it back first: it never keeps one from a transaction.
    this.lanes.yieldRest();
    const client = await this.checkout();
    let lost: Error | undefined;
    const onError = (error: Error) => {
      lost = error;
    };
    client.on('error', onError);
    try {
      return await fn(client, onError);
    } catch (error) {
      // A statement that never answered (faults-review), or a connection the server ended (its FATAL
      // answer comes before `pg` reads the close): the client must not go back to the pool.
      if (leavesConnectionUnusable(error, client)) {
        this.generations.failed(client, error);
        lost ??= error as Error;
      }
      throw error;
    } finally {
      client.off('error', onError);
      client.release(lost);
    }
  }

  async close(): Promise<void> {
    this.lanes.close();
    await this.pool.end();
  }
}

/**
 * Refuses a connection string `pg` would misread (branch trust-typed): one that is neither a URL
 * with a scheme (`postgres://...`, `socket:...`) nor a socket directory (`/...`). `pg` reads any
 * other text as a path relative to `postgres://base`, so `"not a url"` tried to reach a host named
 * `base`, and a malformed URL failed `createCore` as `migration_error` ("Invalid URL").
 * `configuration_invalid`; the message never quotes the string (it may hold a password).
 */
function checkConnectionString(text: unknown): void {
  if (text === undefined) return;
  const refuse = (why: string): never => {
    throw new InputError('configuration_invalid', `the Postgres connection string ${why}; expected postgres://user:password@host:port/database`);
  };
  if (typeof text !== 'string') refuse(`must be a string, got ${typeof text}`);
  const value = text as string;
  if (value.startsWith('/')) return;
  if (!/^[a-z][a-z0-9+.-]*:/i.test(value)) refuse('is not a URL (it has no scheme such as postgres://)');
  // As pg-connection-string parses it: spaces encoded, and an empty host (`user@/db`) allowed.
  const encoded = /\s|%[^a-f0-9]|%[a-f0-9][^a-f0-9]/i.test(value) ? encodeURI(value).replace(/%25(\d\d)/g, '%$1') : value;
  for (const candidate of [encoded, encoded.replace('@/', '@___DUMMY___/')]) {
    try {
      new URL(candidate);
      return;
    } catch {
      // Try the next form.
    }
  }
  refuse('is not a valid URL');
}

/**
 * Storage on a Postgres server; many runtime processes may share it.
 *
 * @example
 * const core = await createCore({ storage: postgresStorage({ connectionString: process.env.DATABASE_URL }), model });
 */
export function postgresStorage(options: PostgresStorageOptions = {}): SqlSessionStorage {
  // Bad timeouts are a configuration error now, not at the first statement.
  poolTimeouts(options.timeouts);
  checkConnectionString(options.connectionString);
  checkConnectionString(options.pool?.connectionString);
  // Leases get a pool of one of their own (issue 15): renewals never wait behind the turns' queries.
  return new SqlSessionStorage(() => new PostgresDatabase(options), options, () => new PostgresDatabase({ ...options, max: 1 }));
}
