/**
 * @module storage/pglite-reply
 * Reads the backend's reply to one run of a prepared statement (Bind + Execute + Sync, perhaps
 * after BEGIN) straight from its bytes into rows, for pglite-protocol.ts's hot path.
 *
 * Why: PGlite's `execProtocolStream` turns every reply message into a `BackendMessage` object
 * (a DataRow's fields as strings in an array, a CommandComplete, a ReadyForQuery...), keeps them on a
 * per-call `CurrentQuery`, and `parseResults` then turns those into rows with `Object.fromEntries`,
 * all of it for the one or two rows a fact statement returns. That was about a third of PGlite's own
 * JavaScript per step (docs/benchmarks.md, "PGlite glue per step"). The column names and types are
 * known once per prepared statement (its RowDescription), so a row here is one object filled in
 * column order, each value through the instance's parser for its type, as `parseResults` does.
 *
 * What stays PGlite's: an ErrorResponse is parsed by PGlite's own protocol parser, so a failure is
 * the very `DatabaseError` it would have thrown (the first one of the reply, as PGlite keeps).
 * Notices are dropped, as PGlite drops them when no `onNotice` is given and `debug` is 0 (the
 * store sets neither); this store never LISTENs, so a reply carries no notification.
 */
import { protocol } from '@electric-sql/pglite';

/** A column of a prepared statement's result: its name and type (from its RowDescription). */
export interface ReplyColumn {
  readonly name: string;
  readonly dataTypeID: number;
}

/** A parser by type id, as PGlite keeps them on the instance (`db.parsers`). */
export type TypeParsers = Readonly<Record<number, ((value: string, typeId: number) => unknown) | undefined>>;

/** The outcome in the shape of `SqlExecutor.query`. */
export interface ReplyResult<R> {
  rows: R[];
  rowCount: number;
}

const decoder = new TextDecoder();

/** Message types of the backend that matter here (protocol-message-formats). */
const DATA_ROW = 0x44; // 'D'
const COMMAND_COMPLETE = 0x43; // 'C'
const ERROR_RESPONSE = 0x45; // 'E'
const READY_FOR_QUERY = 0x5a; // 'Z'

/** Command tags whose last word is a count of affected rows, as PGlite's `parseResults` counts them. */
const COUNTING_COMMANDS = new Set(['INSERT', 'UPDATE', 'DELETE', 'COPY', 'MERGE']);

/** Joins the chunks PGlite handed out (the backend flushes its output buffer in one or more writes). */
export function joinChunks(chunks: readonly Uint8Array[]): Uint8Array {
  if (chunks.length === 1) return chunks[0]!;
  let length = 0;
  for (const chunk of chunks) length += chunk.length;
  const out = new Uint8Array(length);
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.length;
  }
  return out;
}

/** The first ErrorResponse of a reply as PGlite's `DatabaseError`, or null when there is none. */
export function replyError(bytes: Uint8Array): Error | null {
  for (let at = 0; at + 5 <= bytes.length; ) {
    const length = readInt32(bytes, at + 1);
    if (bytes[at] === ERROR_RESPONSE) {
      let error: Error | null = null;
      new protocol.Parser().parse(bytes.subarray(at, at + 1 + length), (message) => {
        if (error === null && message instanceof Error) error = message;
      });
      return error;
    }
    at += 1 + length;
  }
  return null;
}

/**
 * The rows and count of one statement's reply. `skipFirstReady` drops everything up to and including
 * the first ReadyForQuery (the reply to a BEGIN sent in the same buffer). Only the first result set
 * counts, as pglite-protocol.ts has always taken `sets[0]`.
 */
export function readRows<R>(bytes: Uint8Array, columns: readonly ReplyColumn[], parsers: TypeParsers, skipFirstReady: boolean): ReplyResult<R> {
  const rows: R[] = [];
  let affected = 0;
  let skipping = skipFirstReady;
  for (let at = 0; at + 5 <= bytes.length; ) {
    const type = bytes[at]!;
    const length = readInt32(bytes, at + 1);
    const end = at + 1 + length;
    if (skipping) {
      if (type === READY_FOR_QUERY) skipping = false;
    } else if (type === DATA_ROW) {
      rows.push(readRow<R>(bytes, at + 5, columns, parsers));
    } else if (type === COMMAND_COMPLETE) {
      // The tag is a C string: "INSERT 0 1", "UPDATE 2", "SELECT 1".
      const tag = decoder.decode(bytes.subarray(at + 5, end - 1));
      const words = tag.split(' ');
      const count = Number.parseInt(words[words.length - 1]!, 10);
      if (COUNTING_COMMANDS.has(words[0]!) && !Number.isNaN(count)) affected += count;
      break;
    }
    at = end;
  }
  return { rows, rowCount: Math.max(affected, rows.length) };
}

function readRow<R>(bytes: Uint8Array, at: number, columns: readonly ReplyColumn[], parsers: TypeParsers): R {
  const count = (bytes[at]! << 8) | bytes[at + 1]!;
  let cursor = at + 2;
  const row: Record<string, unknown> = {};
  for (let i = 0; i < count; i += 1) {
    const length = readInt32(bytes, cursor);
    cursor += 4;
    const column = columns[i];
    const name = column?.name ?? `?column?${i}`;
    if (length === -1) {
      row[name] = null;
      continue;
    }
    const text = decoder.decode(bytes.subarray(cursor, cursor + length));
    cursor += length;
    const parser = column ? parsers[column.dataTypeID] : undefined;
    row[name] = parser ? parser(text, column!.dataTypeID) : text;
  }
  return row as R;
}

function readInt32(bytes: Uint8Array, at: number): number {
  return (bytes[at]! << 24) | (bytes[at + 1]! << 16) | (bytes[at + 2]! << 8) | bytes[at + 3]!;
}
