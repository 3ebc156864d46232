/**
 * @module inspection/actor-tracker
 * `createActorTracker`: an XState inspection observer that keeps the live actor tree of every
 * session (Session, Turn, tool-call and every invoked effect actor) as small, JSON-safe records,
 * and reports each change. Machine context can hold anything (messages, drafts, handles), so only
 * the state value, the status and the context's short primitive fields ever leave the tracker.
 */
import { Subject, type Observable } from 'rxjs';
import type { AnyActorRef, InspectionEvent, Observer } from 'xstate';
import { safeStringify } from './safe-json.js';

/** A JSON state value: a state key, or nested keys of a compound state. */
export type StateValueJson = string | { [key: string]: StateValueJson };

export type ActorStatus = 'active' | 'done' | 'error' | 'stopped';

/** One actor as the page sees it. */
export interface TrackedActor {
  /** Unique across sessions: `<sessionId>/<xstate session id>`. */
  key: string;
  /** The openwork session the actor belongs to (its root is `session:<id>`). */
  sessionId: string;
  parentKey: string | null;
  /** The actor's id in its parent: `turn`, `toolCall`, `effects`, or `session:<id>` for the root. */
  actorId: string;
  /** The machine's id (`session`, `turn`, `toolCall`) for machine actors, else null. */
  machine: string | null;
  /** The implementation name the parent invoked (`turnEffects`, `executeTool`, ...). */
  src: string | null;
  /**
   * The id the actor is registered under in its system, if any: `session` for a root, and
   * `agent:<task name>` for a sub-agent's Session actor spawned under its root.
   */
  systemId: string | null;
  status: ActorStatus;
  /** The state value of a machine actor; null for promise, callback and observable actors. */
  value: StateValueJson | null;
  /** Context fields that are short primitives (ids, phase, counters, flags), top-level or in a group of them. */
  fields: Record<string, string | number | boolean | null>;
  /** The type of the last event that changed the snapshot. */
  lastEvent: string | null;
  startedAtMs: number;
  endedAtMs: number | null;
}

/** A change of state value of one machine actor, with the event that caused it. */
export interface TrackedTransition {
  sessionId: string;
  actorKey: string;
  actorId: string;
  machine: string;
  from: StateValueJson | null;
  to: StateValueJson;
  event: string;
  atMs: number;
}

export type TrackerChange =
  | { type: 'actor'; actor: TrackedActor }
  | { type: 'actor_removed'; sessionId: string; key: string }
  | { type: 'transition'; transition: TrackedTransition };

export interface ActorTrackerOptions {
  /** Finished actors kept per session after they end, newest first (default 40). */
  keepFinished?: number;
  /** Transitions kept per session (default 200). */
  keepTransitions?: number;
  /** The longest string a context field may have to be reported (default 120). */
  maxFieldLength?: number;
  now?: () => number;
  /** Called when the tracker itself fails on an event (a bug); defaults to console.error. */
  onError?: (error: unknown) => void;
}

export interface ActorTracker {
  /** Pass this to `createCore({ inspect })`. It never throws into the actors. */
  readonly inspect: Observer<InspectionEvent>;
  /** Every change, as it happens. */
  readonly changes$: Observable<TrackerChange>;
  /** The tracked actors of one session (or all), parents before children. */
  actors(sessionId?: string): TrackedActor[];
  /** The latest transitions of one session, oldest first. */
  transitions(sessionId: string): TrackedTransition[];
  /** One tracked actor with its full context, or null when it is not (or no longer) tracked. */
  detail(key: string): ActorDetail | null;
  /** Session ids that have at least one tracked actor. */
  sessions(): string[];
  /** Stops reporting; later inspection events are ignored. */
  complete(): void;
}

const ROOT_PREFIX = 'session:';

interface Entry {
  actor: TrackedActor;
  signature: string;
  /** Read only when the page asks for this actor's detail; dropped with the entry. */
  ref: AnyActorRef;
  snapshot: AnySnapshotLike | null;
}

/** One actor in full: the record plus its whole context (machines) or input and output (effects). */
export interface ActorDetail {
  actor: TrackedActor;
  /** A JSON-safe copy (cycles and actor references become markers) of the latest snapshot's context. */
  context: unknown;
  input: unknown;
  output: unknown;
  error: unknown;
}

interface SessionState {
  entries: Map<string, Entry>;
  finished: string[];
  transitions: TrackedTransition[];
}

/** A snapshot as inspection reports it: machine snapshots have `value` and `context`. */
interface AnySnapshotLike {
  status?: string;
  value?: unknown;
  context?: unknown;
  input?: unknown;
  output?: unknown;
  error?: unknown;
}

function jsonCopy(value: unknown): unknown {
  if (value === undefined) return null;
  return JSON.parse(safeStringify(value, { depthLimit: 12 })) as unknown;
}

function toStatus(status: unknown): ActorStatus {
  return status === 'done' || status === 'error' || status === 'stopped' ? status : 'active';
}

/** Copies a state value while checking that it only holds strings, as XState state values do. */
function stateValueOf(value: unknown, depth = 0): StateValueJson | null {
  if (typeof value === 'string') return value;
  if (depth > 16 || value === null || typeof value !== 'object' || Array.isArray(value)) return null;
  const out: { [key: string]: StateValueJson } = {};
  for (const [key, child] of Object.entries(value)) {
    const copy = stateValueOf(child, depth + 1);
    if (copy === null) return null;
    out[key] = copy;
  }
  return out;
}

function shortPrimitive(value: unknown, maxLength: number): value is string | number | boolean | null {
  return (
    value === null ||
    typeof value === 'boolean' ||
    (typeof value === 'number' && Number.isFinite(value)) ||
    (typeof value === 'string' && value.length <= maxLength)
  );
}

/**
 * The context's short primitive fields, and those of a plain object in it that holds nothing else
 * (a group of counters or flags, e.g. the Turn's `counts` and `end`, kept nested so that the context
 * stays small for V8: docs/decisions.md "The Turn's context shape"), each under its own name; a
 * top-level field wins over a grouped one of the same name.
 */
function fieldsOf(context: unknown, maxLength: number): Record<string, string | number | boolean | null> {
  const fields: Record<string, string | number | boolean | null> = {};
  if (context === null || typeof context !== 'object') return fields;
  const grouped: Record<string, string | number | boolean | null> = {};
  for (const [key, value] of Object.entries(context)) {
    if (shortPrimitive(value, maxLength)) fields[key] = value;
    else if (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
      const entries = Object.entries(value as object);
      if (entries.length > 0 && entries.every(([, v]) => shortPrimitive(v, maxLength))) for (const [k, v] of entries) if (!(k in grouped)) grouped[k] = v;
    }
  }
  for (const [key, value] of Object.entries(grouped)) if (!(key in fields)) fields[key] = value;
  return fields;
}

function machineIdOf(ref: AnyActorRef): string | null {
  const logic = (ref as { logic?: { config?: { id?: unknown }; root?: unknown } }).logic;
  return logic?.root !== undefined && typeof logic.config?.id === 'string' ? logic.config.id : null;
}

/** XState reports a new actor before it assigns `systemId`; its options already hold it. */
function systemIdOf(ref: AnyActorRef): string | null {
  const actor = ref as { systemId?: unknown; options?: { systemId?: unknown } };
  const systemId = actor.systemId ?? actor.options?.systemId;
  return typeof systemId === 'string' ? systemId : null;
}

function srcOf(ref: AnyActorRef): string | null {
  const src = (ref as { src?: unknown }).src;
  return typeof src === 'string' ? src : null;
}

/**
 * Creates a tracker of the actor trees of every session of a core.
 *
 * @example
 * const tracker = createActorTracker();
 * const core = await createCore({ storage, model, inspect: tracker.inspect });
 * tracker.changes$.subscribe((change) => console.log(change));
 */
export function createActorTracker(options: ActorTrackerOptions = {}): ActorTracker {
  const keepFinished = options.keepFinished ?? 40;
  const keepTransitions = options.keepTransitions ?? 200;
  const maxFieldLength = options.maxFieldLength ?? 120;
  const now = options.now ?? Date.now;
  const onError = options.onError ?? ((error: unknown) => console.error('openwork-core: actor tracker failed on an inspection event', error));
  const changes = new Subject<TrackerChange>();
  const sessions = new Map<string, SessionState>();
  // Each session's root actor has its own actor system, so the system tells which session a child belongs to.
  // Keys add the session id to XState's own `x:<n>` ids, which are unique only within one process.
  const systems = new WeakMap<object, string>();
  let completed = false;

  function stateOf(sessionId: string): SessionState {
    let state = sessions.get(sessionId);
    if (!state) {
      state = { entries: new Map(), finished: [], transitions: [] };
      sessions.set(sessionId, state);
    }
    return state;
  }

  function keyOf(sessionId: string, ref: AnyActorRef): string {
    return `${sessionId}/${ref.sessionId}`;
  }

  function publish(state: SessionState, entry: Entry): void {
    const { status, value, fields } = entry.actor;
    const signature = JSON.stringify([status, value, fields]);
    if (signature === entry.signature) return;
    entry.signature = signature;
    changes.next({ type: 'actor', actor: { ...entry.actor } });
    if (status !== 'active' && entry.actor.endedAtMs === null) {
      entry.actor.endedAtMs = now();
      state.finished.push(entry.actor.key);
      prune(state);
    }
  }

  function prune(state: SessionState): void {
    let excess = state.finished.length - keepFinished;
    for (let i = 0; i < state.finished.length && excess > 0; ) {
      const key = state.finished[i]!;
      // A finished parent stays while one of its children is still tracked, so the tree stays connected.
      if ([...state.entries.values()].some((e) => e.actor.parentKey === key)) {
        i += 1;
        continue;
      }
      state.finished.splice(i, 1);
      excess -= 1;
      const entry = state.entries.get(key);
      if (!entry) continue;
      state.entries.delete(key);
      changes.next({ type: 'actor_removed', sessionId: entry.actor.sessionId, key });
    }
  }

  function onActor(ref: AnyActorRef): void {
    const parent = ref._parent;
    let sessionId: string | undefined;
    if (!parent) {
      sessionId = ref.id.startsWith(ROOT_PREFIX) ? ref.id.slice(ROOT_PREFIX.length) : ref.id;
      systems.set(ref.system, sessionId);
    } else {
      sessionId = systems.get(ref.system);
    }
    // An actor of a system whose root was created before the tracker was attached: nothing to hang it on.
    if (sessionId === undefined) return;
    const state = stateOf(sessionId);
    const key = keyOf(sessionId, ref);
    const actor: TrackedActor = {
      key,
      sessionId,
      parentKey: parent ? keyOf(sessionId, parent) : null,
      actorId: ref.id,
      machine: machineIdOf(ref),
      src: srcOf(ref),
      systemId: systemIdOf(ref),
      status: 'active',
      value: null,
      fields: {},
      lastEvent: null,
      startedAtMs: now(),
      endedAtMs: null,
    };
    if (!parent) {
      // A session loaded again gets a new actor system: forget the actors of the previous one.
      for (const old of [...state.entries.keys()]) {
        state.entries.delete(old);
        changes.next({ type: 'actor_removed', sessionId, key: old });
      }
      state.finished = [];
    }
    const entry: Entry = { actor, signature: '', ref, snapshot: null };
    state.entries.set(key, entry);
    publish(state, entry);
  }

  function onSnapshot(ref: AnyActorRef, snapshot: AnySnapshotLike, eventType: string): void {
    const sessionId = systems.get(ref.system);
    if (sessionId === undefined) return;
    const state = sessions.get(sessionId);
    const entry = state?.entries.get(keyOf(sessionId, ref));
    if (!state || !entry) return;
    const previous = entry.actor.value;
    entry.snapshot = snapshot;
    entry.actor.status = toStatus(snapshot.status);
    entry.actor.lastEvent = eventType;
    if (entry.actor.machine !== null) {
      entry.actor.value = stateValueOf(snapshot.value);
      entry.actor.fields = fieldsOf(snapshot.context, maxFieldLength);
      const next = entry.actor.value;
      if (next !== null && JSON.stringify(next) !== JSON.stringify(previous)) {
        const transition: TrackedTransition = {
          sessionId,
          actorKey: entry.actor.key,
          actorId: entry.actor.actorId,
          machine: entry.actor.machine,
          from: previous,
          to: next,
          event: eventType,
          atMs: now(),
        };
        state.transitions.push(transition);
        if (state.transitions.length > keepTransitions) state.transitions.splice(0, state.transitions.length - keepTransitions);
        changes.next({ type: 'transition', transition });
      }
    }
    publish(state, entry);
  }

  const inspect: Observer<InspectionEvent> = {
    next(event) {
      if (completed) return;
      try {
        // Inspection events of a running actor system always carry full actor references.
        const ref = event.actorRef as AnyActorRef;
        if (event.type === '@xstate.actor') onActor(ref);
        else if (event.type === '@xstate.snapshot') onSnapshot(ref, event.snapshot as AnySnapshotLike, event.event.type);
      } catch (error) {
        // An inspector must never break the actors it watches; a bug here only costs the view.
        onError(error);
      }
    },
  };

  return {
    inspect,
    changes$: changes.asObservable(),
    actors(sessionId) {
      const ids = sessionId === undefined ? [...sessions.keys()] : [sessionId];
      const out: TrackedActor[] = [];
      for (const id of ids) for (const entry of sessions.get(id)?.entries.values() ?? []) out.push({ ...entry.actor });
      return out;
    },
    transitions(sessionId) {
      return [...(sessions.get(sessionId)?.transitions ?? [])];
    },
    detail(key) {
      const sessionId = key.slice(0, key.indexOf('/'));
      const entry = sessions.get(sessionId)?.entries.get(key);
      if (!entry) return null;
      // A live actor's own snapshot is the newest; a finished one keeps the last one reported.
      let snapshot = entry.snapshot;
      if (entry.actor.status === 'active') {
        try {
          snapshot = entry.ref.getSnapshot() as AnySnapshotLike;
        } catch {
          // An actor that cannot give its snapshot any more is shown as last reported.
        }
      }
      return {
        actor: { ...entry.actor },
        context: jsonCopy(snapshot?.context),
        input: jsonCopy(snapshot?.input),
        output: jsonCopy(snapshot?.output),
        error: jsonCopy(snapshot?.error),
      };
    },
    sessions() {
      return [...sessions.keys()];
    },
    complete() {
      completed = true;
      changes.complete();
    },
  };
}
