/**
 * A loopback HTTP server for hostile model streams: each request is answered 200 with the
 * content type given and a body produced lazily by a generator, so a test can send hundreds of
 * megabytes (or an endless stream) without holding it. It counts the bytes it wrote, which says how
 * far the client read before it stopped reading.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface HostileStreamServer {
  /** Base URL to give the client, ending in `/v1`. */
  readonly url: string;
  /** Bytes written to the sockets so far (all requests). */
  readonly bytesWritten: number;
  /** Requests answered so far. */
  readonly requests: number;
  close(): Promise<void>;
}

/**
 * Starts the server; `body` makes each request's body (`api` from the path), chunk by chunk. The
 * server waits for the socket to drain, so it never runs ahead of what the client reads.
 */
export async function startHostileStream(
  body: (api: 'responses' | 'chat') => Iterable<string | Uint8Array>,
  contentType = 'text/event-stream',
): Promise<HostileStreamServer> {
  let bytesWritten = 0;
  let requests = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      requests += 1;
      const api = (req.url ?? '').includes('/responses') ? 'responses' : 'chat';
      res.writeHead(200, { 'content-type': contentType, 'cache-control': 'no-cache' });
      const iterator = body(api)[Symbol.iterator]();
      const pump = () => {
        while (!res.destroyed) {
          const next = iterator.next();
          if (next.done) {
            res.end();
            return;
          }
          const chunk = typeof next.value === 'string' ? Buffer.from(next.value) : next.value;
          bytesWritten += chunk.length;
          if (!res.write(chunk)) {
            res.once('drain', pump);
            return;
          }
        }
      };
      res.on('close', () => iterator.return?.());
      pump();
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    get bytesWritten() {
      return bytesWritten;
    },
    get requests() {
      return requests;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
