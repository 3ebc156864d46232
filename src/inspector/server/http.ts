/**
 * @module inspection/http
 * The HTTP edge of the inspector server: loopback checks (Host and Origin, against DNS rebinding
 * and cross-site requests), JSON bodies parsed by zod, and typed errors mapped to status codes.
 * The per-launch secret every request must carry is checked in `auth.ts`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { z } from 'zod';
import { InputError, OpenworkError, errorMessage } from '../../errors.js';

/** Codes the HTTP layer itself answers with, beside the runtime's own error codes. */
export type HttpErrorCode =
  | 'forbidden_host'
  | 'forbidden_origin'
  | 'token_required'
  | 'token_invalid'
  | 'unsupported_media_type'
  | 'payload_too_large'
  | 'invalid_json'
  | 'not_found'
  | 'method_not_allowed'
  | 'internal_error';

/** An error the HTTP layer answers with directly. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: HttpErrorCode | string,
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'HttpError';
  }
}

export const LOOPBACK_HOSTS = new Set(['127.0.0.1', '::1', 'localhost']);

const SECURITY_HEADERS: Record<string, string> = {
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
  // The page loads nothing from anywhere but this server.
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
};

const BODY_LIMIT = 1024 * 1024;

/** The `Host` values the server answers to; anything else is a rebinding attempt or a mistake. */
export function allowedHosts(port: number): Set<string> {
  return new Set([`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`]);
}

export function checkHost(req: IncomingMessage, hosts: Set<string>): void {
  const host = req.headers.host ?? '';
  if (!hosts.has(host)) throw new HttpError(421, 'forbidden_host', `this inspector answers only on loopback (Host ${JSON.stringify(host)})`);
}

/**
 * Requests from a browser must come from the page itself: an `Origin` other than this server's,
 * or a cross-site fetch (`Sec-Fetch-Site`), is refused whatever it asks for. A top-level
 * navigation may come from anywhere (a link in a terminal, say); it still needs the secret.
 */
export function checkOrigin(req: IncomingMessage, hosts: Set<string>): void {
  const origin = req.headers.origin;
  if (origin !== undefined) {
    let host = '';
    try {
      host = new URL(origin).host;
    } catch {
      host = '';
    }
    if (!hosts.has(host)) throw new HttpError(403, 'forbidden_origin', `requests are accepted only from the inspector page (Origin ${origin})`);
  }
  if (req.headers['sec-fetch-site'] === 'cross-site' && req.headers['sec-fetch-mode'] !== 'navigate') {
    throw new HttpError(403, 'forbidden_origin', 'cross-site requests are refused');
  }
}

/** Commands are JSON (a form post from elsewhere cannot be one). */
export function checkCommandRequest(req: IncomingMessage): void {
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/json') throw new HttpError(415, 'unsupported_media_type', 'commands must be sent as application/json');
}

/**
 * Reads and validates a JSON body of at most 1 MiB: a larger declared `Content-Length` is refused
 * before anything is read, and a chunked body is refused as soon as it grows past the limit.
 */
export async function readJson<S extends z.ZodType>(req: IncomingMessage, schema: S): Promise<z.output<S>> {
  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > BODY_LIMIT) throw new HttpError(413, 'payload_too_large', `the body is ${declared} bytes; the limit is ${BODY_LIMIT}`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > BODY_LIMIT) throw new HttpError(413, 'payload_too_large', `the body exceeds ${BODY_LIMIT} bytes`);
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  let value: unknown = {};
  if (text.trim() !== '') {
    try {
      value = JSON.parse(text);
    } catch {
      throw new HttpError(400, 'invalid_json', 'the body is not valid JSON');
    }
  }
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new HttpError(400, 'invalid_request', parsed.error.issues.map((i) => `${i.path.join('.') || 'body'}: ${i.message}`).join('; '));
  }
  return parsed.data;
}

/**
 * The path's segments, percent-decoded. A malformed escape (`%E0%A4%A`) or a decoded NUL (`%00`) is a
 * bad request (400 `invalid_request`), not a server fault: no id or name here may hold either.
 */
export function pathSegments(pathname: string): string[] {
  return pathname
    .split('/')
    .filter(Boolean)
    .map((segment) => {
      let decoded: string;
      try {
        decoded = decodeURIComponent(segment);
      } catch {
        throw new HttpError(400, 'invalid_request', `the path segment ${JSON.stringify(segment)} is not valid percent-encoding`);
      }
      if (decoded.includes('\u0000')) throw new HttpError(400, 'invalid_request', `the path segment ${JSON.stringify(segment)} decodes to a NUL character`);
      return decoded;
    });
}

export function writeHead(res: ServerResponse, status: number, headers: Record<string, string>): void {
  res.writeHead(status, { ...SECURITY_HEADERS, ...headers });
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  writeHead(res, status, { 'content-type': 'application/json; charset=utf-8', 'content-length': String(Buffer.byteLength(text)), ...headers });
  res.end(text);
}

function statusOf(error: OpenworkError): number {
  if (error instanceof InputError) return 400;
  switch (error.code) {
    case 'session_not_found':
    case 'checkpoint_not_found':
    case 'turn_not_found':
      return 404;
    case 'core_closed':
      return 503;
    case 'busy':
    case 'turn_not_active':
    case 'permission_not_pending':
    case 'user_input_not_pending':
    case 'session_active':
    case 'reload_required':
    case 'actor_stopped':
    case 'snapshot_required':
    case 'sub_agent_mode_fixed':
      return 409;
    default:
      return 500;
  }
}

/** Answers with `{ error: { code, message, details } }`: the runtime's own code when it has one. */
export function sendError(res: ServerResponse, error: unknown): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  if (error instanceof HttpError) {
    // Node reads and discards an unread body to keep the connection; not one that is too large.
    const headers: Record<string, string> = error.code === 'payload_too_large' ? { connection: 'close' } : {};
    sendJson(res, error.status, { error: { code: error.code, message: error.message, details: error.details } }, headers);
    return;
  }
  if (error instanceof OpenworkError) {
    sendJson(res, statusOf(error), { error: { code: error.code, message: error.message, details: error.details } });
    return;
  }
  sendJson(res, 500, { error: { code: 'internal_error', message: errorMessage(error), details: {} } });
}
