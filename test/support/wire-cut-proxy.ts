/**
 * A TCP proxy in front of the test's Postgres server that reads the wire protocol's message frames,
 * to play the two ways a write's outcome becomes unknown (integrity3):
 *
 * - `cutAfterAnswer(marker)`: the next statement whose Parse or Bind names `marker` (a prepared
 *   statement's name, e.g. `ow_commit_tool_result`, or a piece of an unnamed statement's text), or
 *   whose simple Query holds it (`COMMIT`), is forwarded with its Sync;
 *   the server runs and commits it, and its answer reaches the proxy, which drops the answer and then
 *   the connection: the client hears only `Connection terminated unexpectedly`, after the commit.
 *   Answers to statements sent before it on the same connection are still delivered.
 * - `refuseNext(count, message)`: the next `count` connections are answered, as a server that is
 *   starting up or shutting down answers them, with a FATAL 57P03 error carrying `message`, and closed.
 * - `severSilently()`: every open connection dies the way a middlebox kills an idle one: the server
 *   side is closed (its backend ends), the client side is left open and looks healthy, and the first
 *   bytes the client writes on it are answered with a TCP reset (ECONNRESET).
 */
import { createServer, connect, type Server, type Socket } from 'node:net';
import { listenLocally } from './tcp-proxy.js';

export interface WireCutProxy {
  port: number;
  /** `url` with its host and port replaced by the proxy's. */
  urlFor(url: string): string;
  /**
   * Arms one cut: the next statement naming `marker` commits, and its answer and connection are
   * lost; `onCut` runs at that moment, before the client can notice.
   */
  cutAfterAnswer(marker: string, onCut?: () => void): void;
  /** Resolves once an armed cut has happened. */
  readonly cut: Promise<void>;
  /** Statements whose answer a cut dropped so far. */
  readonly cuts: number;
  severSilently(): void;
  refuseNext(count: number, message: string): void;
  /** Connections refused by `refuseNext` so far. */
  readonly refused: number;
  /** Connections opened through the proxy so far. */
  readonly connections: number;
  close(): Promise<void>;
}

/** Splits a byte stream into protocol messages: an untyped first message (startup) when `untypedFirst`. */
class Framer {
  private buffer: Buffer = Buffer.alloc(0);
  constructor(private untypedFirst: boolean) {}

  push(chunk: Buffer): Buffer[] {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    const out: Buffer[] = [];
    for (;;) {
      const head = this.untypedFirst ? 0 : 1;
      if (this.buffer.length < head + 4) break;
      const size = head + this.buffer.readInt32BE(head);
      if (this.buffer.length < size) break;
      out.push(this.buffer.subarray(0, size));
      this.buffer = this.buffer.subarray(size);
      this.untypedFirst = false;
    }
    return out;
  }
}

/** A FATAL ErrorResponse message (severity, SQLSTATE, message), as the server writes it. */
function fatal(code: string, message: string): Buffer {
  const fields = Buffer.concat(
    [['S', 'FATAL'], ['V', 'FATAL'], ['C', code], ['M', message]].map(([k, v]) => Buffer.from(`${k}${v}\0`)).concat(Buffer.from([0])),
  );
  const head = Buffer.alloc(5);
  head.write('E', 0);
  head.writeInt32BE(fields.length + 4, 1);
  return Buffer.concat([head, fields]);
}

export async function startWireCutProxy(target: { host: string; port: number }): Promise<WireCutProxy> {
  const sockets = new Set<Socket>();
  let armed: Buffer | null = null;
  let cuts = 0;
  let connections = 0;
  let signalCut: () => void = () => undefined;
  let onCut: (() => void) | undefined;
  let cut = new Promise<void>((resolve) => (signalCut = resolve));
  const severs = new Set<() => void>();
  let toRefuse = 0;
  let refusal = '';
  let refused = 0;

  const server: Server = createServer((client) => {
    connections += 1;
    if (toRefuse > 0) {
      toRefuse -= 1;
      refused += 1;
      client.once('data', () => client.end(fatal('57P03', refusal)));
      client.on('error', () => client.destroy());
      return;
    }
    const upstream = connect(target.port, target.host);
    sockets.add(client);
    sockets.add(upstream);
    const fromClient = new Framer(true);
    const fromServer = new Framer(false);
    let syncsSent = 0;
    // The server's first ReadyForQuery ends the startup, not a statement: counting from -1 pairs the rest with Syncs.
    let readySeen = -1;
    /** The Sync count whose ReadyForQuery ends the doomed statement's answer (0: none). */
    let doomedAt = 0;
    let doomedPending = false;
    let severed = false;

    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
      severs.delete(sever);
    };
    const sever = () => {
      severed = true;
      upstream.destroy();
    };
    severs.add(sever);

    client.on('data', (chunk: Buffer) => {
      if (severed) {
        // The first bytes on a connection the middlebox forgot: a reset, as a stateful firewall answers.
        client.resetAndDestroy();
        return;
      }
      for (const message of fromClient.push(chunk)) {
        const type = String.fromCharCode(message[0]!);
        if (armed && (type === 'P' || type === 'B' || type === 'Q') && message.includes(armed)) {
          armed = null;
          doomedPending = true;
        }
        // Each Sync, and each simple Query, is answered by one ReadyForQuery.
        if (type === 'S' || type === 'Q') {
          syncsSent += 1;
          if (doomedPending) {
            doomedPending = false;
            doomedAt = syncsSent;
          }
        }
        upstream.write(message);
      }
    });
    upstream.on('data', (chunk: Buffer) => {
      for (const message of fromServer.push(chunk)) {
        const ready = message[0] === 0x5a; // 'Z'
        // Everything of the doomed statement's answer (after the previous statement's ReadyForQuery) is dropped.
        const doomed = doomedAt > 0 && readySeen >= doomedAt - 1;
        if (ready) readySeen += 1;
        if (!doomed) {
          if (!severed) client.write(message);
          continue;
        }
        if (ready && readySeen === doomedAt) {
          // The server committed and answered; the client never hears of it.
          cuts += 1;
          onCut?.();
          onCut = undefined;
          drop();
          signalCut();
          return;
        }
      }
    });
    client.on('error', drop);
    upstream.on('error', () => (severed ? undefined : drop()));
    client.on('close', drop);
    upstream.on('close', () => (severed ? undefined : drop()));
  });
  const { port, urlFor } = await listenLocally(server);
  return {
    port,
    urlFor,
    cutAfterAnswer(marker, then) {
      armed = Buffer.from(marker);
      onCut = then;
      cut = new Promise<void>((resolve) => (signalCut = resolve));
    },
    get cut() {
      return cut;
    },
    get cuts() {
      return cuts;
    },
    refuseNext(count, message) {
      toRefuse = count;
      refusal = message;
    },
    get refused() {
      return refused;
    },
    severSilently() {
      for (const sever of [...severs]) sever();
    },
    get connections() {
      return connections;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
