/**
 * @module machines/turn/effects
 * One callback actor, invoked once for the whole Turn, that performs the Turn's direct work: the
 * model call (`callModel`) and the call the Turn runs itself (`runToolCall`). Each is a slot the
 * chart starts on entering the state that shows it (`effects.model.start` on
 * `running_model.streaming`, `effects.tool.start` on `tools.run`) and stops on leaving it
 * (`effects.model.stop`, `effects.tool.stop`), exactly as an invoke there would start and stop an
 * actor, without creating one a step (issue 14 point 3: an actor's construction, `xstate.init`,
 * subscription and stop, twice a tool step).
 *
 * A slot runs the same callback function an invoked `fromCallback` actor would, with the same
 * guarantees: nothing it reports reaches the Turn once it was stopped, a start stops whatever the
 * slot still ran, and commands the chart sends it (`model.persist`, `tool.authorize`, ...) reach only
 * the run in progress. A slot also ends by itself with its last event (`SLOT_LAST_EVENTS`): the
 * chart leaves the state on that event and sends no stop, since nothing of the run is left to stop.
 */
import { fromCallback, type AnyEventObject, type CallbackLogicFunction } from 'xstate';
import type { ToolCallInput } from '../types.js';
import type { CallModelInput, PersistAssistantCommand, RunToolCallEvent, TurnEvent } from './ports.js';

/** The model call: what `callModel` was as an invoked callback actor. */
export type ModelCallEffect = CallbackLogicFunction<PersistAssistantCommand, TurnEvent, CallModelInput>;
/** The whole of a call the Turn runs itself: what `runToolCall` was as an invoked callback actor. */
export type ToolRunEffect = CallbackLogicFunction<RunToolCallEvent, TurnEvent, ToolCallInput>;

/** Types a model call's function where it is written (its parameters are inferred from this). */
export const modelCallEffect = (effect: ModelCallEffect): ModelCallEffect => effect;
/** Types a direct call's function where it is written. */
export const toolRunEffect = (effect: ToolRunEffect): ToolRunEffect => effect;

export type EffectSlot = 'model' | 'tool';

/** What the Turn sends its effects actor. */
export type TurnEffectsCommand =
  | { type: 'effects.model.start'; input: CallModelInput }
  | { type: 'effects.model.stop' }
  | { type: 'effects.tool.start'; input: ToolCallInput }
  | { type: 'effects.tool.stop' }
  | PersistAssistantCommand
  | RunToolCallEvent;

/**
 * The events after which a slot's run reports nothing more: the chart leaves its state on each, so
 * the state's exit sends no stop for them (`stopEffect`), and the host ends the run as it relays one.
 */
export const SLOT_LAST_EVENTS: Readonly<Record<EffectSlot, ReadonlySet<string>>> = {
  model: new Set(['model.failed', 'model.over_threshold', 'model.persisted', 'model.persist_failed']),
  tool: new Set(['tool.recorded', 'tool.record_failed']),
};

interface Run {
  live: boolean;
  listeners: Array<(event: AnyEventObject) => void>;
  /** The function's teardown, once it returned; called once, when the run ends either way. */
  dispose: (() => void) | void;
  disposed: boolean;
}

/** Ends a run: nothing more of it reaches the Turn or its listeners, and its teardown runs once. */
function end(run: Run): void {
  run.live = false;
  run.listeners.length = 0;
  if (run.disposed || typeof run.dispose !== 'function') return;
  run.disposed = true;
  run.dispose();
}

/**
 * The Turn's effects actor, over the two effect functions the runtime (or a test) supplies. A run
 * that throws as it starts makes this actor fail, and with it the Turn, as an invoked actor's
 * unhandled error does.
 */
export function hostTurnEffects(effects: { callModel: ModelCallEffect; runToolCall: ToolRunEffect }) {
  return fromCallback<TurnEffectsCommand>(({ sendBack, receive, self, system, emit }) => {
    const runs: Record<EffectSlot, Run | null> = { model: null, tool: null };
    const stop = (slot: EffectSlot) => {
      const run = runs[slot];
      if (run === null) return;
      runs[slot] = null;
      end(run);
    };
    const start = (slot: EffectSlot, input: unknown) => {
      stop(slot);
      const last = SLOT_LAST_EVENTS[slot];
      const run: Run = { live: true, listeners: [], dispose: undefined, disposed: false };
      runs[slot] = run;
      const fn = (slot === 'model' ? effects.callModel : effects.runToolCall) as CallbackLogicFunction<AnyEventObject, AnyEventObject, unknown>;
      run.dispose = fn({
        input,
        // The function sees the host as its `self`, as it saw its own actor.
        self: self as never,
        system,
        emit,
        sendBack: (event) => {
          if (!run.live) return;
          if (!last.has(event.type)) {
            sendBack(event);
            return;
          }
          // Its last event ends the run (the Turn leaves the state on it, sending no stop): what
          // the run does after it is dropped, and its teardown runs once the Turn took the event,
          // where leaving the state stopped an invoked actor.
          if (runs[slot] === run) runs[slot] = null;
          run.live = false;
          sendBack(event);
          end(run);
        },
        receive: (listener) => {
          if (run.live) run.listeners.push(listener as (event: AnyEventObject) => void);
        },
      });
      // Ended while it was starting (a last event sent at once): its teardown runs now.
      if (!run.live) end(run);
    };
    const deliver = (slot: EffectSlot, event: AnyEventObject) => {
      const run = runs[slot];
      if (run === null) return;
      for (const listener of run.listeners) listener(event);
    };
    receive((command) => {
      switch (command.type) {
        case 'effects.model.start':
          return start('model', command.input);
        case 'effects.model.stop':
          return stop('model');
        case 'effects.tool.start':
          return start('tool', command.input);
        case 'effects.tool.stop':
          return stop('tool');
        case 'model.persist':
          return deliver('model', command);
        case 'tool.authorize':
        case 'tool.execute':
        case 'toolcall.cancel':
        case 'tool.record':
          return deliver('tool', command);
        default: {
          const never: never = command;
          throw new Error(`unknown turn effects command ${JSON.stringify(never)}`);
        }
      }
    });
    return () => {
      stop('model');
      stop('tool');
    };
  });
}
