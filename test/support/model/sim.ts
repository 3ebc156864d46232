/**
 * A synchronous model of one loaded session built from the REAL Session, Turn and tool-call
 * machines (src/machines): their pure `transition` functions are stepped on immutable snapshots,
 * with XState's own mailbox order (an idle actor processes a relayed event at once, a busy one
 * queues it), `sendParent`/`sendTo`/`emit` routed between the three, and children created and
 * removed as the charts invoke and stop them. Invoked effect actors never run: their completions
 * are the stimuli (see stimuli.ts), delivered as `xstate.done.actor.<id>` / `xstate.error.actor.<id>`.
 *
 * Nothing here re-implements a chart: every state, guard, assign and emitted update comes from the
 * machines under test. xstate/graph traverses this model (model-paths.ts), and the replay checks the
 * real runtime against it step by step.
 */
import { createActor, fromTransition, type AnyActorRef, type AnyStateMachine } from 'xstate';
import type { CommandReply } from '../../../src/machines/session/events.js';
import { sessionMachine, type SessionMachineSnapshot } from '../../../src/machines/session/machine.js';
import { toolCallMachine } from '../../../src/machines/tool-call.js';
import { turnMachine, type TurnSnapshot } from '../../../src/machines/turn.js';
import type { SessionUpdate } from '../../../src/protocol/updates.js';
import { transitionKey, type TransitionDefinitionLike } from './transitions.js';

export type MachineName = 'session' | 'turn' | 'toolCall';

type AnySnap = {
  value: unknown;
  context: any;
  status: string;
  output?: unknown;
  children: Record<string, AnyActorRef | undefined>;
};

export type ToolCallSnapshot = AnySnap;

/** What the three actors look like after a stimulus: the state the replay must find in the runtime. */
export interface SimActors {
  session: SessionMachineSnapshot;
  turn: TurnSnapshot | null;
  toolCall: ToolCallSnapshot | null;
  /**
   * The inputs of the Turn's effect slots (machines/turn/effects.ts), as the chart last started them:
   * `callModel` (`effects.model.start`) and `run` (`effects.tool.start`). A slot is live while the
   * Turn is in the state that starts it (`effectSlotsOf`).
   */
  slotInputs: SlotInputs;
}

export type SlotInputs = Readonly<Partial<Record<'callModel' | 'run', unknown>>>;

/**
 * The Turn's live effect slots, named as the actors they replace: `callModel` in
 * `running_model.streaming`, `run` in `tools.run`. The chart starts a slot on entering that state
 * and stops it on leaving (or the slot ended with the event the state was left on).
 */
export function effectSlotsOf(turn: { value: unknown; status: string } | null | undefined): Array<'callModel' | 'run'> {
  if (!turn || turn.status !== 'active') return [];
  const value = turn.value as { running_model?: unknown; tools?: unknown } | string;
  if (typeof value !== 'object' || value === null) return [];
  const out: Array<'callModel' | 'run'> = [];
  if (typeof value.running_model === 'object' && value.running_model !== null && 'streaming' in value.running_model) out.push('callModel');
  if (typeof value.tools === 'object' && value.tools !== null && 'run' in value.tools) out.push('run');
  return out;
}

export interface SimEffects {
  /** Transition keys fired (per machine, in order). */
  fired: string[];
  replies: Array<{ commandId: string; reply: CommandReply }>;
  updates: Array<{ sequence: number; turnId: string; update: SessionUpdate }>;
  /** `sendTo('execute' | 'effects', toolcall.cancel)` happened: the running tool was told to stop. */
  executeAborted: boolean;
}

interface Slot {
  name: MachineName;
  machine: AnyStateMachine;
  self: AnyActorRef;
  snap: AnySnap | null;
  /** The unstarted child ref the parent holds for this slot (to notice re-invocation). */
  ref: AnyActorRef | null;
  queue: unknown[];
  processing: boolean;
}

const MACHINES: Record<MachineName, AnyStateMachine> = {
  session: sessionMachine as unknown as AnyStateMachine,
  turn: turnMachine as unknown as AnyStateMachine,
  toolCall: toolCallMachine as unknown as AnyStateMachine,
};

const CHILD_OF: Partial<Record<MachineName, { id: string; child: MachineName }>> = {
  session: { id: 'turn', child: 'turn' },
  turn: { id: 'toolCall', child: 'toolCall' },
};

const PARENT_OF: Partial<Record<MachineName, MachineName>> = { turn: 'session', toolCall: 'turn' };

/** The simulation being stepped: the stand-in actor refs read their snapshot from it. */
let current: SimSystem | null = null;

interface StandIns {
  session: AnyActorRef;
  turn: AnyActorRef;
  toolCall: AnyActorRef;
  system: { _sendInspectionEvent: (event: any) => void };
}
let cached: StandIns | null = null;

/**
 * Stand-in actor refs, made once: the charts use only their identity, `system`, `_parent` (for
 * `sendParent`) and `getSnapshot()` (the session reads its own children when the mode changes).
 */
function standIns(): StandIns {
  if (cached) return cached;
  const make = (name: MachineName, parent: AnyActorRef | undefined): AnyActorRef => {
    const ref = createActor(fromTransition((s: null) => s, null), parent ? { parent, id: name } : { id: name });
    (ref as unknown as { getSnapshot: () => unknown }).getSnapshot = () => current?.snapshot(name);
    return ref as AnyActorRef;
  };
  const session = make('session', undefined);
  const turn = make('turn', session);
  const toolCall = make('toolCall', turn);
  const system = (session as unknown as { system: StandIns['system'] }).system;
  const names = new Map<unknown, MachineName>([
    [session, 'session'],
    [turn, 'turn'],
    [toolCall, 'toolCall'],
  ]);
  system._sendInspectionEvent = (event: { type: string; actorRef: unknown; _transitions?: TransitionDefinitionLike[] }) => {
    if (event.type !== '@xstate.microstep' || !names.has(event.actorRef) || !current) return;
    for (const t of event._transitions ?? []) {
      const key = transitionKey(t);
      if (key) current.effects.fired.push(key);
    }
  };
  cached = { session, turn, toolCall, system };
  return cached;
}

/** A hook that may deliver more events while an actor is still processing (an "at entry" command). */
export type EntryHook = (machine: MachineName, snapshot: AnySnap, sim: SimSystem) => void;

/**
 * A mutable working copy of the composed system; `freeze()` returns the immutable actors.
 * Create one per stimulus from the previous actors (`SimSystem.from`).
 */
export class SimSystem {
  readonly effects: SimEffects = { fired: [], replies: [], updates: [], executeAborted: false };
  private readonly slots: Record<MachineName, Slot>;
  private slotInputs: SlotInputs;
  entryHook: EntryHook | null = null;

  private constructor(actors: SimActors | null, sessionInput: unknown) {
    const selves = standIns();
    current = this;
    const slot = (name: MachineName, self: AnyActorRef, snap: AnySnap | null): Slot => ({
      name,
      machine: MACHINES[name],
      self,
      snap,
      ref: null,
      queue: [],
      processing: false,
    });
    this.slots = {
      session: slot('session', selves.session, (actors?.session as unknown as AnySnap) ?? null),
      turn: slot('turn', selves.turn, (actors?.turn as unknown as AnySnap) ?? null),
      toolCall: slot('toolCall', selves.toolCall, actors?.toolCall ?? null),
    };
    this.slotInputs = actors?.slotInputs ?? {};
    this.slots.turn.ref = this.slots.session.snap?.children.turn ?? null;
    this.slots.toolCall.ref = this.slots.turn.snap?.children.toolCall ?? null;
    if (!actors) this.slots.session.snap = this.init('session', sessionInput);
  }

  /** A fresh session actor (`idle`) from its input. */
  static create(sessionInput: unknown): SimSystem {
    return new SimSystem(null, sessionInput);
  }

  /** A working copy that continues from `actors`. */
  static from(actors: SimActors): SimSystem {
    return new SimSystem(actors, undefined);
  }

  freeze(): SimActors {
    return {
      session: this.slots.session.snap as unknown as SessionMachineSnapshot,
      turn: (this.slots.turn.snap as unknown as TurnSnapshot) ?? null,
      toolCall: this.slots.toolCall.snap,
      slotInputs: this.slotInputs,
    };
  }

  snapshot(name: MachineName): AnySnap | null {
    return this.slots[name].snap;
  }

  /** Delivers an event to `target` the way an XState mailbox would. */
  send(target: MachineName, event: { type: string; [k: string]: unknown }): void {
    const slot = this.slots[target];
    if (!slot.snap || slot.snap.status !== 'active') return;
    slot.queue.push(event);
    if (slot.processing) return;
    slot.processing = true;
    try {
      while (slot.queue.length > 0) {
        const next = slot.queue.shift() as { type: string };
        if (!slot.snap || slot.snap.status !== 'active') {
          slot.queue.length = 0;
          break;
        }
        this.process(slot, next);
      }
    } finally {
      slot.processing = false;
    }
  }

  private scope(slot: Slot, captured: Array<{ type: string; params: any }>) {
    const self = slot.self as unknown as { id: string; sessionId: string; system: unknown };
    return {
      self: slot.self,
      id: self.id,
      sessionId: self.sessionId,
      logger: () => undefined,
      defer: () => undefined,
      system: self.system,
      stopChild: () => undefined,
      emit: () => undefined,
      actionExecutor: (action: { type: string; params: any }) => captured.push(action),
    };
  }

  private init(name: MachineName, input: unknown): AnySnap {
    const slot = this.slots[name];
    const captured: Array<{ type: string; params: any }> = [];
    slot.snap = slot.machine.getInitialSnapshot(this.scope(slot, captured) as never, input) as unknown as AnySnap;
    slot.processing = true;
    try {
      this.execute(slot, captured);
      this.afterUpdate(slot);
      while (slot.queue.length > 0 && slot.snap?.status === 'active') this.process(slot, slot.queue.shift() as { type: string });
    } finally {
      slot.processing = false;
    }
    return slot.snap!;
  }

  private process(slot: Slot, event: { type: string }): void {
    const captured: Array<{ type: string; params: any }> = [];
    let next: AnySnap;
    try {
      next = slot.machine.transition(slot.snap as never, event as never, this.scope(slot, captured) as never) as unknown as AnySnap;
    } catch (error) {
      throw new Error(`the ${slot.name} machine threw on ${event.type}: ${(error as Error).message}`, { cause: error });
    }
    slot.snap = next;
    this.execute(slot, captured);
    this.afterUpdate(slot);
  }

  /** The deferred part of a macrostep, in action order (Actor.update). */
  private execute(slot: Slot, captured: Array<{ type: string; params: any }>): void {
    for (const action of captured) {
      switch (action.type) {
        case 'xstate.sendTo': {
          const to = action.params.to as AnyActorRef | string | undefined;
          const event = action.params.event as { type: string };
          const parent = PARENT_OF[slot.name];
          if (parent && to === (slot.self as unknown as { _parent: unknown })._parent) {
            this.send(parent, event);
          } else if (to === standIns().session) {
            // A tool call publishes its updates to the session directly.
            this.send('session', event);
          } else if (typeof to === 'object' && to !== null && (to.id === 'execute' || (to.id === 'effects' && event.type === 'toolcall.cancel'))) {
            // The tool-call machine's execute actor, or the Turn's effects actor while its tool runs.
            this.effects.executeAborted = true;
          } else if (typeof to === 'object' && to !== null && to.id === 'effects') {
            // The Turn starts an effect slot with its input; a stop or a command needs no record
            // (the slot's life is the state's: effectSlotsOf).
            const command = event as { type: string; input?: unknown };
            if (command.type === 'effects.model.start') this.slotInputs = { ...this.slotInputs, callModel: command.input };
            if (command.type === 'effects.tool.start') this.slotInputs = { ...this.slotInputs, run: command.input };
          } else if (typeof to === 'object' && to !== null && CHILD_OF[slot.name]?.id === to.id) {
            this.send(CHILD_OF[slot.name]!.child, event);
          }
          break;
        }
        case 'xstate.emit': {
          const emitted = action.params.event as { type: string; [k: string]: unknown };
          if (emitted.type === 'session.replied') this.effects.replies.push(emitted as never);
          if (emitted.type === 'session.published') {
            // One emitted event carries the updates one publish sequenced, the last numbered `lastSequence`.
            const { lastSequence, turnId, updates } = emitted as unknown as { lastSequence: number; turnId: string; updates: SessionUpdate[] };
            updates.forEach((update, i) => this.effects.updates.push({ sequence: lastSequence - updates.length + 1 + i, turnId, update }));
          }
          break;
        }
        case 'xstate.spawnChild': {
          // The Turn (invoked by the Session) and the tool call (by the Turn) are simulated; an
          // explorer's Session actor (`session.spawn_child`) stays an unstarted child ref.
          const link = CHILD_OF[slot.name];
          if (link && action.params.id === link.id) {
            const child = this.slots[link.child];
            child.ref = action.params.actorRef as AnyActorRef;
            child.queue = [];
            child.snap = null;
            this.init(link.child, action.params.input);
          }
          break;
        }
        case 'xstate.stopChild': {
          const link = CHILD_OF[slot.name];
          const ref = action.params as AnyActorRef | undefined;
          if (link && ref && ref === this.slots[link.child].ref) this.drop(link.child);
          break;
        }
        default:
          break;
      }
    }
  }

  private drop(name: MachineName): void {
    const slot = this.slots[name];
    slot.snap = null;
    slot.ref = null;
    slot.queue = [];
    const link = CHILD_OF[name];
    if (link) this.drop(link.child);
  }

  private afterUpdate(slot: Slot): void {
    const snap = slot.snap!;
    if (snap.status === 'active' && this.entryHook) this.entryHook(slot.name, snap, this);
    if (snap.status === 'done') {
      const parent = PARENT_OF[slot.name];
      const id = slot.name === 'turn' ? 'turn' : 'toolCall';
      // A finished child keeps its last snapshot until its parent leaves the invoking state.
      if (parent) this.send(parent, { type: `xstate.done.actor.${id}`, output: snap.output, actorId: id });
    }
  }

  /**
   * The inputs of the invoked (effect) children of `name`, keyed by invoke id; for the Turn, its
   * live effect slots (`callModel`, `run`) in place of the one `effects` actor that runs them.
   */
  invoked(name: MachineName): Record<string, unknown> {
    const snap = this.slots[name].snap;
    if (!snap || snap.status !== 'active') return {};
    const out: Record<string, unknown> = {};
    for (const [id, ref] of Object.entries(snap.children)) {
      if (!ref) continue;
      if ((name === 'session' && id === 'turn') || (name === 'turn' && (id === 'toolCall' || id === 'effects'))) continue;
      out[id] = (ref as unknown as { options: { input: unknown } }).options.input;
    }
    if (name === 'turn') for (const id of effectSlotsOf(snap)) out[id] = this.slotInputs[id];
    return out;
  }
}
