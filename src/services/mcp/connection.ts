/**
 * @module services/mcp/connection
 * `McpConnection`: the one live connection to one MCP server, made through the official SDK
 * client. Stdio servers are child processes (their stderr is kept, last 4 KiB, for error texts);
 * HTTP servers are reached over Streamable HTTP, falling back to HTTP+SSE when the server does not
 * speak it. A connection that is lost (the process exited, the HTTP session broke) is made again,
 * a new process or a new session, by the next call that needs it. The only file that imports the
 * MCP SDK's transports.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { getDefaultEnvironment, StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { readAnswersLeniently } from './answer-lines.js';
import { guardedFetch } from './http-answers.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { errorMessage, McpServerError } from '../../errors.js';
import type { McpHttpServerConfig, McpServerConfig } from './config.js';

/** Default wait for connecting and initialising a server. */
export const MCP_CONNECT_TIMEOUT_MS = 30_000;
const STDERR_TAIL_BYTES = 4096;
const CLIENT_INFO = { name: 'openwork-core', version: '0.1.0' };

export interface McpConnectionEvents {
  /** The server said its tool list changed, or a new connection replaced a lost one. */
  toolsChanged(): void;
}

interface Live {
  client: Client;
  transport: Transport;
}

export class McpConnection {
  private live: Live | null = null;
  private opening: Promise<Live> | null = null;
  private closed = false;
  private stderrTail = '';
  private connections = 0;

  constructor(
    readonly server: string,
    private readonly config: McpServerConfig,
    private readonly events: McpConnectionEvents,
  ) {}

  /** The pid of the stdio server's current process, or null (HTTP, or not running). */
  get pid(): number | null {
    const transport = this.live?.transport;
    return transport instanceof StdioClientTransport ? transport.pid : null;
  }

  /** The last lines the stdio server wrote to stderr, for error texts ('' when none). */
  get stderr(): string {
    return this.stderrTail.trim();
  }

  /** The connected client, connecting (again) first when there is none. */
  async client(): Promise<Client> {
    if (this.closed) throw new McpServerError(this.server, `the MCP server "${this.server}" was closed`);
    if (this.live) return this.live.client;
    this.opening ??= this.open().finally(() => {
      this.opening = null;
    });
    return (await this.opening).client;
  }

  /**
   * Drops the current connection after a failure that may have left it unusable (a transport
   * error, a timed-out call); the next call connects again.
   */
  async reset(): Promise<void> {
    const live = this.live;
    this.live = null;
    await live?.client.close().catch(() => undefined);
  }

  /** Ends the connection for good: the stdio process is stopped (stdin closed, then signals). */
  async close(): Promise<void> {
    this.closed = true;
    await this.opening?.catch(() => undefined);
    await this.reset();
  }

  private async open(): Promise<Live> {
    const timeout = this.config.connectTimeoutMs ?? MCP_CONNECT_TIMEOUT_MS;
    let live: Live;
    try {
      live = 'command' in this.config ? await this.connectStdio(timeout) : await this.connectHttp(this.config, timeout);
    } catch (error) {
      const tail = this.stderr ? `; its stderr: ${this.stderr}` : '';
      throw new McpServerError(this.server, `cannot connect to the MCP server "${this.server}": ${errorMessage(error)}${tail}`, { cause: error });
    }
    if (this.closed) {
      await live.client.close().catch(() => undefined);
      throw new McpServerError(this.server, `the MCP server "${this.server}" was closed`);
    }
    this.live = live;
    this.connections += 1;
    // A restarted server may offer other tools than the one that went away.
    if (this.connections > 1) this.events.toolsChanged();
    return live;
  }

  private client_(kind: 'stdio' | 'streamable-http' | 'sse'): Client {
    const client = new Client(CLIENT_INFO, { capabilities: {} });
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => this.events.toolsChanged());
    client.onclose = () => {
      // A process that exits or a session that ends: the next call connects again.
      if (this.live?.client === client) this.live = null;
    };
    client.onerror = (error) => {
      if (this.live?.client !== client || !connectionLost(kind, error)) return;
      // Closing the client rejects its pending requests (ConnectionClosed), so a call in flight on a
      // server that went away ends now as `mcp_server_exited` instead of waiting for its timeout.
      void this.reset();
    };
    return client;
  }

  private async connectStdio(timeout: number): Promise<Live> {
    const config = this.config as Extract<McpServerConfig, { command: string }>;
    this.stderrTail = '';
    const transport = new StdioClientTransport({
      command: config.command,
      ...(config.args ? { args: config.args } : {}),
      ...(config.env ? { env: { ...getDefaultEnvironment(), ...config.env } } : {}),
      ...(config.cwd ? { cwd: config.cwd } : {}),
      // Piped, not inherited: a server's log lines must not land in the host's terminal.
      stderr: 'pipe',
    });
    // A malformed answer ends its call as a protocol error instead of being dropped (answer-lines.ts).
    readAnswersLeniently(transport);
    transport.stderr?.on('data', (chunk: Buffer) => {
      this.stderrTail = (this.stderrTail + chunk.toString('utf8')).slice(-STDERR_TAIL_BYTES);
    });
    return connectOrClose(this.client_('stdio'), transport, timeout);
  }

  private async connectHttp(config: McpHttpServerConfig, timeout: number): Promise<Live> {
    const url = new URL(config.url);
    const requestInit: RequestInit = config.headers ? { headers: config.headers } : {};
    if (config.type !== 'sse') {
      const client = this.client_('streamable-http');
      // Bodies and events are read within bounds, and a bad answer ends its call (http-answers.ts).
      const transport = new StreamableHTTPClientTransport(url, { requestInit, fetch: guardedFetch('streamable-http') });
      try {
        await client.connect(transport, { timeout });
        return { client, transport };
      } catch (error) {
        await client.close().catch(() => undefined);
        // Only a server that answered, but not as a Streamable HTTP server would, gets the old transport.
        if (!answeredWithHttpStatus(error)) throw error;
      }
    }
    // The SSE transport sends `requestInit.headers` on its event stream as well as on its posts.
    return connectOrClose(this.client_('sse'), new SSEClientTransport(url, { requestInit, fetch: guardedFetch('sse') }), timeout);
  }
}

/** Connects `client` over `transport`; a client that could not connect is closed before the error goes on. */
async function connectOrClose(client: Client, transport: Live['transport'], timeout: number): Promise<Live> {
  try {
    await client.connect(transport, { timeout });
  } catch (error) {
    await client.close().catch(() => undefined);
    throw error;
  }
  return { client, transport };
}

/**
 * Whether a transport error means the server is gone. Streamable HTTP resumes a broken event
 * stream by itself, so only its giving up counts (the SDK's own texts, pinned by the tests); the
 * older SSE transport cannot resume a session, so any error of its event stream counts. Stdio
 * errors (a line that is not JSON) never do: the process's exit is what says it is gone.
 */
function connectionLost(kind: 'stdio' | 'streamable-http' | 'sse', error: Error): boolean {
  switch (kind) {
    case 'stdio':
      return false;
    case 'streamable-http':
      return /^(Failed to reconnect|Maximum reconnection attempts)/.test(error.message);
    case 'sse':
      return /SSE error/.test(error.message);
    default: {
      const never: never = kind;
      throw new Error(`unknown transport ${String(never)}`);
    }
  }
}

/** Whether a failed Streamable HTTP connect got an HTTP answer (4xx: the server may be SSE-only). */
export function answeredWithHttpStatus(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return typeof code === 'number' && code >= 400 && code < 500;
}

/**
 * Whether a request was answered with a redirect the transport did not follow (to another origin,
 * or past its bound on redirects): the server answered, but not with an MCP answer.
 */
export function redirected(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return typeof code === 'number' && code >= 300 && code < 400;
}

/**
 * Whether a request was refused because the server no longer knows our HTTP session (it
 * restarted): 404 by the specification, 400 naming the session in practice. Nothing ran, so the
 * request may be sent again on a new session.
 */
export function sessionExpired(error: unknown): boolean {
  const { code, message } = error as { code?: unknown; message?: unknown };
  return code === 404 || (code === 400 && typeof message === 'string' && /session/i.test(message));
}
