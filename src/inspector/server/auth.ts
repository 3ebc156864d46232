/**
 * @module inspection/auth
 * The inspector's per-launch secret. The server makes a random 256-bit token when it starts and
 * keeps it in memory only: it is printed in the address the host shows (`/?token=…`, as Jupyter
 * does), never written to a file or put in the environment, where a sandboxed tool could read it.
 * The page's first request trades the token in the address for an HttpOnly, SameSite=Strict
 * cookie and is redirected to the bare address; every later request (the page, its assets, the
 * API and the event stream) must present it, in that cookie or as `Authorization: Bearer <token>`.
 * Tokens are compared in constant time.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { HttpError } from './http.js';

/** 32 random bytes: far above the 128 bits a guess would have to cover. */
const TOKEN_BYTES = 32;

/** A fresh secret for one server: 43 base64url characters. */
export function newInspectorToken(): string {
  return randomBytes(TOKEN_BYTES).toString('base64url');
}

/**
 * The cookie that carries the token. Browsers share cookies between ports of one host, so the
 * name carries the port: two inspectors on one machine do not overwrite each other's.
 */
export function tokenCookieName(port: number): string {
  return `openwork_inspector_${port}`;
}

/** The `Set-Cookie` value the entry address answers with: script cannot read it, no other site sends it. */
export function tokenCookie(port: number, token: string): string {
  return `${tokenCookieName(port)}=${token}; Path=/; HttpOnly; SameSite=Strict`;
}

/**
 * True when `candidate` is the token. Both sides are hashed first so that the comparison takes
 * the same time whatever the candidate's length or content.
 */
export function tokenMatches(candidate: string, token: string): boolean {
  const a = createHash('sha256').update(candidate, 'utf8').digest();
  const b = createHash('sha256').update(token, 'utf8').digest();
  return timingSafeEqual(a, b);
}

function cookieValue(req: IncomingMessage, name: string): string | undefined {
  const header = req.headers.cookie;
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

function bearerValue(req: IncomingMessage): string | undefined {
  const header = req.headers.authorization;
  if (!header) return undefined;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match ? match[1] : '';
}

/**
 * Lets the request through when it presents the token (header first, then cookie); otherwise
 * answers 401 `token_required` (nothing presented) or 403 `token_invalid` (a wrong value).
 */
export function checkToken(req: IncomingMessage, port: number, token: string): void {
  const presented = bearerValue(req) ?? cookieValue(req, tokenCookieName(port));
  if (presented === undefined) {
    throw new HttpError(401, 'token_required', 'this inspector needs its secret: open the address it printed (the one ending in ?token=…)');
  }
  if (!tokenMatches(presented, token)) {
    throw new HttpError(403, 'token_invalid', 'the inspector secret does not match: open the address this inspector printed (the one ending in ?token=…)');
  }
}
