/**
 * A TCP proxy in front of the test's Postgres server that can stop forwarding, to play a network
 * that hangs rather than fails: `stall()` stops reading on every connection in both directions
 * (bytes wait in the kernel's buffers, as packets wait for TCP retransmission during a partition),
 * and new connections are accepted but not forwarded; `resume()` lets everything through again, in
 * order, including a statement the client gave up on meanwhile (a late packet), and the close of a
 * socket the client destroyed. Nothing is dropped or reset: the database only ever sees late bytes.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

export interface TcpProxy {
  /** The proxy's port on 127.0.0.1. */
  port: number;
  /** `url` with its host and port replaced by the proxy's. */
  urlFor(url: string): string;
  stall(): void;
  resume(): void;
  /** Connections opened through the proxy so far. */
  readonly connections: number;
  close(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const pairs = new Set<[Socket, Socket]>();
  let stalled = false;
  let connections = 0;
  const server: Server = createServer((client) => {
    connections += 1;
    const upstream = connect(target.port, target.host);
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    // `pipe` resumes its source, so a connection opened during a stall is piped only at `resume()`.
    if (stalled) {
      client.pause();
      upstream.pause();
    } else {
      client.pipe(upstream);
      upstream.pipe(client);
    }
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop);
    upstream.on('error', drop);
    client.on('close', drop);
    upstream.on('close', drop);
  });
  const { port, urlFor } = await listenLocally(server);
  return {
    port,
    urlFor,
    stall() {
      stalled = true;
      for (const [a, b] of pairs) {
        // `pipe` resumes a source when its destination drains; unpiping first keeps it paused.
        a.unpipe(b);
        b.unpipe(a);
        a.pause();
        b.pause();
      }
    },
    resume() {
      stalled = false;
      for (const [a, b] of pairs) {
        a.pipe(b);
        b.pipe(a);
        a.resume();
        b.resume();
      }
    },
    get connections() {
      return connections;
    },
    async close() {
      for (const [a, b] of pairs) {
        a.destroy();
        b.destroy();
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Starts `server` on a free loopback port; `urlFor` points a database URL at it instead of the server. */
export async function listenLocally(server: Server): Promise<{ port: number; urlFor(url: string): string }> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    port,
    urlFor(url) {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
  };
}
