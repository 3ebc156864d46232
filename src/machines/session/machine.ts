/**
 * @module machines/session/machine
 * The Session machine: one root actor per loaded session (seed 000 SessionActor, seed 004
 * SessionState). It answers every command (seed 000 §2), owns the ActiveTurn as an invoked Turn
 * actor, and is the only place where update sequence numbers are assigned.
 *
 * Commands carry a `commandId`; the answer is emitted as a `session.replied` event, so that a host
 * call gets exactly the answer the chart decided.
 */
import { emit, fromCallback, fromPromise, sendTo, setup, stopChild, type ActorRefFrom, type AnyActorRef, type SnapshotFrom } from 'xstate';
import { assign } from '../assign.js';
import { enqueueActions } from '../enqueue.js';
import type { NewMessage } from '../../protocol/content.js';
import { mergeRateLimits, type RateLimitSnapshot } from '../../protocol/rate-limits.js';
import type { PermissionCard, SessionUpdate, TurnOutcome } from '../../protocol/updates.js';
import type { UserInputRequest } from '../../protocol/user-input.js';
import type { AgentMessage } from '../../protocol/agent-message.js';
import { addUsage } from '../../protocol/usage.js';
import { turnMachine } from '../turn.js';
import type { FinishInput, TurnOutput } from '../turn/ports.js';
import type { TurnContext } from '../turn/context.js';
import { isOwnershipLost, storageFailure } from '../turn/outcomes.js';
import { takeUpdates } from '../publish.js';
import type { SessionEmitted, SessionEvent } from './events.js';
import { busyRefusal, crashedTurnFacts, refusal, reloadRequiredRefusal, turnCrashMessage, turnCrashOutcome, turnNotActiveRefusal, type CrashedTurnFacts } from './outcomes.js';
import { addGrant } from '../grants.js';
import { orphansOf } from '../orphans.js';
import type { Grants, SessionInput } from './ports.js';

export interface SessionContext extends SessionInput {
  sessionGrants: Grants;
  sequence: number;
  activeTurn: {
    turnId: string;
    clientRequestId: string;
    messages: NewMessage[];
    mailbox: AgentMessage[];
    pendingInput: NewMessage[];
    disabledSkillNames: string[];
    answerJudged?: boolean;
  } | null;
  pendingApproval: { turnId: string; toolCallId: string; card: PermissionCard } | null;
  /** The request_user_input the active turn waits on (seed 004 `waiting_on_user_input`). */
  pendingUserInput: { turnId: string; toolCallId: string; request: UserInputRequest } | null;
  mailbox: AgentMessage[];
  pendingInput: NewMessage[];
  shuttingDown: boolean;
  systemError: string | null;
  /** The provider's rate limits as last reported, merged by seed 004 §2's rule. */
  rateLimits: RateLimitSnapshot | null;
  /**
   * The outcome of the active turn whose actor failed (`ending_crashed_turn`), with what that actor
   * knew when it failed (`CrashedTurnFacts`): set by the Turn actor's `onError`, cleared once the
   * end is written and announced.
   */
  crashedTurn: ({ outcome: TurnOutcome; message: string; orphans: AnyActorRef[] } & CrashedTurnFacts) | null;
}

/**
 * The terminal update of a turn whose actor failed, published after its end was written (or
 * refused), with the usage of the model calls the actor made before it failed.
 */
function crashedTurnFinished({ context }: { context: SessionContext }): { turnId: string; updates: SessionUpdate[] } {
  return {
    turnId: context.activeTurn!.turnId,
    updates: [{ type: 'turn_finished', outcome: context.crashedTurn!.outcome, usage: context.crashedTurn!.usage }],
  };
}

/** What an update of the active turn changes in the session: the card or question it waits on. */
function pendingOf(context: SessionContext, update: SessionUpdate): Partial<SessionContext> | undefined {
  if (update.type === 'permission_requested') {
    return { pendingApproval: { turnId: context.activeTurn!.turnId, toolCallId: update.toolCallId, card: update.card } };
  }
  if (update.type === 'permission_resolved' && context.pendingApproval?.toolCallId === update.toolCallId) return { pendingApproval: null };
  if (update.type === 'user_input_requested') {
    return { pendingUserInput: { turnId: context.activeTurn!.turnId, toolCallId: update.toolCallId, request: update.request } };
  }
  if (update.type === 'user_input_resolved' && context.pendingUserInput?.toolCallId === update.toolCallId) return { pendingUserInput: null };
  return undefined;
}

const sessionSetup = setup({
  types: {
    context: {} as SessionContext,
    input: {} as SessionInput,
    events: {} as SessionEvent,
    emitted: {} as SessionEmitted,
  },
  actors: {
    turn: turnMachine,
    // Provided by the core with the Session logic itself: children run the very same machine.
    childSession: fromCallback<{ type: string }, SessionInput>(() => {
      throw new Error('session actor "childSession" was not provided');
    }),
    /**
     * Writes the end of a turn whose actor failed: the Turn's own `finishTurn` effect, provided by
     * the core, so that its bookkeeping (a refused end is kept for the session's next start) holds.
     */
    finishCrashedTurn: fromPromise<boolean, FinishInput & { orphans?: readonly AnyActorRef[] }>(async () => {
      throw new Error('session actor "finishCrashedTurn" was not provided');
    }),
  },
  guards: {
    reloadRequired: ({ context }) => context.reloadRequired,
    alreadyAccepted: ({ context, event }) =>
      event.type === 'session.start_turn' && context.acceptedRequests[event.clientRequestId] !== undefined,
    isActiveTurn: ({ context, event }) => 'turnId' in event && context.activeTurn?.turnId === event.turnId,
    approvalPending: ({ context, event }) =>
      event.type === 'session.resolve_permission' &&
      context.pendingApproval?.turnId === event.turnId &&
      context.pendingApproval.toolCallId === event.toolCallId,
    userInputPending: ({ context, event }) =>
      event.type === 'session.answer_user_input' &&
      context.pendingUserInput?.turnId === event.turnId &&
      context.pendingUserInput.toolCallId === event.toolCallId,
  },
  actions: {
    /**
     * The only place where sequence numbers are assigned (seed 000 §7): one each, in order. The
     * updates of one `session.publish` (machines/publish.ts) take one context copy: what they change
     * in the session (`pendingOf`) goes with the last sequence. `published` then emits them.
     */
    sequence: assign(({ context }, params: { turnId: string | null; updates: readonly SessionUpdate[] }) => {
      const sequence = context.sequence + params.updates.length;
      if (params.turnId === null) return { sequence };
      let patch: Partial<SessionContext> | undefined;
      for (const update of params.updates) {
        const changed = pendingOf(patch ? { ...context, ...patch } : context, update);
        if (changed) patch = { ...patch, ...changed };
      }
      return patch ? { ...patch, sequence } : { sequence };
    }),
    /**
     * The updates `sequence` just numbered, as one emitted event whose `lastSequence` is the last
     * one's (the session handle stamps and streams each, in order). One event a publish rather than
     * one an update: each emitted event is an action XState resolves, executes and defers on its own.
     */
    published: emit(({ context }, params: { turnId: string | null; updates: readonly SessionUpdate[] }) => ({
      type: 'session.published' as const,
      lastSequence: context.sequence,
      turnId: params.turnId,
      updates: params.updates,
    })),
    replyDuplicate: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'session.start_turn') return;
      enqueue.emit({
        type: 'session.replied',
        commandId: event.commandId,
        reply: { ok: true, turnId: context.acceptedRequests[event.clientRequestId]! },
      });
    }),
    replyReloadRequired: enqueueActions(({ event, enqueue }) => {
      if (!('commandId' in event)) return;
      enqueue.emit({
        type: 'session.replied',
        commandId: event.commandId,
        reply: reloadRequiredRefusal(),
      });
    }),
    settleTurn: assign(({ context, event }) => {
      const output = (event as unknown as { output: TurnOutput }).output;
      return {
        lastTerminal: {
          turnId: context.activeTurn!.turnId,
          clientRequestId: context.activeTurn!.clientRequestId,
          outcome: output.outcome,
          plan: output.plan,
        },
        tokenTotals: addUsage(context.tokenTotals, output.usage),
        mailbox: [...output.mailbox, ...context.mailbox],
        pendingInput: [...output.pendingInput, ...context.pendingInput],
        activeTurn: null,
        pendingApproval: null,
        pendingUserInput: null,
        reloadRequired: context.reloadRequired || output.reloadRequired,
        systemError: output.endRecorded ? null : `the end of turn ${output.turnId} could not be recorded`,
      };
    }),
    /**
     * The Turn actor failed (an exception in one of its guards or actions, or an unhandled failure
     * of a child): nothing of it runs any more, and no card or question of it can be answered. The
     * turn stays the active one until `ending_crashed_turn` has written and announced its end.
     */
    turnCrashed: assign(({ event, self }) => {
      const error = (event as unknown as { error: unknown }).error;
      // The failed actor is still the session's child while this transition is taken; its snapshot
      // keeps the context of its last completed step (its usage, plan, reservation and phase).
      const failed = self.getSnapshot().children.turn;
      const last = (failed?.getSnapshot() as { context?: TurnContext } | undefined)?.context;
      return {
        // Its children were not stopped with it (machines/orphans.ts): the end's actor stops them.
        crashedTurn: { outcome: turnCrashOutcome(error), message: turnCrashMessage(error), orphans: orphansOf(failed), ...crashedTurnFacts(last) },
        pendingApproval: null,
        pendingUserInput: null,
      };
    }),
    /**
     * The end of the crashed turn was refused for want of the lease: the session is another
     * runtime's now, and the host hears that, as a Turn's own refused end says it (turn/ending).
     */
    crashEndRefused: assign(({ context, event }) => {
      const error = (event as unknown as { error: unknown }).error;
      return isOwnershipLost(error) ? { crashedTurn: { ...context.crashedTurn!, outcome: storageFailure(error) } } : {};
    }),
    /** The crashed turn's end is written (or could not be): the session is free again. */
    settleCrashedTurn: assign(({ context }, params: { recorded: boolean }) => ({
      lastTerminal: {
        turnId: context.activeTurn!.turnId,
        clientRequestId: context.activeTurn!.clientRequestId,
        outcome: context.crashedTurn!.outcome,
        plan: context.crashedTurn!.plan,
      },
      tokenTotals: addUsage(context.tokenTotals, context.crashedTurn!.usage),
      mailbox: [...context.activeTurn!.mailbox, ...context.mailbox],
      activeTurn: null,
      crashedTurn: null,
      systemError: params.recorded
        ? context.crashedTurn!.message
        : `${context.crashedTurn!.message}; the end of turn ${context.activeTurn!.turnId} could not be recorded`,
    })),
    refuseTurnNotActive: enqueueActions(({ event, enqueue }) => {
      if (!('commandId' in event) || !('turnId' in event)) return;
      enqueue.emit({ type: 'session.replied', commandId: event.commandId, reply: turnNotActiveRefusal(event.turnId) });
    }),
    /** The turn is active but the card or question the command answers is not waiting. */
    refuseNotPending: enqueueActions(({ event, enqueue }, params: { code: 'permission_not_pending' | 'user_input_not_pending'; message: string }) => {
      if (!('commandId' in event)) return;
      enqueue.emit({ type: 'session.replied', commandId: event.commandId, reply: refusal(params.code, params.message) });
    }),
    refuseSessionActive: enqueueActions(({ event, enqueue }, params: { reason: string }) => {
      if (!('commandId' in event)) return;
      enqueue.emit({ type: 'session.replied', commandId: event.commandId, reply: refusal('session_active', params.reason) });
    }),
    replyOk: enqueueActions(({ event, enqueue }) => {
      if (!('commandId' in event)) return;
      enqueue.emit({ type: 'session.replied', commandId: event.commandId, reply: { ok: true } });
    }),
  },
});

/**
 * With no turn active (idle, maintenance) every command that names a turn is refused the same way,
 * so both states take these handlers from one place.
 */
const refuseTurnCommands = {
  'session.cancel_turn': { actions: 'refuseTurnNotActive' },
  'session.resolve_permission': { actions: 'refuseTurnNotActive' },
  'session.answer_user_input': { actions: 'refuseTurnNotActive' },
  'session.steer_turn': { actions: 'refuseTurnNotActive' },
} as const;

export const sessionMachine = sessionSetup.createMachine({
  id: 'session',
  context: ({ input }) => ({
    ...input,
    sessionGrants: {},
    sequence: 0,
    activeTurn: null,
    pendingApproval: null,
    pendingUserInput: null,
    mailbox: [],
    pendingInput: [],
    shuttingDown: false,
    systemError: null,
    rateLimits: null,
    crashedTurn: null,
  }),
  initial: 'idle',
  on: {
    'session.spawn_child': {
      actions: enqueueActions(({ event, enqueue }) => {
        enqueue.spawnChild('childSession', { id: event.childId, systemId: event.systemId, input: event.input });
      }),
    },
    'session.stop_child': { actions: stopChild(({ event }) => event.childId) },
    'session.set_permission_mode': {
      actions: [
        assign({ permissionMode: ({ event }) => event.mode, permissionModeOrigin: 'user_toggle' }),
        // The mode applies from the next tool call, in the running turn too (reference §4.2).
        enqueueActions(({ self, event, enqueue }) => {
          const turn = self.getSnapshot().children.turn;
          if (turn) enqueue.sendTo(turn, { type: 'turn.set_mode', mode: event.mode, origin: 'user_toggle' });
        }),
        'replyOk',
      ],
    },
  },
  states: {
    idle: {
      on: {
        'session.start_turn': [
          { guard: 'reloadRequired', actions: 'replyReloadRequired' },
          { guard: 'alreadyAccepted', actions: 'replyDuplicate' },
          {
            target: 'active',
            actions: [
              assign(({ context, event }) => ({
                activeTurn: {
                  turnId: event.turnId,
                  clientRequestId: event.clientRequestId,
                  messages: event.messages,
                  disabledSkillNames: event.disabledSkillNames,
                  ...(event.answerJudged ? { answerJudged: true } : {}),
                  mailbox: context.mailbox,
                  pendingInput: context.pendingInput,
                },
                mailbox: [],
                pendingInput: [],
                acceptedRequests: { ...context.acceptedRequests, [event.clientRequestId]: event.turnId },
                systemError: null,
              })),
              { type: 'sequence', params: ({ event }) => ({ turnId: event.turnId, updates: [{ type: 'turn_started', clientRequestId: event.clientRequestId }] }) },
              { type: 'published', params: ({ event }) => ({ turnId: event.turnId, updates: [{ type: 'turn_started', clientRequestId: event.clientRequestId }] }) },
              enqueueActions(({ event, enqueue }) => {
                enqueue.emit({ type: 'session.replied', commandId: event.commandId, reply: { ok: true, turnId: event.turnId } });
              }),
            ],
          },
        ],
        ...refuseTurnCommands,
        'session.deliver_agent_message': {
          actions: [assign({ mailbox: ({ context, event }) => [...context.mailbox, event.message] }), 'replyOk'],
        },
        'session.begin_maintenance': [
          { guard: 'reloadRequired', actions: 'replyReloadRequired' },
          { target: 'maintenance', actions: 'replyOk' },
        ],
        'session.shutdown': { target: 'stopped', actions: 'replyOk' },
      },
    },
    maintenance: {
      on: {
        'session.start_turn': {
          actions: { type: 'refuseSessionActive', params: { reason: 'a compaction or rewind is running' } },
        },
        'session.begin_maintenance': {
          actions: { type: 'refuseSessionActive', params: { reason: 'a compaction or rewind is running' } },
        },
        'session.deliver_agent_message': {
          actions: [assign({ mailbox: ({ context, event }) => [...context.mailbox, event.message] }), 'replyOk'],
        },
        ...refuseTurnCommands,
        'session.maintenance_update': {
          actions: [
            { type: 'sequence', params: ({ event }) => ({ turnId: null, updates: [event.update] }) },
            { type: 'published', params: ({ event }) => ({ turnId: null, updates: [event.update] }) },
          ],
        },
        'session.end_maintenance': [
          // A shutdown asked for during maintenance waited for it to end; it takes effect now.
          {
            guard: ({ context }) => context.shuttingDown,
            target: 'stopped',
            actions: assign({ reloadRequired: ({ context, event }) => context.reloadRequired || event.reloadRequired }),
          },
          {
            target: 'idle',
            actions: assign({ reloadRequired: ({ context, event }) => context.reloadRequired || event.reloadRequired }),
          },
        ],
        'session.shutdown': {
          actions: [assign({ shuttingDown: true }), 'replyOk'],
        },
      },
    },
    active: {
      invoke: {
        id: 'turn',
        src: 'turn',
        input: ({ context }) => ({
          sessionId: context.sessionId,
          turnId: context.activeTurn!.turnId,
          clientRequestId: context.activeTurn!.clientRequestId,
          messages: context.activeTurn!.messages,
          systemContext: context.systemContext,
          limits: context.limits,
          permissionMode: context.permissionMode,
          permissionModeOrigin: context.permissionModeOrigin,
          nonInteractive: context.nonInteractive,
          sessionGrants: context.sessionGrants,
          tokenBaseline: context.tokenTotals,
          mailbox: context.activeTurn!.mailbox,
          pendingInput: context.activeTurn!.pendingInput,
          compactAtTokens: context.compactAtTokens,
          compactionEnabled: context.compactionEnabled,
          disabledSkillNames: context.activeTurn!.disabledSkillNames,
          answerJudged: context.activeTurn!.answerJudged === true,
        }),
        onDone: [
          { guard: ({ context }) => context.shuttingDown, target: 'stopped', actions: 'settleTurn' },
          { target: 'idle', actions: 'settleTurn' },
        ],
        // The turn's end is written and announced before the session moves on (attack round 3).
        onError: { target: 'ending_crashed_turn', actions: 'turnCrashed' },
      },
      on: {
        'session.start_turn': [
          { guard: 'reloadRequired', actions: 'replyReloadRequired' },
          { guard: 'alreadyAccepted', actions: 'replyDuplicate' },
          {
            actions: enqueueActions(({ context, event, enqueue }) =>
              enqueue.emit({
                type: 'session.replied',
                commandId: event.commandId,
                reply: busyRefusal(context.activeTurn!.turnId),
              }),
            ),
          },
        ],
        'session.cancel_turn': [
          {
            guard: 'isActiveTurn',
            actions: [assign({ pendingApproval: null, pendingUserInput: null }), sendTo('turn', { type: 'turn.cancel' }), 'replyOk'],
          },
          { actions: 'refuseTurnNotActive' },
        ],
        'session.resolve_permission': [
          {
            guard: 'approvalPending',
            actions: [
              assign(({ context, event }) => ({
                // A session-scoped grant is the session's, whichever turn asked (seed 004 §5).
                sessionGrants:
                  event.decision === 'allow_for_session'
                    ? addGrant(context.sessionGrants, context.pendingApproval!.card.environmentId, context.pendingApproval!.card.grantKey)
                    : context.sessionGrants,
                pendingApproval: null,
              })),
              sendTo('turn', ({ event }) => ({ type: 'turn.decide', toolCallId: event.toolCallId, decision: event.decision, at: event.at })),
              'replyOk',
            ],
          },
          {
            guard: 'isActiveTurn',
            actions: {
              type: 'refuseNotPending',
              params: ({ event }) => ({ code: 'permission_not_pending', message: `no permission is pending for tool call ${event.toolCallId}` }),
            },
          },
          {
            actions: 'refuseTurnNotActive',
          },
        ],
        'session.answer_user_input': [
          {
            guard: 'userInputPending',
            actions: [
              assign({ pendingUserInput: null }),
              sendTo('turn', ({ event }) => ({ type: 'turn.answer', toolCallId: event.toolCallId, answers: event.answers })),
              'replyOk',
            ],
          },
          {
            guard: 'isActiveTurn',
            actions: {
              type: 'refuseNotPending',
              params: ({ event }) => ({ code: 'user_input_not_pending', message: `no question is waiting for an answer in tool call ${event.toolCallId}` }),
            },
          },
          { actions: 'refuseTurnNotActive' },
        ],
        'session.steer_turn': [
          { guard: 'isActiveTurn', actions: [sendTo('turn', ({ event }) => ({ type: 'turn.steer', message: event.message })), 'replyOk'] },
          {
            actions: 'refuseTurnNotActive',
          },
        ],
        'session.deliver_agent_message': {
          actions: [sendTo('turn', ({ event }) => ({ type: 'turn.mailbox', message: event.message })), 'replyOk'],
        },
        'session.begin_maintenance': {
          actions: { type: 'refuseSessionActive', params: { reason: 'a turn is active' } },
        },
        'session.shutdown': {
          actions: [assign({ shuttingDown: true, pendingApproval: null, pendingUserInput: null }), sendTo('turn', { type: 'turn.stop' }), 'replyOk'],
        },
        'session.publish': {
          actions: [
            // The batch is closed once taken (machines/publish.ts); `published` reads the same list.
            { type: 'sequence', params: ({ context, event }) => ({ turnId: context.activeTurn!.turnId, updates: takeUpdates(event) }) },
            { type: 'published', params: ({ context, event }) => ({ turnId: context.activeTurn!.turnId, updates: event.updates }) },
          ],
        },
        'turn.rate_limits_reported': { actions: assign({ rateLimits: ({ context, event }) => mergeRateLimits(context.rateLimits, event.snapshot) }) },
        'turn.granted': {
          guard: ({ event }) => event.scope === 'session',
          actions: assign({ sessionGrants: ({ context, event }) => addGrant(context.sessionGrants, event.environmentId, event.grantKey) }),
        },
      },
    },
    /**
     * The Turn actor failed instead of finishing (an exception in a guard or action of its chart):
     * its end is written as `failed` with `actor_stopped`, then `turn_finished` is announced after
     * that commit, once, and the session is free again. The end is written whatever the database
     * answers: a refused end is kept by the turn actors for the session's next start, and the host
     * still hears how the turn ended. Commands meanwhile are answered as if the turn were ending.
     */
    ending_crashed_turn: {
      invoke: {
        id: 'finishCrashedTurn',
        src: 'finishCrashedTurn',
        input: ({ context }) => ({
          sessionId: context.sessionId,
          turnId: context.activeTurn!.turnId,
          outcome: context.crashedTurn!.outcome,
          // As the Turn's own `ending` would: the plan's unfinished steps, and the reserved call it never made.
          planUnfinishedStepCount: context.crashedTurn!.planUnfinishedStepCount,
          unmadeModelCall: context.crashedTurn!.unmadeModelCall,
          recorded: false,
          orphans: context.crashedTurn!.orphans,
        }),
        onDone: [
          {
            guard: ({ context }) => context.shuttingDown,
            target: 'stopped',
            actions: [{ type: 'sequence', params: crashedTurnFinished }, { type: 'published', params: crashedTurnFinished }, { type: 'settleCrashedTurn', params: ({ event }) => ({ recorded: event.output }) }],
          },
          { target: 'idle', actions: [{ type: 'sequence', params: crashedTurnFinished }, { type: 'published', params: crashedTurnFinished }, { type: 'settleCrashedTurn', params: ({ event }) => ({ recorded: event.output }) }] },
        ],
        onError: [
          {
            guard: ({ context }) => context.shuttingDown,
            target: 'stopped',
            actions: ['crashEndRefused', { type: 'sequence', params: crashedTurnFinished }, { type: 'published', params: crashedTurnFinished }, { type: 'settleCrashedTurn', params: { recorded: false } }],
          },
          { target: 'idle', actions: ['crashEndRefused', { type: 'sequence', params: crashedTurnFinished }, { type: 'published', params: crashedTurnFinished }, { type: 'settleCrashedTurn', params: { recorded: false } }] },
        ],
      },
      on: {
        'session.start_turn': [
          { guard: 'reloadRequired', actions: 'replyReloadRequired' },
          { guard: 'alreadyAccepted', actions: 'replyDuplicate' },
          {
            actions: enqueueActions(({ context, event, enqueue }) =>
              enqueue.emit({ type: 'session.replied', commandId: event.commandId, reply: busyRefusal(context.activeTurn!.turnId) }),
            ),
          },
        ],
        // The turn is ending already: a cancel of it has nothing left to stop.
        'session.cancel_turn': [{ guard: 'isActiveTurn', actions: 'replyOk' }, { actions: 'refuseTurnNotActive' }],
        'session.resolve_permission': { actions: 'refuseTurnNotActive' },
        'session.answer_user_input': { actions: 'refuseTurnNotActive' },
        'session.steer_turn': { actions: 'refuseTurnNotActive' },
        'session.deliver_agent_message': {
          actions: [assign({ mailbox: ({ context, event }) => [...context.mailbox, event.message] }), 'replyOk'],
        },
        'session.begin_maintenance': {
          actions: { type: 'refuseSessionActive', params: { reason: 'a turn is ending' } },
        },
        'session.shutdown': { actions: [assign({ shuttingDown: true }), 'replyOk'] },
      },
    },
    stopped: { type: 'final' },
  },
});

export type SessionActorRef = ActorRefFrom<typeof sessionMachine>;
export type SessionMachineSnapshot = SnapshotFrom<typeof sessionMachine>;
export type { TurnOutput };
