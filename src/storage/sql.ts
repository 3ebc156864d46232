/**
 * @module storage/sql
 * The small SQL surface shared by the `pg` and PGlite adapters, so that one implementation of
 * `SessionStorage` runs the same statements on both.
 */
import { isoString } from '../protocol/iso-time.js';

export type Row = Record<string, unknown>;

/**
 * A statement the `pg` adapter prepares once per connection under `name` (a named prepared
 * statement), so that Postgres parses and plans a step's statements once, not on every write.
 * The text must be fixed: one name, one text. PGlite runs the text as it is.
 */
export interface NamedStatement {
  readonly name: string;
  readonly text: string;
}

/** A fixed statement, named for preparation (see `NamedStatement`). */
export function statement(name: string, text: string): NamedStatement {
  return Object.freeze({ name: `ow_${name}`, text });
}

export interface SqlExecutor {
  query<R extends Row = Row>(text: string | NamedStatement, params?: readonly unknown[]): Promise<{ rows: R[]; rowCount: number }>;
}

export interface SqlDatabase extends SqlExecutor {
  readonly kind: 'postgres' | 'pglite';
  /** Runs `fn` inside BEGIN/COMMIT on one connection; any throw rolls back. */
  transaction<T>(fn: (tx: SqlExecutor) => Promise<T>): Promise<T>;
  /** Runs `fn` with every statement on one connection (session-level advisory locks need it). */
  withConnection<T>(fn: (conn: SqlExecutor & { transaction: SqlDatabase['transaction'] }) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

/** Postgres returns BIGINT as text through `pg`; every count we read fits in a JS number. */
export function num(value: unknown): number {
  if (typeof value === 'number') return value;
  if (typeof value === 'bigint') return Number(value);
  if (typeof value === 'string') return Number(value);
  throw new TypeError(`expected a number, got ${typeof value}`);
}

export function numOrNull(value: unknown): number | null {
  return value === null || value === undefined ? null : num(value);
}

/**
 * Times cross the API as ISO-8601 UTC (DECISIONS §4). A `Date` is formatted by `isoString`, which
 * is `toISOString` without V8's date cache for the years 1970-9999 (a step reads back two or three).
 */
export function iso(value: unknown): string {
  if (value instanceof Date) return isoString(value.getTime());
  if (typeof value === 'string') return new Date(value).toISOString();
  throw new TypeError(`expected a timestamp, got ${typeof value}`);
}

export function isoOrNull(value: unknown): string | null {
  return value === null || value === undefined ? null : iso(value);
}

export function strOrNull(value: unknown): string | null {
  return value === null || value === undefined ? null : String(value);
}
