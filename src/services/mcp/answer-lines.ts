/**
 * @module services/mcp/answer-lines
 * The read buffer of a stdio MCP connection: the server's stdout cut into JSON-RPC messages, as
 * the SDK's own `ReadBuffer` does, except for an answer that is not well-formed. The SDK checks
 * every line against its JSON-RPC schema and drops one that fails (it only tells `onerror`), so a
 * server answering a call with an error whose `code` is a string or whose `message` is missing
 * left that call waiting for its whole timeout (10 minutes by default) and then ended it as
 * `timeout`. Here a line that names the id of a request (a string or an integer) and no method, but
 * is not a valid response, becomes a JSON-RPC error for that request, so the call ends at once as
 * `mcp_protocol_error`, saying what the server sent; the connection and the server stay up, and
 * other calls in flight are not touched. A line without such an id is still dropped, as before.
 */
import { ReadBuffer } from '@modelcontextprotocol/sdk/shared/stdio.js';
import { ErrorCode, JSONRPCMessageSchema, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';

/**
 * How many lines of one read (one chunk of the server's stdout) may fail to parse before the rest
 * of that read's lines are dropped unparsed (attack round 7). A line that fails the SDK's schema
 * costs tens of microseconds, all on the host's event loop: 64 KiB of `1` lines held it for most
 * of a second, and a server can send such reads without end.
 */
export const MAX_MALFORMED_LINES_PER_READ = 64;

/** How much of a malformed answer the error quotes. */
const QUOTED_CHARS = 300;

/**
 * The JSON-RPC error that stands for a malformed answer to request `id`. Its code is the SDK's
 * `InternalError`, never `ConnectionClosed` or `RequestTimeout`, which the caller reads as the
 * server gone or silent.
 */
export function malformedAnswer(id: string | number, line: string): JSONRPCMessage {
  const quoted = line.length > QUOTED_CHARS ? `${line.slice(0, QUOTED_CHARS)}… (${line.length} characters)` : line;
  return {
    jsonrpc: '2.0',
    id,
    error: { code: ErrorCode.InternalError, message: `the server answered with a malformed JSON-RPC response: ${quoted}` },
  };
}

/** The id of a request that `value` answers, if it is an answer at all (no method, an id of the right type). */
export function answeredId(value: unknown): string | number | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const { id, method } = value as { id?: unknown; method?: unknown };
  if (method !== undefined) return undefined;
  if (typeof id === 'string' || (typeof id === 'number' && Number.isSafeInteger(id))) return id;
  return undefined;
}

/**
 * The SDK's `ReadBuffer`, with a malformed answer to a known request id turned into that request's
 * error instead of being dropped.
 */
export class AnswerLines extends ReadBuffer {
  private pending: Buffer | undefined;
  private readonly max: number;
  /** Lines of the current read that were not JSON-RPC. */
  private malformed = 0;

  constructor(maxBufferSize = 10 * 1024 * 1024) {
    super({ maxBufferSize });
    this.max = maxBufferSize;
  }

  override append(chunk: Buffer): void {
    const size = (this.pending?.length ?? 0) + chunk.length;
    if (size > this.max) {
      this.clear();
      throw new Error(`ReadBuffer exceeded maximum size of ${this.max} bytes`);
    }
    this.pending = this.pending ? Buffer.concat([this.pending, chunk]) : chunk;
    this.malformed = 0;
  }

  override readMessage(): JSONRPCMessage | null {
    if (!this.pending) return null;
    const index = this.pending.indexOf('\n');
    if (index === -1) return null;
    if (this.malformed >= MAX_MALFORMED_LINES_PER_READ) {
      // A flood: every complete line left in this read goes unparsed, reported once.
      const last = this.pending.lastIndexOf('\n');
      const dropped = this.pending.subarray(0, last + 1).reduce((n, byte) => (byte === 0x0a ? n + 1 : n), 0);
      this.pending = this.pending.subarray(last + 1);
      throw new Error(`the MCP server sent more than ${MAX_MALFORMED_LINES_PER_READ} lines that are not JSON-RPC in one read; ${dropped} more lines were dropped unread`);
    }
    const line = this.pending.toString('utf8', 0, index).replace(/\r$/, '');
    this.pending = this.pending.subarray(index + 1);
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (error) {
      // Not JSON at all: thrown as the SDK's buffer does (the transport reports it to onerror).
      this.malformed += 1;
      throw error;
    }
    const parsed = JSONRPCMessageSchema.safeParse(value);
    if (parsed.success) return parsed.data;
    this.malformed += 1;
    const id = answeredId(value);
    if (id !== undefined) return malformedAnswer(id, line);
    throw parsed.error;
  }

  override clear(): void {
    this.pending = undefined;
  }
}

/**
 * Puts an `AnswerLines` in place of the read buffer of an SDK stdio transport. The field is the
 * SDK's own (not part of its typed surface), so its absence fails the connection loudly rather
 * than leaving calls to wait out their timeouts again.
 */
export function readAnswersLeniently(transport: object, maxBufferSize?: number): void {
  const fields = transport as { _readBuffer?: unknown };
  if (!(fields._readBuffer instanceof ReadBuffer)) throw new Error('the MCP SDK stdio transport has no read buffer to replace (SDK changed?)');
  fields._readBuffer = new AnswerLines(maxBufferSize);
}
