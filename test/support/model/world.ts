/**
 * The real runtime with every port held by the test: each storage write, each model stream (a
 * turn's call or a compaction's summary), each World State catalog read, each authorisation, each
 * tool run and each wait_agent timer waits at a gate until the test lets it commit, fail, answer or
 * fire. Storage is a real database (PGlite or Postgres); a passed gate runs the real SQL, a failed
 * one rejects as a broken connection would. Compaction is the real Compactor (pruning, a strictly
 * validated summary, a checkpoint); sub-agents are real child sessions under the root's actor. The
 * session's actors are reached through XState inspection, which is also where transition coverage
 * of the running charts is measured (only this session's Session, Turn and tool-call actors count:
 * a spawned explorer's actors are not part of the path).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import type { AnyActorRef, InspectionEvent } from 'xstate';
import { createCore, type Core } from '../../../src/core.js';
import { ModelError, StorageError } from '../../../src/errors.js';
import type { SessionUpdateEnvelope } from '../../../src/protocol/updates.js';
import type { SessionHandle } from '../../../src/session-handle.js';
import type { Timers } from '../../../src/services/agents/signal.js';
import type { ModelCallOptions, ModelPort, ModelRequest, ModelStreamEvent } from '../../../src/services/model/port.js';
import type { Authorizer } from '../../../src/services/runtime.js';
import { defineTool, type Authorization, type ToolContext, type ToolExecuteResult } from '../../../src/services/tools/define.js';
import type { SessionStorage } from '../../../src/storage/storage.js';
import type { SqlSessionStorage } from '../../../src/storage/sql-storage.js';
import { isSummaryRequest, validSummary } from '../summaries.js';
import { transitionKey, type TransitionDefinitionLike } from './transitions.js';
import { observe, RATE_LIMITS, SESSION_ID, TINY_CONTEXT_WINDOW, type Observation, type WorldConfig } from './stimuli.js';

export const GATED_WRITES = [
  'beginTurn',
  'appendTurnMessages',
  'recordModelCallStart',
  'commitAssistantMessage',
  'commitToolResult',
  'commitPlanUpdate',
  'finishTurn',
  'insertCheckpoint',
  'createSession',
] as const;
export type GatedWrite = (typeof GATED_WRITES)[number];

/** Summary attempts of the world's compactor (each answered by the path). */
export const SUMMARY_ATTEMPTS = 2;

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
  /** The session the write belongs to (a spawned explorer's writes are not the path's). */
  owner: string | null;
  args: unknown[];
  answered: boolean;
  pass(): void;
  fail(): void;
}

export interface ModelGate {
  /** `summary`: a compaction's summary request (no tools, the summary instruction last). */
  kind: 'model' | 'summary';
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

/** The World State skill catalog source: answered with a body, or failing. */
export interface CatalogGate {
  kind: 'catalog';
  answered: boolean;
  answer(body: string): void;
  fail(error: Error): void;
}

/** A wait_agent timeout (the world's injected timers). */
export interface TimerGate {
  kind: 'timer';
  answered: boolean;
  fire(): void;
}

export type Gate = StorageGate | ModelGate | AuthorizeGate | ToolGate | CatalogGate | TimerGate;
type GateOf<K extends Gate['kind']> = K extends 'model' | 'summary' ? ModelGate : Extract<Gate, { kind: K }>;

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

let workspace: string | null = null;

/** One empty working directory for every world: World State samples a fixed project layout. */
function worldWorkspace(): string {
  workspace ??= mkdtempSync(join(tmpdir(), 'openwork-model-'));
  return workspace;
}

type Ref = AnyActorRef & { _parent?: Ref };

export class World {
  core!: Core;
  session!: SessionHandle;
  readonly gates: Gate[] = [];
  readonly updates: SessionUpdateEnvelope[] = [];
  readonly requests: RecordedRequest[] = [];
  /** Explorer sessions spawned by the path, in order. */
  readonly children: string[] = [];
  activity = 0;
  inFlight = 0;
  /** When set, every gate answers itself with success (a healthy runtime, to finish a path). */
  autopilot = false;
  /** The next committed checkpoint fails to install (reference §3.9 step 8). */
  failInstall = false;
  /** The skill catalog body the World State sampler reads; a new one is a changed section. */
  catalogVersion = 1;
  private root: Ref | undefined;
  private trigger: { machine: string; state: string; fire: () => void } | null = null;
  private callCounter = 0;
  private readonly turnOwners = new Map<string, string>();

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

  /** Which session a storage call writes to. */
  private ownerOf(method: string, args: unknown[]): string | null {
    const first = args[0] as { sessionId?: string; parentSessionId?: string } | string | undefined;
    if (method === 'createSession') return (first as { parentSessionId?: string }).parentSessionId ?? null;
    if (typeof first === 'object' && first?.sessionId) return first.sessionId;
    if (typeof first === 'string') return this.turnOwners.get(first) ?? null;
    return null;
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
          if (method === 'beginTurn') {
            const input = args[0] as { turnId: string; sessionId: string };
            this.turnOwners.set(input.turnId, input.sessionId);
          }
          // Only a spawned explorer's row is held; the world's own sessions are created freely.
          if (this.autopilot || (method === 'createSession' && !(args[0] as { parentSessionId?: string }).parentSessionId)) return call(...args);
          const d = deferred<unknown>();
          const gate: StorageGate = {
            kind: 'storage',
            method: method as GatedWrite,
            owner: this.ownerOf(method, args),
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
      ...(this.options.config.compaction === 'threshold' ? { contextWindow: TINY_CONTEXT_WINDOW } : {}),
      rateLimits: () => RATE_LIMITS,
      stream(request: ModelRequest, { signal }: ModelCallOptions): AsyncIterable<ModelStreamEvent> {
        const summary = isSummaryRequest(request);
        const turnId = world.activeTurnId();
        if (!summary) world.requests.push({ request: structuredClone(request), turnId });
        const queue: Array<{ event?: ModelStreamEvent; end?: true; error?: Error }> = [];
        let wake: (() => void) | null = null;
        const gate: ModelGate = {
          kind: summary ? 'summary' : 'model',
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
          gate.push({ type: 'text_delta', delta: summary ? validSummary('a healthy runtime') : 'fine' });
          gate.push({ type: 'completed', usage: { inputTokens: 1, outputTokens: 1, cachedInputTokens: 0, reasoningTokens: 0 }, finishReason: 'stop' });
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

  /** Queues a gate that the path answers (or fails); the returned promise settles with its answer. */
  private hold<T, G extends Gate & { answer(value: T): void; fail(error: Error): void }>(
    fields: Omit<G, 'answered' | 'answer' | 'fail'>,
  ): { gate: G; promise: Promise<T> } {
    const d = deferred<T>();
    const gate = {
      ...fields,
      answered: false,
      answer: (value: T) => {
        gate.answered = true;
        d.resolve(value);
      },
      fail: (error: Error) => {
        gate.answered = true;
        d.reject(error);
      },
    } as unknown as G;
    this.gates.push(gate);
    this.touch();
    return { gate, promise: d.promise };
  }

  private authorizer(): Authorizer {
    return {
      authorize: () => {
        if (this.autopilot) return { kind: 'execute' };
        return this.hold<Authorization, AuthorizeGate>({ kind: 'authorize' }).promise;
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
        const { gate, promise } = this.hold<ToolExecuteResult, ToolGate>({ kind: 'tool', ctx });
        // A well-behaved tool stops as soon as it is told to.
        ctx.signal.addEventListener('abort', () => gate.fail(ctx.signal.reason as Error), { once: true });
        return promise;
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

  /** The World State skill catalog: each sample waits for the path to answer it. */
  private catalog(): () => Promise<string | null> {
    return () => {
      const body = `<available_skills>\ncatalog version ${this.catalogVersion}\n</available_skills>`;
      if (this.autopilot) return Promise.resolve(body);
      return this.hold<string | null, CatalogGate>({ kind: 'catalog' }).promise;
    };
  }

  /** wait_agent's timers: a timeout fires only when the path says so. */
  private timers(): Timers {
    return {
      setTimeout: (fn, ms) => {
        if (this.autopilot) return setTimeout(fn, 0);
        const gate: TimerGate = {
          kind: 'timer',
          answered: false,
          fire: () => {
            gate.answered = true;
            fn();
          },
        };
        void ms;
        this.gates.push(gate);
        this.touch();
        return gate;
      },
      clearTimeout: (handle) => {
        if (handle && typeof handle === 'object' && 'kind' in (handle as object)) (handle as TimerGate).answered = true;
        else clearTimeout(handle as NodeJS.Timeout);
      },
    };
  }

  /** Whether an actor belongs to this session's Session → Turn → tool-call chain. */
  private ours(ref: Ref): boolean {
    const root = this.root;
    if (!root) return false;
    if (ref === root) return true;
    if (ref.id === 'turn') return ref._parent === root;
    if (ref.id === 'toolCall') return ref._parent?.id === 'turn' && ref._parent._parent === root;
    return false;
  }

  private inspect(event: InspectionEvent): void {
    this.touch();
    const ref = event.actorRef as Ref;
    const rootId = this.options.config.nonInteractive ? `agent:${this.sessionId}` : `session:${this.sessionId}`;
    if (event.type === '@xstate.actor' && ref.id === rootId) this.root = ref;
    if (!this.ours(ref)) return;
    if (event.type === '@xstate.microstep' && this.options.onTransition) {
      for (const t of (event as unknown as { _transitions: TransitionDefinitionLike[] })._transitions) {
        const key = transitionKey(t);
        if (key) this.options.onTransition(key);
      }
    }
    if (event.type === '@xstate.snapshot' && this.trigger) {
      const trigger = this.trigger;
      const snapshot = event.snapshot as { value?: unknown; status?: string };
      if (ref.id === trigger.machine && snapshot.status === 'active' && JSON.stringify(snapshot.value) === trigger.state) {
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
    const [gatedTool, explodeTool] = this.tools();
    this.core = await createCore({ plan: true, conversationHistory: true,
      storage: gated,
      model: this.model(),
      tools: [gatedTool!, explodeTool!],
      authorizer: this.authorizer(),
      // Ids unique across the paths that share one database, deterministic within a path.
      ids: { next: (prefix) => `${prefix}_${this.sessionId}_${(idCounter += 1)}` },
      limits: config.limits,
      closeStorageOnShutdown: false,
      toolCancelGraceMs: 5_000,
      // An over-long system prompt makes every request assembly fail (the part limit is 10,000 tokens).
      ...(config.assembleFails ? { systemPrompt: 'x'.repeat(48_000) } : {}),
      compaction:
        config.compaction === 'off'
          ? false
          : {
              attempts: SUMMARY_ATTEMPTS,
              retryDelayMs: 0,
              attemptTimeoutMs: 60_000,
              beforeInstall: () => {
                if (!this.failInstall) return;
                this.failInstall = false;
                throw new Error('injected install failure');
              },
            },
      worldState: config.worldState ? { skillsCatalog: this.catalog() } : false,
      skills: { root: null },
      // request_user_input is offered to root sessions; an explorer's surface has no control tools.
      userInput: true,
      // Explorers run the world's tools, so that a sub-agent session meets the same gates.
      agents: { explorerTools: [gatedTool!, explodeTool!] },
      timers: this.timers(),
      openworkHome: join(worldWorkspace(), '.openwork'),
      inspect: (event) => this.inspect(event),
      onActorError: (_id, error) => {
        throw error;
      },
    });
    if (config.nonInteractive) {
      const parentId = `${this.sessionId}_parent`;
      await storage.createSession({ id: parentId, workingDirectory: worldWorkspace() });
      await storage.createSession({ id: this.sessionId, workingDirectory: worldWorkspace(), parentSessionId: parentId, taskName: 'child', agentRole: 'explorer' });
      this.session = await this.core.loadSession(this.sessionId);
    } else {
      this.session = await this.core.createSession({ workingDirectory: worldWorkspace(), id: this.sessionId });
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

  /** Waits (settling) until `test` holds; effects that no gate holds (file reads, a retry pause) finish meanwhile. */
  async until(test: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      await this.settle();
      if (test()) return;
      if (Date.now() > deadline) throw new Error(`the runtime did not reach: ${what}; pending: ${this.pending().join(', ') || 'none'}`);
      await new Promise((r) => setTimeout(r, 2));
    }
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

  private open(kind: Gate['kind'], method?: GatedWrite): Gate | undefined {
    for (let i = this.gates.length - 1; i >= 0; i -= 1) {
      const g = this.gates[i]!;
      if (g.answered || g.kind !== kind) continue;
      if (g.kind === 'storage' && (g.owner !== this.sessionId || (method && g.method !== method))) continue;
      return g;
    }
    return undefined;
  }

  /** Whether an unanswered gate of this session is open. */
  has(kind: Gate['kind'], method?: GatedWrite): boolean {
    return this.open(kind, method) !== undefined;
  }

  /** The latest unanswered gate of a kind (storage gates of this session, by method). */
  gate<K extends Gate['kind']>(kind: K, method?: GatedWrite): GateOf<K> {
    const found = this.open(kind, method);
    if (!found) throw new Error(`no pending ${kind}${method ? ` ${method}` : ''} gate; pending: ${this.pending().join(', ') || 'none'}`);
    return found as GateOf<K>;
  }

  pending(): string[] {
    return this.gates.filter((g) => !g.answered).map((g) => (g.kind === 'storage' ? `storage.${g.method}${g.owner === this.sessionId ? '' : `(${g.owner})`}` : g.kind));
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
      else if (g.kind === 'model' || g.kind === 'summary') g.fail(new ModelError('model_error', 'released'));
      else if (g.kind === 'timer') g.answered = true;
      else g.fail(new Error('released'));
    }
  }

  async shutdown(): Promise<void> {
    this.autopilot = true;
    this.release();
    await this.core.shutdown();
  }
}
