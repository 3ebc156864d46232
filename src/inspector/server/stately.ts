/**
 * @module inspection/stately
 * `connectStatelyInspector`: sends the inspection events of every session to a local
 * `@statelyai/inspect` WebSocket relay (`createInspectorServer` from `@statelyai/inspect/server`),
 * for those who watch XState actors in Stately's inspector.
 *
 * `@statelyai/inspect` and `ws` are optional: they are imported only when this function is called.
 * The connection never retries and never keeps the process alive once stopped (the package's own
 * `createWebSocketInspector` retries every 5 s forever when no relay listens, and its `stop()`
 * does not cancel the retry). XState numbers actors `x:0`, `x:1`, ... per process, so several
 * processes sending to one relay would collide: the ids are prefixed with the openwork session id.
 */
import type { AnyActorRef, InspectionEvent, Observer } from 'xstate';
import { InspectionError, errorMessage } from '../../errors.js';
import { safeStringify } from './safe-json.js';

export interface StatelyInspectorOptions {
  /** The relay, e.g. `ws://127.0.0.1:8080`. */
  url: string;
  /** How long to wait for the relay to accept the connection (default 3,000 ms). */
  connectTimeoutMs?: number;
  /** Nesting depth of serialised snapshots and events (default 10). */
  serializationDepthLimit?: number;
  /** Trims what leaves the process, e.g. drops message arrays from the context. */
  sanitizeContext?: (context: unknown) => unknown;
}

export interface StatelyInspectorConnection {
  /** Pass this to `createCore({ inspect })`, alone or through `combineInspectors`. */
  readonly inspect: Observer<InspectionEvent>;
  /** True while the socket is open. */
  readonly connected: boolean;
  /**
   * Sends what was already handed over (the package defers each event by one timer tick), then
   * closes the socket; later events are dropped. Nothing is left that keeps Node alive.
   */
  stop(): Promise<void>;
}

interface StatelyModule {
  createInspector(
    adapter: { start?: () => void; stop?: () => void; send(event: unknown): void },
    options?: { serializationDepthLimit?: number; sanitizeContext?: (context: unknown) => unknown },
  ): { inspect: Observer<InspectionEvent> };
}

interface SocketLike {
  readyState: number;
  send(data: string): void;
  close(): void;
  terminate(): void;
  on(event: 'open' | 'close', listener: () => void): void;
  on(event: 'error', listener: (error: Error) => void): void;
}

type SocketConstructor = new (url: string) => SocketLike;

const OPEN = 1;
const CLOSED = 3;
const ID_FIELDS = ['sessionId', 'rootId', 'parentId', 'sourceId'] as const;

const INSTALL_HINT = "install @statelyai/inspect and ws to use Stately's inspector (npm i -D @statelyai/inspect ws)";

/** Imports an optional package; `inspector_unavailable` when it is absent or fails to load. */
async function importOptional<T>(specifier: string): Promise<T> {
  try {
    return (await import(specifier)) as T;
  } catch (cause) {
    const absent = (cause as { code?: unknown })?.code === 'ERR_MODULE_NOT_FOUND';
    throw new InspectionError(
      'inspector_unavailable',
      absent ? `${specifier} is not installed; ${INSTALL_HINT}` : `${specifier} could not be loaded (${errorMessage(cause)}); ${INSTALL_HINT}`,
      { cause, details: { package: specifier } },
    );
  }
}

function sessionOfRoot(ref: AnyActorRef): string {
  return ref.id.startsWith('session:') ? ref.id.slice('session:'.length) : ref.id;
}

/**
 * Connects to a running `@statelyai/inspect` relay; throws `inspector_unreachable` when none answers.
 *
 * @example
 * // In one terminal: node -e "import('@statelyai/inspect/server').then(m => m.createInspectorServer({ port: 8080 }))"
 * const stately = await connectStatelyInspector({ url: 'ws://127.0.0.1:8080' });
 * const core = await createCore({ storage, model, inspect: stately.inspect });
 * // ...
 * await core.shutdown();
 * stately.stop();
 */
export async function connectStatelyInspector(options: StatelyInspectorOptions): Promise<StatelyInspectorConnection> {
  const stately = await importOptional<StatelyModule>('@statelyai/inspect');
  const wsModule = await importOptional<{ WebSocket?: SocketConstructor; default?: SocketConstructor }>('ws');
  const Socket = wsModule.WebSocket ?? wsModule.default;
  if (!Socket) throw new InspectionError('inspector_unavailable', 'the ws package has no WebSocket export');

  const depthLimit = options.serializationDepthLimit ?? 10;
  let stopping: Promise<void> | null = null;
  let closed = false;

  let socket: SocketLike;
  try {
    socket = new Socket(options.url);
  } catch (cause) {
    throw new InspectionError('inspector_unreachable', `cannot connect to ${options.url}: ${errorMessage(cause)}`, { cause });
  }

  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      socket.terminate();
      reject(new InspectionError('inspector_unreachable', `no inspector relay answered at ${options.url} within ${options.connectTimeoutMs ?? 3_000} ms`));
    }, options.connectTimeoutMs ?? 3_000);
    socket.on('open', () => {
      clearTimeout(timer);
      resolve();
    });
    socket.on('error', (error) => {
      clearTimeout(timer);
      socket.terminate();
      reject(new InspectionError('inspector_unreachable', `no inspector relay at ${options.url}: ${error.message}`, { cause: error }));
    });
  });
  // After the first connection, a relay that goes away only closes the socket: no retry, no timer.
  socket.on('error', () => undefined);

  function send(text: string): void {
    // Events that find the relay gone are dropped: inspection must not grow memory or block the runtime.
    if (!closed && socket.readyState === OPEN) socket.send(text);
  }

  const perSystem = new WeakMap<object, Observer<InspectionEvent>>();

  function inspectorFor(root: AnyActorRef): Observer<InspectionEvent> {
    const prefix = sessionOfRoot(root);
    const inspector = stately.createInspector(
      {
        send(event) {
          const copy = { ...(event as Record<string, unknown>) };
          for (const field of ID_FIELDS) {
            if (typeof copy[field] === 'string' && copy[field] !== 'anonymous') copy[field] = `${prefix}/${copy[field] as string}`;
          }
          send(safeStringify(copy, { depthLimit }));
        },
      },
      {
        serializationDepthLimit: depthLimit,
        ...(options.sanitizeContext ? { sanitizeContext: options.sanitizeContext } : {}),
      },
    );
    return inspector.inspect;
  }

  return {
    inspect: {
      next(event) {
        if (stopping) return;
        // Inspection events of a running actor system always carry full actor references.
        const ref = event.actorRef as AnyActorRef;
        let target = perSystem.get(ref.system);
        if (!target) {
          if (ref._parent) return;
          target = inspectorFor(ref);
          perSystem.set(ref.system, target);
        }
        target.next?.(event);
      },
    },
    get connected() {
      return !closed && socket.readyState === OPEN;
    },
    stop() {
      stopping ??= new Promise<void>((resolve) => {
        // Timers of equal delay run in order: this one runs after every event the package deferred before.
        setTimeout(() => {
          closed = true;
          if (socket.readyState === CLOSED) {
            resolve();
            return;
          }
          socket.on('close', () => resolve());
          socket.close();
          // A relay that never answers the close frame would hold the socket for ws's 30 s close timeout.
          setTimeout(() => socket.terminate(), 1_000).unref();
        }, 0);
      });
      return stopping;
    },
  };
}
