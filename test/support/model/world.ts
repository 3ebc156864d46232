/**
 * The real runtime with every port held by the test: each storage write, each model stream, each
 * authorisation, each tool run and each compaction waits at a gate until the test lets it commit,
 * fail or emit. Storage is a real database (PGlite or Postgres); a passed gate runs the real SQL, a
 * failed one rejects as a broken connection would. The actors are reached through XState inspection,
 * which is also where transition coverage of the running charts is measured.
 */
import { z } from 'zod';
import type { AnyActorRef, InspectionEvent } from 'xstate';
import { createCore, type Core } from '../../../src/core.js';
import { ModelError, StorageError } from '../../../src/errors.js';
import type { SessionUpdateEnvelope } from '../../../src/protocol/updates.js';
import type { SessionHandle } from '../../../src/session-handle.js';
import type { ModelCallOptions, ModelPort, ModelRequest, ModelStreamEvent } from '../../../src/services/model/port.js';
import type { Authorizer } from '../../../src/services/runtime.js';
import { defineTool, type Authorization, type ToolContext, type ToolExecuteResult } from '../../../src/services/tools/define.js';
import type { SessionStorage } from '../../../src/storage/storage.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { transitionKey, type TransitionDefinitionLike } from './transitions.js';
import { observe, SESSION_ID, type Observation, type WorldConfig } from './stimuli.js';

export const GATED_WRITES = [
  'beginTurn',
  'appendTurnMessages',
  'recordModelCallStart',
  'commitAssistantMessage',
  'commitToolResult',
  'commitPlanUpdate',
  'finishTurn',
] as const;
export type GatedWrite = (typeof GATED_WRITES)[number];

interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

export interface StorageGate {
  kind: 'storage';
  method: GatedWrite;
  args: unknown[];
  answered: boolean;
  pass(): void;
  fail(): void;
}

export interface ModelGate {
  kind: 'model';
  request: ModelRequest;
  turnId: string | null;
  answered: boolean;
  completed: boolean;
  aborted: boolean;
  push(event: ModelStreamEvent): void;
  end(): void;
  fail(error: Error): void;
}

export interface AuthorizeGate {
  kind: 'authorize';
  answered: boolean;
  answer(value: Authorization): void;
  fail(error: Error): void;
}

export interface ToolGate {
  kind: 'tool';
  answered: boolean;
  ctx: ToolContext;
  answer(value: ToolExecuteResult): void;
  fail(error: Error): void;
}

export interface CompactionGate {
  kind: 'compaction';
  answered: boolean;
  answer(): void;
  fail(error: Error): void;
}

export type Gate = StorageGate | ModelGate | AuthorizeGate | ToolGate | CompactionGate;

/** What the model port saw, with the turn that asked. */
export interface RecordedRequest {
  request: ModelRequest;
  turnId: string | null;
}

export interface WorldOptions {
  storage: SqlSessionStorage;
  config: WorldConfig;
  /** Called for every microstep's transition keys (coverage of the running charts). */
  onTransition?: (key: string) => void;
  sessionId?: string;
}

/** A quiet system: nothing moved for a few event-loop turns and no storage call is in flight. */
async function quiet(world: { activity: number; inFlight: number }, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = -1;
  let still = 0;
  while (still < 4) {
    await new Promise<void>((r) => setImmediate(r));
    if (world.activity === last && world.inFlight === 0) still += 1;
    else still = 0;
    last = world.activity;
    if (Date.now() > deadline) throw new Error('the runtime did not settle');
  }
}

export class World {
  core!: Core;
  session!: SessionHandle;
  readonly gates: Gate[] = [];
  readonly updates: SessionUpdateEnvelope[] = [];
  readonly requests: RecordedRequest[] = [];
  activity = 0;
  inFlight = 0;
  /** When set, every gate answers itself with success (a healthy runtime, to finish a path). */
  autopilot = false;
  private root: AnyActorRef | undefined;
  private trigger: { machine: string; state: string; fire: () => void } | null = null;
  private callCounter = 0;

  private constructor(private readonly options: WorldOptions) {}

  static async create(options: WorldOptions): Promise<World> {
    const world = new World(options);
    await world.start();
    return world;
  }

  get storage(): SqlSessionStorage {
    return this.options.storage;
  }

  private touch(): void {
    this.activity += 1;
  }

  private gatedStorage(inner: SessionStorage): SessionStorage {
    return new Proxy(inner, {
      get: (target, prop, receiver) => {
        const value = Reflect.get(target, prop, receiver) as unknown;
        if (typeof value !== 'function') return value;
        const method = prop as string;
        const call = (...args: unknown[]) => {
          this.inFlight += 1;
          this.touch();
          return Promise.resolve((value as (...a: unknown[]) => Promise<unknown>).apply(target, args)).finally(() => {
            this.inFlight -= 1;
            this.touch();
          });
        };
        if (!(GATED_WRITES as readonly string[]).includes(method)) return call;
        return (...args: unknown[]) => {
          if (this.autopilot) return call(...args);
          const d = deferred<unknown>();
          const gate: StorageGate = {
            kind: 'storage',
            method: method as GatedWrite,
            args,
            answered: false,
            pass: () => {
              gate.answered = true;
              call(...args).then(d.resolve, d.reject);
            },
            fail: () => {
              gate.answered = true;
              d.reject(new StorageError(`injected failure in ${method}`));
            },
          };
          this.gates.push(gate);
          this.touch();
          return d.promise;
        };
      },
    });
  }

  private model(): ModelPort {
    const world = this;
    return {
      id: 'gated/model',
      providerId: 'gated',
      model: 'model',
      stream(request: ModelRequest, { signal }: ModelCallOptions): AsyncIterable<ModelStreamEvent> {
        const turnId = world.activeTurnId();
        world.requests.push({ request: structuredClone(request), turnId });
        const queue: Array<{ event?: ModelStreamEvent; end?: true; error?: Error }> = [];
        let wake: (() => void) | null = null;
        const gate: ModelGate = {
          kind: 'model',
          request,
          turnId,
          answered: false,
          completed: false,
          aborted: false,
          push: (event) => {
            if (event.type === 'completed') gate.completed = true;
            queue.push({ event });
            wake?.();
          },
          end: () => {
            gate.answered = true;
            queue.push({ end: true });
            wake?.();
          },
          fail: (error) => {
            gate.answered = true;
            queue.push({ error });
            wake?.();
          },
        };
        world.gates.push(gate);
        world.touch();
        if (world.autopilot) {
          gate.push({ type: 'text_delta', delta: 'fine' });
          gate.push({ type: 'completed', usage: { inputTokens: 1, outputTokens: 1, cachedInputTokens: 0, reasoningTokens: 0 } });
          gate.end();
        }
        return (async function* () {
          const onAbort = () => {
            gate.aborted = true;
            gate.answered = true;
            wake?.();
          };
          signal.addEventListener('abort', onAbort, { once: true });
          try {
            for (;;) {
              if (signal.aborted) throw signal.reason;
              const item = queue.shift();
              if (!item) {
                await new Promise<void>((r) => (wake = r));
                wake = null;
                continue;
              }
              world.touch();
              if (item.error) throw item.error;
              if (item.end) return;
              yield item.event!;
            }
          } finally {
            signal.removeEventListener('abort', onAbort);
          }
        })();
      },
    };
  }

  private authorizer(): Authorizer {
    return {
      authorize: () => {
        if (this.autopilot) return { kind: 'execute' };
        const d = deferred<Authorization>();
        const gate: AuthorizeGate = {
          kind: 'authorize',
          answered: false,
          answer: (value) => {
            gate.answered = true;
            d.resolve(value);
          },
          fail: (error) => {
            gate.answered = true;
            d.reject(error);
          },
        };
        this.gates.push(gate);
        this.touch();
        return d.promise;
      },
    };
  }

  private tools() {
    const gated = defineTool({
      name: 'gated',
      description: 'A tool whose every run the test decides.',
      parameters: z.object({ v: z.string() }),
      execute: (_args, ctx) => {
        if (this.autopilot) return 'done';
        const d = deferred<ToolExecuteResult>();
        const gate: ToolGate = {
          kind: 'tool',
          answered: false,
          ctx,
          answer: (value) => {
            gate.answered = true;
            d.resolve(value);
          },
          fail: (error) => {
            gate.answered = true;
            d.reject(error);
          },
        };
        // A well-behaved tool stops as soon as it is told to.
        ctx.signal.addEventListener('abort', () => gate.fail(ctx.signal.reason as Error), { once: true });
        this.gates.push(gate);
        this.touch();
        return d.promise;
      },
    });
    const explode = defineTool({
      name: 'explode',
      description: 'Its argument schema throws while validating.',
      parameters: z.object({ v: z.string() }).refine(() => {
        throw new Error('schema exploded');
      }),
      execute: () => 'never',
    });
    return [gated, explode];
  }

  private compaction() {
    return {
      compactAtTokens: 1,
      compact: () => {
        if (this.autopilot) return Promise.resolve();
        const d = deferred<void>();
        const gate: CompactionGate = {
          kind: 'compaction',
          answered: false,
          answer: () => {
            gate.answered = true;
            d.resolve();
          },
          fail: (error) => {
            gate.answered = true;
            d.reject(error);
          },
        };
        this.gates.push(gate);
        this.touch();
        return d.promise;
      },
    };
  }

  private inspect(event: InspectionEvent): void {
    this.touch();
    if (event.type === '@xstate.actor' && (event.actorRef as AnyActorRef).id === `session:${this.sessionId}`) this.root = event.actorRef as AnyActorRef;
    if (event.type === '@xstate.microstep' && this.options.onTransition) {
      for (const t of (event as unknown as { _transitions: TransitionDefinitionLike[] })._transitions) {
        const key = transitionKey(t);
        if (key) this.options.onTransition(key);
      }
    }
    if (event.type === '@xstate.snapshot' && this.trigger) {
      const trigger = this.trigger;
      const snapshot = event.snapshot as { value?: unknown; status?: string };
      if ((event.actorRef as AnyActorRef).id === trigger.machine && snapshot.status === 'active' && JSON.stringify(snapshot.value) === trigger.state) {
        this.trigger = null;
        trigger.fire();
      }
    }
  }

  get sessionId(): string {
    return this.options.sessionId ?? SESSION_ID;
  }

  private async start(): Promise<void> {
    const { config, storage } = this.options;
    const gated = this.gatedStorage(storage);
    let idCounter = 0;
    this.core = await createCore({
      storage: gated,
      model: this.model(),
      tools: this.tools(),
      authorizer: this.authorizer(),
      // Ids unique across the paths that share one database, deterministic within a path.
      ids: { next: (prefix) => `${prefix}_${this.sessionId}_${(idCounter += 1)}` },
      limits: config.limits,
      closeStorageOnShutdown: false,
      toolCancelGraceMs: 5_000,
      // An over-long system prompt makes every request assembly fail (the part limit is 10,000 tokens).
      ...(config.assembleFails ? { systemPrompt: 'x'.repeat(48_000) } : {}),
      ...(config.compaction ? { compaction: this.compaction() } : {}),
      inspect: (event) => this.inspect(event),
      onActorError: (_id, error) => {
        throw error;
      },
    });
    if (config.nonInteractive) {
      const parentId = `${this.sessionId}_parent`;
      await storage.createSession({ id: parentId, workingDirectory: process.cwd() });
      await storage.createSession({ id: this.sessionId, workingDirectory: process.cwd(), parentSessionId: parentId, taskName: 'child', agentRole: 'explorer' });
      this.session = await this.core.loadSession(this.sessionId);
    } else {
      this.session = await this.core.createSession({ workingDirectory: process.cwd(), id: this.sessionId });
    }
    this.session.updates$.subscribe((e) => {
      this.updates.push(e);
      this.touch();
    });
  }

  /** Issues `fire` synchronously the moment `machine` enters `state` (JSON of its value). */
  arm(machine: string, state: string, fire: () => void): void {
    this.trigger = { machine, state, fire };
  }

  disarm(): void {
    this.trigger = null;
  }

  /** Turns whose end write the path made fail: their rows may stay running (the next start writes them). */
  readonly failedEnds = new Set<string>();

  get armed(): boolean {
    return this.trigger !== null;
  }

  settle(): Promise<void> {
    return quiet(this);
  }

  activeTurnId(): string | null {
    return (this.root?.getSnapshot() as { context?: { activeTurn: { turnId: string } | null } } | undefined)?.context?.activeTurn?.turnId ?? null;
  }

  /** The three actors of the session as the runtime has them now. */
  actors() {
    const session = this.root!.getSnapshot() as { value: unknown; status: string; context: any; children: Record<string, AnyActorRef | undefined> };
    const turn = session.children.turn?.getSnapshot() as typeof session | undefined;
    const toolCall = turn?.children?.toolCall?.getSnapshot() as typeof session | undefined;
    return { session, turn: turn ?? null, toolCall: toolCall ?? null };
  }

  observe(): Observation {
    const { session, turn, toolCall } = this.actors();
    return observe(session, turn, toolCall);
  }

  /** The latest unanswered gate of a kind (storage gates by method). */
  gate<K extends Gate['kind']>(kind: K, method?: GatedWrite): Extract<Gate, { kind: K }> {
    for (let i = this.gates.length - 1; i >= 0; i -= 1) {
      const g = this.gates[i]!;
      if (g.answered || g.kind !== kind) continue;
      if (method && (g as StorageGate).method !== method) continue;
      return g as Extract<Gate, { kind: K }>;
    }
    throw new Error(`no pending ${kind}${method ? ` ${method}` : ''} gate; pending: ${this.pending().join(', ') || 'none'}`);
  }

  pending(): string[] {
    return this.gates.filter((g) => !g.answered).map((g) => (g.kind === 'storage' ? `storage.${g.method}` : g.kind));
  }

  nextCallId(): string {
    this.callCounter += 1;
    return `call_${this.callCounter}`;
  }

  /** Fails every gate still open (effects whose actor was stopped) so nothing dangles. */
  release(): void {
    for (const g of this.gates) {
      if (g.answered) continue;
      if (g.kind === 'storage') g.fail();
      else if (g.kind === 'model') g.fail(new ModelError('model_error', 'released'));
      else g.fail(new Error('released'));
    }
  }

  async shutdown(): Promise<void> {
    this.autopilot = true;
    this.release();
    // A compaction or rewind the path left open would hold the shutdown until its timeout.
    if (this.root?.getSnapshot().status === 'active' && (this.root.getSnapshot() as { value: unknown }).value === 'maintenance') {
      this.session.endMaintenance(false);
    }
    await this.core.shutdown();
  }
}
