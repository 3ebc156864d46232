/**
 * @module session-handle
 * `SessionHandle`: the host's view of one loaded session. It turns method calls into Session machine
 * events, waits for the machine's answer, and stamps the updates the machine sequences. Beside it in
 * `session-handle/`: the update buffer and streams (`update-stream.ts`), the snapshot and status
 * composed from the actors' own snapshots (`snapshot.ts`), context inspection and conversation replay.
 */
import type { Observable, Subject } from 'rxjs';
import type { ActorRefFrom } from 'xstate';
import { BusyError, CommandError, InputError } from './errors.js';
import type { NewMessage, StoredMessage } from './protocol/content.js';
import { idProblem } from './protocol/command-input.js';
import { permissionDecisionSchema, permissionModeSchema, startTurnParamsSchema, userInputSchema, type PermissionDecision, type PermissionMode, type StartTurnParams, type UserInput } from './protocol/input.js';
import type { SessionSnapshot, SessionStatus, SandboxStatus } from './protocol/snapshot.js';
import { SESSION_UPDATE_VERSION, type SessionUpdateEnvelope, type TurnOutcome } from './protocol/updates.js';
import { answersMismatch, userInputAnswersSchema, type UserInputAnswers } from './protocol/user-input.js';
import type { CommandReply, SessionEvent } from './machines/session/events.js';
import type { sessionMachine } from './machines/session/machine.js';
import { AGENT_MESSAGE_MAX_TOKENS, agentEnvelopeTokens, type AgentMessage } from './services/agents/mailbox.js';
import type { Clock, IdGenerator } from './services/clock.js';
import { estimateTokens } from './services/context/estimate.js';
import type { ConversationItem } from './services/context/chat-state.js';
import type { CheckpointRecord, SessionRecord, SessionStorage, TranscriptPage, TurnRecord } from './storage/storage.js';
import type { Compactor, CompactionResult } from './services/compaction/compaction.js';
import type { RuntimeServices } from './services/runtime.js';
import type { z } from 'zod';
import { outputFormatOf, type TurnOutputFormat } from './services/model/output-schema.js';
import { runTurn, streamTurn, type RunOptions, type RunResult, type StreamOptions, type TurnInput, type TurnStream } from './host/run.js';
import { outcomeOfRecord, sessionSnapshot, sessionStatus } from './session-handle/snapshot.js';
import { UpdateStream } from './session-handle/update-stream.js';
import { inspectContext, type ContextInspection } from './session-handle/context-inspection.js';
import { replayConversation } from './session-handle/replay.js';

export { outcomeOfRecord } from './session-handle/snapshot.js';
export type { ContextInspection } from './session-handle/context-inspection.js';

export interface SessionHandleDeps {
  record: SessionRecord;
  actor: ActorRefFrom<typeof sessionMachine>;
  /** Stops the actor when `stop()` cannot (a sub-agent's actor is stopped by its parent). */
  stopActor?: () => void;
  /** Runs before each turn is accepted (sub-agent reconciliation, reference §5.8). */
  beforeStartTurn?: () => Promise<void>;
  compactor: Compactor;
  services: RuntimeServices;
  storage: SessionStorage;
  clock: Clock;
  ids: IdGenerator;
  global: Subject<SessionUpdateEnvelope>;
  sandbox: SandboxStatus;
  maxUserInputTokens: number;
  /** Materialises explicit skill selections (reference §7.4); absent means skills are not configured. */
  resolveSkills?: (inputs: Extract<UserInput, { type: 'skill' }>[], disabled: string[]) => Promise<NewMessage[]>;
  /** The skills hidden from the model right now; each turn snapshots it when accepted. */
  disabledSkillNames?: () => string[];
  /** Called once the handle closes; a promise (the session's lease being freed) is awaited by `shutdown`. */
  onClosed: () => void | Promise<void>;
}

export interface StartTurnResult {
  turnId: string;
}

let commandCounter = 0;

export class SessionHandle {
  readonly sessionId: string;
  /** Every update of this session, in sequence order. Read-only. */
  readonly updates$: Observable<SessionUpdateEnvelope>;
  private readonly updateStream: UpdateStream;
  private readonly pending = new Map<string, (reply: CommandReply) => void>();
  private readonly turnWaiters = new Map<string, Array<(outcome: TurnOutcome) => void>>();
  private record: SessionRecord;
  /** Set once another runtime owns this session (issue 15): every command answers `ownership_lost`. */
  private ownershipLost = false;

  constructor(private readonly deps: SessionHandleDeps) {
    this.sessionId = deps.record.id;
    this.record = deps.record;
    this.updateStream = new UpdateStream(deps.global);
    this.updates$ = this.updateStream.updates$;
    deps.actor.on('session.replied', (event) => {
      const resolve = this.pending.get(event.commandId);
      if (resolve) {
        this.pending.delete(event.commandId);
        resolve(event.reply);
      }
    });
    deps.actor.on('session.published', (event) => {
      const { turnId, updates } = event;
      let sequence = event.lastSequence - updates.length;
      for (const update of updates) {
        sequence += 1;
        this.updateStream.publish({ version: SESSION_UPDATE_VERSION, sessionId: this.sessionId, turnId, sequence, occurredAtMs: deps.clock.now(), update });
        if (update.type === 'turn_finished' && turnId !== null) this.turnFinished(turnId, update.outcome);
      }
    });
  }

  /** Releases what waits on `turnId`: its waiters get the outcome; its structured-output format goes. */
  private turnFinished(turnId: string, outcome: TurnOutcome): void {
    this.outputFormats()?.delete(turnId);
    const waiters = this.turnWaiters.get(turnId);
    this.turnWaiters.delete(turnId);
    for (const w of waiters ?? []) w(outcome);
  }

  private outputFormats(): Map<string, TurnOutputFormat> | undefined {
    try {
      return this.deps.services.session(this.sessionId).outputFormats;
    } catch {
      return undefined; // Already unloaded: nothing left to drop.
    }
  }

  /** The Session actor (the root actor, or a sub-agent's actor under its root). */
  get actorRef(): ActorRefFrom<typeof sessionMachine> {
    return this.deps.actor;
  }

  /** The stored session row as loaded (mode changes are reflected). */
  get info(): SessionRecord {
    return this.record;
  }

  private get stopped(): boolean {
    return this.deps.actor.getSnapshot().status !== 'active';
  }

  private send(event: SessionEvent & { commandId: string }): Promise<CommandReply> {
    if (this.ownershipLost && event.type !== 'session.shutdown') {
      return Promise.resolve({ ok: false, code: 'ownership_lost', message: `session ${this.sessionId} is owned by another runtime now; load it there` });
    }
    if (this.stopped) {
      return Promise.resolve({ ok: false, code: 'actor_stopped', message: 'the session actor has stopped' });
    }
    return new Promise<CommandReply>((resolve) => {
      this.pending.set(event.commandId, resolve);
      this.deps.actor.send(event);
      // The machine answers every command it handles; a stopped machine answers none.
      if (this.pending.has(event.commandId) && this.stopped) {
        this.pending.delete(event.commandId);
        resolve({ ok: false, code: 'actor_stopped', message: 'the session actor has stopped' });
      }
    });
  }

  private nextCommandId(): string {
    commandCounter += 1;
    return `cmd_${commandCounter}`;
  }

  private static raise(reply: CommandReply): void {
    if (reply.ok) return;
    if (reply.code === 'busy') throw new BusyError(reply.activeTurnId ?? '');
    throw new CommandError(reply.code, reply.message);
  }

  /**
   * Starts a turn. Checks, in order: input, reload_required, an already accepted
   * `clientRequestId` (same answer again), busy; then accepts before anything is written.
   *
   * @example
   * const { turnId } = await session.startTurn({ clientRequestId: 'r1', input: [{ type: 'text', text: 'hi' }] });
   */
  async startTurn(params: StartTurnParams & { outputSchema?: z.ZodType }): Promise<StartTurnResult> {
    // Structured output (services/model/output-schema): checked before anything else is, never parsed by zod as data.
    const format = params?.outputSchema === undefined ? null : outputFormatOf(params.outputSchema);
    const parsed = startTurnParamsSchema.safeParse(params);
    if (!parsed.success) throw new InputError('invalid_request', `invalid startTurn parameters: ${parsed.error.message}`);
    const { clientRequestId, input, disabledSkillNames } = parsed.data;
    const texts = input.filter((i): i is Extract<UserInput, { type: 'text' }> => i.type === 'text');
    if (texts.length === 0 || texts.every((t) => t.text.trim() === '')) {
      throw new InputError('empty_input', 'the input must contain at least one non-empty text part');
    }
    const userMessage: NewMessage = {
      id: this.deps.ids.next('msg'),
      role: 'user',
      kind: 'normal',
      content: texts.map((t) => ({ type: 'text' as const, text: t.text })),
    };
    const tokens = estimateTokens(userMessage.content);
    if (tokens >= this.deps.maxUserInputTokens) {
      throw new InputError('input_too_large', `the input is about ${tokens} tokens; the limit is ${this.deps.maxUserInputTokens}`, {
        details: { estimatedTokens: tokens, limit: this.deps.maxUserInputTokens },
      });
    }
    const skills = input.filter((i): i is Extract<UserInput, { type: 'skill' }> => i.type === 'skill');
    const disabled = disabledSkillNames ?? this.deps.disabledSkillNames?.() ?? [];
    let skillMessages: NewMessage[] = [];
    if (skills.length > 0) {
      if (!this.deps.resolveSkills) throw new InputError('skill_unavailable', `Selected skill is unavailable: ${skills[0]!.name}`);
      skillMessages = await this.deps.resolveSkills(skills, disabled);
    }
    if (this.deps.beforeStartTurn) await this.deps.beforeStartTurn();
    const turnId = this.deps.ids.next('turn');
    // Registered before the command: the turn's first model call may start before the reply is read.
    const formats = format ? (this.deps.services.session(this.sessionId).outputFormats ??= new Map()) : null;
    formats?.set(turnId, format!);
    const reply = await this.send({
      type: 'session.start_turn',
      commandId: this.nextCommandId(),
      turnId,
      clientRequestId,
      messages: [...skillMessages, userMessage],
      disabledSkillNames: disabled,
      // A judged answer cannot end the turn in its own statement: the judgement comes after it is stored.
      ...(format ? { answerJudged: true } : {}),
    });
    // Refused, or an earlier turn answered again for the same clientRequestId: this id never ran.
    if (!reply.ok || (reply as { turnId: string }).turnId !== turnId) formats?.delete(turnId);
    SessionHandle.raise(reply);
    return { turnId: (reply as { turnId: string }).turnId };
  }

  /**
   * Runs one turn and resolves once it has ended: its outcome, final text, usage and (with
   * `outputSchema`) the parsed answer. Refusals (`busy`, `empty_input`, ...) reject as from `startTurn`.
   *
   * @example
   * const { outcome, text } = await session.run('What changed in src/?');
   */
  run<Output = never>(input: TurnInput, options?: RunOptions<Output>): Promise<RunResult<Output>> {
    return runTurn(this, input, options);
  }

  /**
   * Starts one turn and iterates its updates, ending with its `turn_finished`; leaving the loop early
   * cancels the turn unless `detachOnBreak` is set.
   *
   * @example
   * for await (const { update } of session.stream('Summarise README.md')) {
   *   if (update.type === 'text_delta') process.stdout.write(update.delta);
   * }
   */
  stream<Output = never>(input: TurnInput, options?: StreamOptions<Output>): TurnStream<Output> {
    return streamTurn(this, input, options);
  }

  /** Cancels the active turn; any other id answers `turn_not_active`. */
  async cancelTurn(turnId: string): Promise<void> {
    SessionHandle.raise(await this.send({ type: 'session.cancel_turn', commandId: this.nextCommandId(), turnId }));
  }

  /** Answers the pending card of `toolCallId` in `turnId`. */
  async resolvePermission(turnId: string, toolCallId: string, decision: PermissionDecision): Promise<void> {
    const parsed = permissionDecisionSchema.safeParse(decision);
    if (!parsed.success) throw new InputError('invalid_request', `unknown decision ${JSON.stringify(decision)}`);
    SessionHandle.raise(
      await this.send({
        type: 'session.resolve_permission',
        commandId: this.nextCommandId(),
        turnId,
        toolCallId,
        decision: parsed.data,
        at: this.deps.clock.now(),
      }),
    );
  }

  /**
   * Answers the questions of a `request_user_input` call of `turnId`: one non-empty answer per
   * question id. Answers `turn_not_active`, `user_input_not_pending` when that call is not waiting,
   * and `invalid_request` when the answers do not fit the questions.
   */
  async answerUserInput(turnId: string, toolCallId: string, answers: UserInputAnswers): Promise<void> {
    const parsed = userInputAnswersSchema.safeParse(answers);
    if (!parsed.success) throw new InputError('invalid_request', `invalid answers: ${parsed.error.issues.map((i) => i.message).join('; ')}`);
    const pending = this.deps.actor.getSnapshot().context.pendingUserInput;
    if (pending && pending.turnId === turnId && pending.toolCallId === toolCallId) {
      const mismatch = answersMismatch(pending.request, parsed.data);
      if (mismatch) throw new InputError('invalid_request', mismatch);
    }
    SessionHandle.raise(
      await this.send({ type: 'session.answer_user_input', commandId: this.nextCommandId(), turnId, toolCallId, answers: parsed.data }),
    );
  }

  /** Adds user input to the active turn; it enters the conversation before the next model call. */
  async steerTurn(turnId: string, input: UserInput[]): Promise<void> {
    const parsed = userInputSchema.array().safeParse(input);
    if (!parsed.success) throw new InputError('invalid_request', `invalid steering input: ${parsed.error.message}`);
    const texts = parsed.data.filter((i): i is Extract<UserInput, { type: 'text' }> => i.type === 'text' && i.text.trim() !== '');
    if (texts.length === 0) throw new InputError('empty_input', 'steering input must contain non-empty text');
    if (parsed.data.some((i) => i.type === 'skill')) throw new InputError('invalid_request', 'skills cannot be selected while steering');
    const message: NewMessage = { id: this.deps.ids.next('msg'), role: 'user', kind: 'normal', content: texts.map((t) => ({ type: 'text' as const, text: t.text })) };
    const tokens = estimateTokens(message.content);
    if (tokens >= this.deps.maxUserInputTokens) {
      throw new InputError('input_too_large', `the input is about ${tokens} tokens; the limit is ${this.deps.maxUserInputTokens}`);
    }
    SessionHandle.raise(await this.send({ type: 'session.steer_turn', commandId: this.nextCommandId(), turnId, message }));
  }

  /** Queues a sub-agent's message; it never starts a turn (reference §5.6). */
  async deliverAgentMessage(message: AgentMessage): Promise<void> {
    const tokens = agentEnvelopeTokens(message);
    if (tokens >= AGENT_MESSAGE_MAX_TOKENS) {
      throw new InputError('agent_delivery_failed', `the agent message is about ${tokens} tokens; the limit is ${AGENT_MESSAGE_MAX_TOKENS}`);
    }
    SessionHandle.raise(await this.send({ type: 'session.deliver_agent_message', commandId: this.nextCommandId(), message }));
    this.deps.services.mailbox.delivered(this.sessionId);
  }

  /** Persists the mode first, then tells the actor; it applies from the next tool call. */
  async setPermissionMode(mode: PermissionMode): Promise<void> {
    const parsed = permissionModeSchema.safeParse(mode);
    if (!parsed.success) throw new InputError('invalid_request', `unknown permission mode ${JSON.stringify(mode)}`);
    if (this.record.parentSessionId !== null) throw new CommandError('sub_agent_mode_fixed', 'a sub-agent session keeps the mode it was spawned with');
    if (this.ownershipLost) throw new CommandError('ownership_lost', `session ${this.sessionId} is owned by another runtime now; load it there`);
    if (this.stopped) throw new CommandError('actor_stopped', 'the session actor has stopped');
    await this.deps.storage.setPermissionMode(this.sessionId, parsed.data);
    this.record = { ...this.record, permissionMode: parsed.data };
    SessionHandle.raise(await this.send({ type: 'session.set_permission_mode', commandId: this.nextCommandId(), mode: parsed.data }));
  }

  /**
   * Reserves the session for a compaction or rewind; answers `session_active` during a turn and
   * `reload_required` when a previous checkpoint could not be installed.
   */
  async beginMaintenance(kind: 'compact' | 'rewind'): Promise<void> {
    SessionHandle.raise(await this.send({ type: 'session.begin_maintenance', commandId: this.nextCommandId(), kind }));
  }

  endMaintenance(reloadRequired: boolean): void {
    if (!this.stopped) this.deps.actor.send({ type: 'session.end_maintenance', reloadRequired });
  }

  private async maintain(kind: 'compact' | 'rewind', work: () => Promise<CompactionResult>): Promise<CompactionResult> {
    await this.beginMaintenance(kind);
    let reloadRequired = false;
    try {
      const result = await work();
      if (result.checkpoint && !this.stopped) {
        this.deps.actor.send({
          type: 'session.maintenance_update',
          update: {
            type: 'conversation_compacted',
            compactionId: result.checkpoint.id,
            kind: result.kind,
            conversationTokensBefore: result.conversationTokensBefore,
            conversationTokensAfter: result.conversationTokensAfter,
          },
        });
      }
      return result;
    } catch (error) {
      reloadRequired = (error as { code?: string })?.code === 'reload_required';
      throw error;
    } finally {
      this.endMaintenance(reloadRequired);
    }
  }

  /**
   * Compacts the conversation now (trigger `manual`, reference §3.1): answers `session_active`
   * during a turn and `reload_required` after a failed install; a failure is `compaction_error` and
   * leaves the conversation unchanged.
   */
  compactConversation(): Promise<CompactionResult> {
    return this.maintain('compact', () =>
      this.deps.compactor.run({ sessionId: this.sessionId, kind: 'manual', agentPrompt: this.deps.services.session(this.sessionId).agentPrompt }),
    );
  }

  /** Rewinds the model-visible conversation to a checkpoint (reference §3.10): deletes nothing, runs no tool. */
  rewindConversation(compactionId: string): Promise<CompactionResult> {
    const problem = idProblem(compactionId);
    if (problem) return Promise.reject(new InputError('invalid_request', `compactionId ${problem}`));
    return this.maintain('rewind', () => this.deps.compactor.rewind(this.sessionId, compactionId));
  }

  /** The raw messages a checkpoint covers, paginated (limit 1-50, default 20). */
  readTranscript(query: { compactionId?: string; afterSequence?: number; limit?: number } = {}): Promise<TranscriptPage> {
    const problem = query.compactionId === undefined ? null : idProblem(query.compactionId);
    if (problem) return Promise.reject(new InputError('invalid_request', `compactionId ${problem}`));
    return this.deps.storage.readTranscript(this.sessionId, query);
  }

  /**
   * A read-only rebuild of the model-visible conversation (reference §3.10): the latest projection,
   * a checkpoint's own three items, or the conversation as it stood through a message sequence.
   */
  async replayConversation(
    selector: { latest: true } | { compactionId: string } | { throughMessageSequence: number },
  ): Promise<ConversationItem[]> {
    return replayConversation(this.deps.storage, this.deps.services, this.sessionId, selector);
  }

  checkpoints(): Promise<CheckpointRecord[]> {
    return this.deps.storage.listCheckpoints(this.sessionId);
  }

  /** The projection the next request would use, with its estimate (reference §2.9). */
  inspectContext(): ContextInspection {
    if (this.stopped) throw new CommandError('actor_stopped', 'the session actor has stopped');
    return inspectContext(this.deps.services, this.sessionId, this.deps.actor.getSnapshot().context.systemContext);
  }

  /** The turn accepted for `clientRequestId`, if any (seed 000 AcceptedTurn). */
  acceptedTurn(clientRequestId: string): string | null {
    return this.deps.actor.getSnapshot().context.acceptedRequests[clientRequestId] ?? null;
  }

  /** Updates after `afterSequence` from the 512-entry ring buffer; `snapshot_required` when it no longer reaches back. */
  replayUpdates(afterSequence: number): SessionUpdateEnvelope[] {
    return this.updateStream.replay(afterSequence);
  }

  /** The in-memory snapshot (seed 000 §8), composed from the Session and Turn actors' snapshots. */
  snapshot(): SessionSnapshot {
    return sessionSnapshot(this.deps.actor, this.sessionId, this.deps.sandbox, this.updateStream.lastPublishedSequence);
  }

  /** The host-facing status (seed 004): idle, active with flags, or system_error. */
  status(): SessionStatus {
    return sessionStatus(this.deps.actor);
  }

  /** Resolves with the outcome of `turnId` once its `turn_finished` update is out. */
  waitForTurn(turnId: string): Promise<TurnOutcome> {
    const ctx = this.deps.actor.getSnapshot().context;
    if (ctx.activeTurn?.turnId !== turnId) {
      if (ctx.lastTerminal?.turnId === turnId) return Promise.resolve(ctx.lastTerminal.outcome);
      return this.deps.storage.getTurn(turnId).then(async (t) => {
        if (!t || t.sessionId !== this.sessionId) throw new CommandError('turn_not_active', `turn ${turnId} is not known in this session`);
        // A completed turn's answer is its last assistant message (reference §9.3), whenever it ran.
        return outcomeOfRecord(t, t.status === 'completed' ? await this.deps.storage.getTurnFinalText(turnId) : '');
      });
    }
    return new Promise((resolve) => {
      const list = this.turnWaiters.get(turnId) ?? [];
      list.push(resolve);
      this.turnWaiters.set(turnId, list);
    });
  }

  /** The committed messages of this session (the raw history, unaffected by compaction). */
  messages(options?: { afterSequence?: number; limit?: number }): Promise<StoredMessage[]> {
    return this.deps.storage.listMessages(this.sessionId, options);
  }

  turns(): Promise<TurnRecord[]> {
    return this.deps.storage.listTurns(this.sessionId);
  }

  /**
   * Another runtime owns the session now (its lease was taken over while this process was paused or
   * cut off): commands answer `ownership_lost` from here on, and the actor stops. A running turn's
   * writes are refused by the fence, so it ends `ownership_lost` with none of its facts stored after
   * the takeover; `updates$` carries that `turn_finished` and then completes.
   */
  loseOwnership(): void {
    if (this.ownershipLost) return;
    this.ownershipLost = true;
    void this.shutdown();
  }

  /** True once another runtime owns this session (see `loseOwnership`). */
  get ownedElsewhere(): boolean {
    return this.ownershipLost;
  }

  /** Stops the actor: a running turn ends `actor_stopped` after recording what it can. */
  async shutdown(timeoutMs = 10_000): Promise<void> {
    if (this.stopped) return;
    const done = new Promise<void>((resolve) => {
      const sub = this.deps.actor.subscribe({
        next: (s) => {
          if (s.status !== 'active') {
            sub.unsubscribe();
            resolve();
          }
        },
        error: () => resolve(),
        complete: () => resolve(),
      });
    });
    await this.send({ type: 'session.shutdown', commandId: this.nextCommandId() });
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([done, new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
    clearTimeout(timer);
    if (!this.stopped) (this.deps.stopActor ?? (() => this.deps.actor.stop()))();
    await this.close();
  }

  /** Releases waiters and streams; called once the actor is gone. Resolves once the session's lease is freed. */
  close(): Promise<void> {
    for (const [, resolve] of this.pending) resolve({ ok: false, code: 'actor_stopped', message: 'the session actor has stopped' });
    this.pending.clear();
    this.updateStream.complete();
    return Promise.resolve(this.deps.onClosed());
  }
}
