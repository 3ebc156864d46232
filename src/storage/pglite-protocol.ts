/**
 * @module storage/pglite-protocol
 * Statements on PGlite through Postgres's extended protocol, written once per round trip into the
 * WebAssembly backend, with named statements prepared once per database.
 *
 * Why: PGlite's own `query()` sends Parse, Describe, Bind, Describe, Execute and Sync as six separate
 * calls into the WASM backend, parses and plans the text every time, and its `transaction()` adds
 * BEGIN and COMMIT as two more calls each (a simple query, then a Sync). A durable step is a few
 * short statements, so that fixed cost was most of a step on PGlite (docs/benchmarks.md, "PGlite
 * per step"). Here a `NamedStatement` is parsed and described once per database (Parse and Describe
 * under its name), then each run is one buffer, Bind + Execute + Sync, one call into the backend;
 * a transaction's BEGIN rides in the buffer of its first statement and its COMMIT is one call.
 *
 * What stays as it was: values are parsed with the instance's parsers (a prepared statement's reply
 * is read from its bytes by pglite-reply.ts, everything else by PGlite's own `parseResults`),
 * parameters are serialised with its serializers by the types Postgres inferred, and a failure is the
 * same `DatabaseError` (SQLSTATE in `code`, with `query` and `params` added as PGlite does), parsed
 * by PGlite's own protocol parser. A commit is followed by PGlite's `syncToFs` only where the file
 * system's sync does something (`afterCommit`).
 */
import type { PGlite } from '@electric-sql/pglite';
import { MemoryFS, parse, protocol, TransactionAbortedError } from '@electric-sql/pglite';
import type { NamedStatement, Row, SqlExecutor } from './sql.js';
import { joinChunks, readRows, replyError, type ReplyColumn } from './pglite-reply.js';

type BackendMessage = Awaited<ReturnType<PGlite['execProtocolStream']>>[number];
type Results = ReturnType<typeof parse.parseResults>[number];

const { serialize } = protocol;

/**
 * The `syncToFs` that PGlite's Emscripten file systems share (memory and the Node file system): it
 * does nothing, because every page and WAL write already reached the OS through a write call. An
 * instance whose file system has this very method needs no sync after a commit; any other file
 * system (one that overrides it) gets its sync as before.
 */
const NO_OP_SYNC = (Object.getPrototypeOf(MemoryFS.prototype) as { syncToFs: unknown }).syncToFs;

/** What Postgres told us once about a prepared statement: its parameters' types and its result row. */
interface Prepared {
  readonly text: string;
  readonly paramTypes: readonly number[];
  /** The statement's result columns, from its RowDescription; empty when it returns no rows (NoData). */
  readonly columns: readonly ReplyColumn[];
}

/** The outcome of a statement, in the shape of `SqlExecutor.query`. */
type QueryResult<R> = { rows: R[]; rowCount: number };

const BEGIN = serialize.query('BEGIN');
const COMMIT = serialize.query('COMMIT');
const ROLLBACK = serialize.query('ROLLBACK');
const SYNC = serialize.sync();
const EXECUTE = serialize.execute({});
const DESCRIBE_PORTAL = serialize.describe({ type: 'P' });

function concat(parts: readonly Uint8Array[]): Uint8Array {
  let length = 0;
  for (const part of parts) length += part.length;
  const out = new Uint8Array(length);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** Multi-statement text without parameters (migrations) needs the simple protocol. */
function isScript(text: string, params: readonly unknown[] | undefined): boolean {
  return (params === undefined || params.length === 0) && !/\$\d/.test(text) && text.includes(';');
}

/**
 * One PGlite instance seen through the extended protocol. It owns the names prepared on that
 * instance: a new instance (a re-opened store) starts with none and prepares again.
 */
export class PgliteProtocol {
  private readonly prepared = new Map<string, Prepared>();
  /** Whether a commit must be followed by the file system's sync; known once PGlite is up. */
  private syncAfterCommit: boolean | undefined;

  constructor(private readonly db: PGlite) {}

  /** How many named statements this instance has prepared (for tests and measurements). */
  get preparedCount(): number {
    return this.prepared.size;
  }

  /** A statement outside any transaction: it commits on its own, as PGlite's `query()` does. */
  async query<R extends Row = Row>(statement: string | NamedStatement, params?: readonly unknown[]): Promise<QueryResult<R>> {
    await this.ready();
    // Both of PGlite's locks, in its order: nothing else may run between our protocol messages.
    return this.db._runExclusiveTransaction(() =>
      this.db._runExclusiveQuery(async () => {
        const result = await this.run<R>(statement, params, false);
        await this.afterCommit();
        return result;
      }),
    );
  }

  /**
   * Runs `fn` in one transaction. BEGIN is sent with the first statement (a transaction that runs
   * none costs nothing); COMMIT is one call; any throw rolls back, as PGlite's `transaction()` does.
   */
  async transaction<T>(fn: (tx: SqlExecutor) => Promise<T>): Promise<T> {
    await this.ready();
    return this.db._runExclusiveTransaction(async () => {
      let begun = false;
      let closed = false;
      const tx: SqlExecutor = {
        query: async <R extends Row = Row>(statement: string | NamedStatement, params?: readonly unknown[]) => {
          if (closed) throw new Error('Transaction is closed');
          return this.db._runExclusiveQuery(async () => {
            const first = !begun;
            begun = true;
            return this.run<R>(statement, params, first);
          });
        },
      };
      try {
        const result = await fn(tx);
        closed = true;
        if (begun) {
          const messages = await this.db._runExclusiveQuery(() => this.send(COMMIT));
          const tag = messages.find((m) => m.name === 'commandComplete') as { text?: string } | undefined;
          // COMMIT of a transaction that an error had aborted answers ROLLBACK: PGlite throws its
          // TransactionAbortedError (SQLSTATE 25P02) for it, and so do we.
          if (tag?.text === 'ROLLBACK') throw Object.assign(new TransactionAbortedError(), { query: 'COMMIT', params: undefined });
          await this.afterCommit();
        }
        return result;
      } catch (error) {
        if (begun && !closed) {
          closed = true;
          await this.db._runExclusiveQuery(() => this.send(ROLLBACK));
        }
        throw error;
      }
    });
  }

  /**
   * Waits for PGlite's start and refuses a closed instance, with PGlite's own errors ("PGlite is
   * closed"). Once it is up and open this is two property reads: it runs before every statement.
   */
  private async ready(): Promise<void> {
    if (!this.db.ready || this.db.closed) await this.db._checkReady();
  }

  /**
   * The file system's sync after a commit, as PGlite's `query()` does it, unless the instance's file
   * system is one of PGlite's Emscripten ones (memory, the Node file system), whose sync does nothing:
   * their writes reach the OS as they happen. Skipping it saves a mutex and two async hops per commit.
   */
  private async afterCommit(): Promise<void> {
    this.syncAfterCommit ??= this.db.fs?.syncToFs !== NO_OP_SYNC;
    if (this.syncAfterCommit) await this.db.syncToFs();
  }

  /** One statement, the query lock held; `begin` prefixes the transaction's BEGIN. */
  private async run<R extends Row>(statement: string | NamedStatement, params: readonly unknown[] | undefined, begin: boolean): Promise<QueryResult<R>> {
    const text = typeof statement === 'string' ? statement : statement.text;
    try {
      if (isScript(text, params)) {
        const messages = await this.send(begin ? concat([BEGIN, serialize.query(text)]) : serialize.query(text));
        const sets = parse.parseResults(afterBegin(messages, begin), this.db.parsers);
        return shape<R>(sets[sets.length - 1]!);
      }
      if (typeof statement !== 'string') return await this.runNamed<R>(statement, params ?? [], begin);
      return await this.runUnnamed<R>(text, params ?? [], begin);
    } catch (error) {
      if (error instanceof protocol.messages.DatabaseError) {
        Object.assign(error, { query: text, params });
      }
      throw error;
    }
  }

  /** Prepared once (Parse + Describe under its name), then Bind + Execute + Sync in one call. */
  private async runNamed<R extends Row>(statement: NamedStatement, params: readonly unknown[], begin: boolean): Promise<QueryResult<R>> {
    let prepared = this.prepared.get(statement.name);
    let prefix: Uint8Array[] = begin ? [BEGIN] : [];
    if (prepared === undefined) {
      prepared = await this.prepare(statement, prefix);
      prefix = [];
    } else if (prepared.text !== statement.text) {
      // One name, one text (sql.ts): a second text under a used name is a bug in the caller.
      throw new TypeError(`statement ${statement.name} was prepared with another text`);
    }
    const bind = serialize.bind({ statement: statement.name, values: this.values(params, prepared.paramTypes) });
    const reply = await this.sendRaw(concat([...prefix, bind, EXECUTE, SYNC]));
    return readRows<R>(reply, prepared.columns, this.db.parsers, prefix.length > 0);
  }

  /** Parse + Describe (+ Sync) under the statement's name; an error leaves nothing cached. */
  private async prepare(statement: NamedStatement, prefix: readonly Uint8Array[]): Promise<Prepared> {
    const messages = await this.send(
      concat([...prefix, serialize.parse({ name: statement.name, text: statement.text }), serialize.describe({ type: 'S', name: statement.name }), SYNC]),
    );
    const description = messages.find((m) => m.name === 'rowDescription') as { fields?: readonly ReplyColumn[] } | undefined;
    const prepared: Prepared = {
      text: statement.text,
      paramTypes: parse.parseDescribeStatementResults(messages),
      columns: (description?.fields ?? []).map((field) => ({ name: field.name, dataTypeID: field.dataTypeID })),
    };
    this.prepared.set(statement.name, prepared);
    return prepared;
  }

  /** Text that varies: the unnamed statement, parsed every time, in two calls instead of PGlite's six. */
  private async runUnnamed<R extends Row>(text: string, params: readonly unknown[], begin: boolean): Promise<QueryResult<R>> {
    let described: BackendMessage[];
    try {
      // No Sync yet: the unnamed statement must survive until it is bound.
      described = await this.send(concat([...(begin ? [BEGIN] : []), serialize.parse({ text }), serialize.describe({ type: 'S' })]));
    } catch (error) {
      // After an error the backend skips to the next Sync; send it so that the next statement runs.
      await this.send(SYNC).catch(() => undefined);
      throw error;
    }
    const paramTypes = parse.parseDescribeStatementResults(described);
    const bind = serialize.bind({ values: this.values(params, paramTypes) });
    const messages = await this.send(concat([bind, DESCRIBE_PORTAL, EXECUTE, SYNC]));
    return shape<R>(parse.parseResults(messages, this.db.parsers)[0]!);
  }

  /** Parameters as PGlite's `query()` serialises them: by the type Postgres inferred for each. */
  private values(params: readonly unknown[], types: readonly number[]): (string | null)[] {
    return params.map((param, i) => {
      if (param === null || param === undefined) return null;
      const serializer = this.db.serializers[types[i] ?? 0];
      return serializer ? (serializer(param) as string) : String(param);
    });
  }

  /** One call into the backend; throws the first `DatabaseError` after the whole buffer ran. */
  private send(message: Uint8Array): Promise<BackendMessage[]> {
    return this.db.execProtocolStream(message, { syncToFs: false });
  }

  /**
   * One call into the backend, its reply as bytes (pglite-reply.ts reads them); throws the reply's
   * first `DatabaseError`, after the whole buffer ran, as `send` does. PGlite hands the reply out as
   * views into the WebAssembly memory, valid only during the call, so each chunk is copied.
   */
  private async sendRaw(message: Uint8Array): Promise<Uint8Array> {
    const chunks: Uint8Array[] = [];
    await this.db.execProtocolRawStream(message, { syncToFs: false, onRawData: (chunk) => chunks.push(chunk.slice()) });
    const reply = joinChunks(chunks);
    const error = replyError(reply);
    if (error) throw error;
    return reply;
  }
}

/** The messages after BEGIN's own reply (its CommandComplete and ReadyForQuery). */
function afterBegin(messages: BackendMessage[], begin: boolean): BackendMessage[] {
  if (!begin) return messages;
  const ready = messages.findIndex((m) => m.name === 'readyForQuery');
  return messages.slice(ready + 1);
}

function shape<R>(result: Results): QueryResult<R> {
  return { rows: result.rows as R[], rowCount: Math.max(result.affectedRows ?? 0, result.rows.length) };
}
