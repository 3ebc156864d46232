/**
 * API calls to an inspector server the way a trusted host client makes them: the bare address
 * plus the server's per-launch secret as a bearer token.
 */
import type { InspectorServer } from '../../src/inspector/server/server.js';

export function inspectorFetch(server: Pick<InspectorServer, 'origin' | 'token'>, path: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  headers.set('authorization', `Bearer ${server.token}`);
  return fetch(new URL(path, server.origin), { ...init, headers });
}
