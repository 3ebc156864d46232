/**
 * @module services/compaction/compaction
 * `runCompaction` (reference §3.9) for the manual, threshold and overflow triggers, and
 * `rewindConversation` (§3.10). A compaction never deletes a message: it writes a checkpoint whose
 * boundaries say which stretch the summary replaces, then installs the projection in Chat State.
 */
import { isoNow } from '../clock.js';
import { randomUUID } from 'node:crypto';
import { access, mkdir, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { ModelError, OpenworkError, errorMessage } from '../../errors.js';
import { TEXT_BLOCK_SEPARATOR, type StoredMessage, type ToolResultBlock } from '../../protocol/content.js';
import type { TurnPlanSnapshot } from '../../protocol/plan.js';
import type { CheckpointRecord, CompactionKind } from '../../storage/storage.js';
import { assembleRequest, buildSystemContext, type PreparedModelCall } from '../context/assemble.js';
import { checkpointItems, type ConversationItem } from '../context/chat-state.js';
import { isPrunable, spillPath } from '../context/prune.js';
import type { ModelRequest, ModelStreamEvent, SystemPart } from '../model/port.js';
import { checkModelStreamEvent, describeEvent } from '../model/stream-events.js';
import { StorableTextStream } from '../../protocol/storable-text.js';
import type { RuntimeServices, SessionServices } from '../runtime.js';
import { modelCallSpan, type SpanData } from '../../protocol/trace-signals.js';
import { globalTimers, sleep, startWait, type Timers } from '../abortable.js';
import { CompactionError, collectRuntimeState, renderReminder } from './runtime-state.js';
import { SUMMARY_INSTRUCTION, SUMMARY_MAX_OUTPUT_TOKENS, validateSummary, type SummaryFailureClass } from './summary.js';

export interface CompactionOptions {
  /** Summary attempts (reference §3.5: 3). */
  attempts: number;
  /** Each attempt's time limit (120 s). */
  attemptTimeoutMs: number;
  /** Pause after a failed attempt (3 s). */
  retryDelayMs: number;
  /**
   * The timers behind the attempt time limit and the pause between attempts. Injected so that a
   * test can run three 120 s attempts on a virtual clock; defaults to the global timers.
   */
  timers: Timers;
}

export const DEFAULT_COMPACTION_OPTIONS: CompactionOptions = { attempts: 3, attemptTimeoutMs: 120_000, retryDelayMs: 3_000, timers: globalTimers };

/** A checkpoint was committed but Chat State could not install it: the session must be reloaded. */
export class ReloadRequiredError extends OpenworkError {
  readonly checkpointId: string;
  constructor(checkpointId: string, cause: unknown) {
    super('reload_required', `checkpoint ${checkpointId} was committed but could not be installed: ${errorMessage(cause)}`, { cause, details: { checkpointId } });
    this.checkpointId = checkpointId;
  }
}

export interface TurnCompactionContext {
  turnId: string;
  systemContext: SystemPart[];
  plan: TurnPlanSnapshot | null;
  /** The automatic compaction line; 0 when the model's window is unknown. */
  compactAtTokens: number;
  triggerModelSpanId?: string | null;
  triggerErrorCode?: string | null;
  triggerEstimatedInputTokens?: number;
}

export interface CompactionRequest {
  sessionId: string;
  kind: Exclude<CompactionKind, 'rewind'>;
  turn?: TurnCompactionContext;
  /** The agent's system prompt, for a manual compaction's summary request (no tool rules). */
  agentPrompt: string;
  signal?: AbortSignal;
}

export interface CompactionResult {
  kind: CompactionKind;
  summarized: boolean;
  prunedThroughSequence: number | null;
  checkpoint: CheckpointRecord | null;
  conversationTokensBefore: number;
  conversationTokensAfter: number;
}

export interface CompactionHooks {
  /** Test seam: runs just before Chat State installs a committed checkpoint. */
  beforeInstall?: (checkpoint: CheckpointRecord) => void;
}

/** The last real user request of the projection (reference §3.7): normal kind, real or replayed. */
export function lastRealUserMessage(items: readonly ConversationItem[]): StoredMessage | null {
  for (let i = items.length - 1; i >= 0; i -= 1) {
    const item = items[i]!;
    if (item.message.role !== 'user' || item.message.kind !== 'normal') continue;
    if (item.synthetic && item.synthetic.reason !== 'last_user_request_replay') continue;
    return item.message;
  }
  return null;
}

function prepare(session: SessionServices, services: RuntimeServices, system: readonly SystemPart[], items: readonly ConversationItem[], tools = session.toolset.definitions): PreparedModelCall {
  return assembleRequest({
    system,
    conversation: items,
    tools,
    pruneWatermark: session.chat.pruneWatermark,
    spillDir: services.spillDir,
    ...(session.model.maxOutputTokens !== undefined ? { maxOutputTokens: session.model.maxOutputTokens } : {}),
  });
}

export class Compactor {
  constructor(
    private readonly services: RuntimeServices,
    private readonly options: CompactionOptions = DEFAULT_COMPACTION_OPTIONS,
    private readonly hooks: CompactionHooks = {},
  ) {}

  /**
   * Prunes old tool results (threshold and overflow only): the watermark moves to the latest
   * persisted assistant message, after every result it newly covers has its full text in a spill file.
   */
  private async prune(session: SessionServices): Promise<number | null> {
    const items = session.chat.view();
    let latestAssistant = 0;
    for (const item of items) if (!item.synthetic && item.message.role === 'assistant') latestAssistant = Math.max(latestAssistant, item.message.sequence);
    const current = session.chat.pruneWatermark ?? 0;
    if (latestAssistant <= current) return null;
    try {
      for (const item of items) {
        const m = item.message;
        if (item.synthetic || m.role !== 'tool' || m.sequence > latestAssistant || m.sequence <= current || !m.providerCallId) continue;
        const block = m.content.find((b): b is ToolResultBlock => b.type === 'tool_result');
        if (!block || !isPrunable(block.text)) continue;
        const path = spillPath(this.services.spillDir, m.sessionId, m.providerCallId);
        const exists = await access(path).then(
          () => true,
          () => false,
        );
        if (!exists) {
          await mkdir(dirname(path), { recursive: true });
          await writeFile(path, block.text);
        }
      }
      const stored = await this.services.storage.advancePruneWatermark(session.sessionId, latestAssistant);
      session.chat.setPruneWatermark(stored);
      return stored;
    } catch {
      // Reference §3.2: any failure here only means "no pruning this time".
      return null;
    }
  }

  async run(request: CompactionRequest): Promise<CompactionResult> {
    const services = this.services;
    const session = services.session(request.sessionId);
    const turn = request.turn;
    const startedAt = isoNow(services.clock);
    const t0 = services.clock.now();
    const span: SpanData = {
      id: `cmpspan_${randomUUID()}`,
      traceId: turn?.turnId ?? `trace-${randomUUID()}`,
      sessionId: request.sessionId,
      turnId: turn?.turnId ?? null,
      parentSpanId: null,
      kind: 'compaction',
      name: 'session.compact',
      status: 'running',
      startedAt,
      modelId: session.model.id,
      resolvedModelName: session.model.model,
      attributes: {
        schemaVersion: 1,
        trigger: request.kind,
        ...(request.kind !== 'manual'
          ? {
              contextWindowTokens: session.model.contextWindow ?? null,
              triggerEstimatedInputTokens: turn?.triggerEstimatedInputTokens ?? null,
              triggerPercent:
                turn?.triggerEstimatedInputTokens !== undefined && turn.compactAtTokens > 0
                  ? Math.round((100 * turn.triggerEstimatedInputTokens) / turn.compactAtTokens)
                  : null,
            }
          : {}),
        ...(request.kind === 'overflow' ? { triggerModelSpanId: turn?.triggerModelSpanId ?? null, triggerErrorCode: turn?.triggerErrorCode ?? null } : {}),
      },
    };
    services.trace.record({ type: 'span_started', span });
    let attempts = 0;
    const end = (patch: Partial<SpanData>) =>
      services.trace.record({
        type: 'span_ended',
        span: { ...span, ...patch, attemptCount: attempts, endedAt: isoNow(services.clock, startedAt), attributes: { ...span.attributes, ...(patch.attributes ?? {}) } },
      });

    try {
      const system = turn ? turn.systemContext : buildSystemContext(request.agentPrompt, '');
      const conversationTokens = () => prepare(session, services, system, session.chat.view()).estimate.conversationTokens;
      const before = conversationTokens();
      let prunedThrough: number | null = null;
      if (request.kind !== 'manual') {
        prunedThrough = await this.prune(session);
        if (prunedThrough !== null && turn && turn.compactAtTokens > 0) {
          const prepared = prepare(session, services, system, session.chat.view());
          if (prepared.estimate.estimatedInputTokens + prepared.estimate.reservedOutputTokens < turn.compactAtTokens) {
            const after = prepared.estimate.conversationTokens;
            end({
              status: 'succeeded',
              attributes: { prunedOnly: true, prunedThroughSequence: prunedThrough, conversationTokensBefore: before, conversationTokensAfter: after, reclaimedConversationTokens: Math.max(before - after, 0) },
            });
            return { kind: request.kind, summarized: false, prunedThroughSequence: prunedThrough, checkpoint: null, conversationTokensBefore: before, conversationTokensAfter: after };
          }
        }
      }

      // 1-3: projection, last real user request, runtime state over every raw message.
      const items = session.chat.view();
      const lastUser = lastRealUserMessage(items);
      if (!lastUser) throw new CompactionError('the conversation has no real user request to replay (MissingLastUser)');
      const [allMessages, checkpoints] = await Promise.all([
        services.storage.listMessages(request.sessionId),
        services.storage.listCheckpoints(request.sessionId),
      ]);
      const previous = checkpoints.at(-1) ?? null;
      const runtimeState = collectRuntimeState(allMessages, previous?.runtimeState ?? null, turn ? (turn.plan ?? undefined) : undefined);
      const reminder = renderReminder(runtimeState);

      // 4-5: the summary request (no World State, no tools, the instruction last), validated strictly.
      const summaryItems: ConversationItem[] = [
        ...items.filter((i) => i.synthetic || i.message.kind !== 'world_state'),
        {
          message: { id: `summary-instruction:${span.id}`, sessionId: request.sessionId, turnId: null, sequence: 0, role: 'user', kind: 'normal', content: [{ type: 'text', text: SUMMARY_INSTRUCTION }], createdAt: startedAt },
          synthetic: { reason: 'compaction_summary', compactionId: span.id },
        },
      ];
      const summaryCall = prepare(session, services, system, summaryItems, []);
      const summaryRequest: ModelRequest = { ...summaryCall.request, tools: [], maxOutputTokens: SUMMARY_MAX_OUTPUT_TOKENS };
      const prepareMs = services.clock.now() - t0;
      const tSummary = services.clock.now();
      // Ownership before the summary request goes out, as before a turn's model call (trust-lease):
      // a core past its lease period renews first, and one that lost the session asks nothing.
      await services.confirmOwnership?.(request.sessionId);
      const summary = await this.summarize(session, span, summaryRequest, request.signal, () => (attempts += 1));
      const summaryMs = services.clock.now() - tSummary;

      // 6: the checkpoint, under the session lock.
      const tPersist = services.clock.now();
      const checkpoint = await services.storage.insertCheckpoint({
        id: `cmp_${randomUUID()}`,
        sessionId: request.sessionId,
        kind: request.kind,
        sourceMessageCount: items.length,
        lastUserMessageId: lastUser.id,
        resolvedModelName: session.model.model,
        summary: summary.text,
        runtimeState,
        runtimeReminder: reminder,
        triggerTurnId: request.kind === 'manual' ? null : (turn?.turnId ?? null),
        parentCompactionId: null,
        inputTokens: summary.usage?.inputTokens ?? null,
        outputTokens: summary.usage?.outputTokens ?? null,
      });
      const persistenceMs = services.clock.now() - tPersist;

      // 7-8: install the projection; a failure here leaves the committed checkpoint in place.
      const tInstall = services.clock.now();
      const tail = allMessages.filter((m) => m.sequence > checkpoint.replacedThroughMessageSequence);
      const replacement = [...checkpointItems(checkpoint, lastUser), ...tail.map((message) => ({ message }))];
      try {
        this.hooks.beforeInstall?.(checkpoint);
        session.chat.replace(replacement);
      } catch (error) {
        throw new ReloadRequiredError(checkpoint.id, error);
      }
      const after = conversationTokens();
      end({
        status: 'succeeded',
        inputTokens: summary.usage?.inputTokens ?? null,
        outputTokens: summary.usage?.outputTokens ?? null,
        attributes: {
          checkpointId: checkpoint.id,
          prunedThroughSequence: prunedThrough,
          conversationTokensBefore: before,
          conversationTokensAfter: after,
          reclaimedConversationTokens: Math.max(before - after, 0),
          summaryRequestMessageCount: summaryRequest.messages.length,
          summaryEstimatedSystemContextTokens: summaryCall.estimate.systemContextTokens,
          summaryEstimatedConversationTokens: summaryCall.estimate.conversationTokens,
          summaryEstimatedToolSurfaceTokens: 0,
          summaryMaxOutputTokens: SUMMARY_MAX_OUTPUT_TOKENS,
          sourceMessageCount: items.length,
          summaryChars: summary.text.length,
          prepareMs,
          summaryMs,
          persistenceMs,
          installMs: services.clock.now() - tInstall,
        },
      });
      return { kind: request.kind, summarized: true, prunedThroughSequence: prunedThrough, checkpoint, conversationTokensBefore: before, conversationTokensAfter: after };
    } catch (thrown) {
      const aborted = request.signal?.aborted ?? false;
      const error = await this.ownershipLostInstead(thrown, request.sessionId, aborted);
      end({
        status: aborted ? 'cancelled' : 'failed',
        errorCode: error instanceof OpenworkError ? error.code : 'compaction_error',
        errorMessage: errorMessage(error),
      });
      // `ownership_lost` passes through as it is (trust-leftovers): the session is another runtime's
      // now, and the host must load it there, as after any other command of a session taken over.
      if (error instanceof OpenworkError && (error.code === 'compaction_error' || error.code === 'reload_required' || error.code === 'ownership_lost')) throw error;
      throw new CompactionError(`compaction failed: ${errorMessage(error)}`, { cause: error });
    }
  }

  /** Up to `attempts` tries of the same request (reference §3.5), each its own model span. */
  /**
   * What a failed compaction answers when the session's lease has lapsed meanwhile: a read or write
   * cut off with the core (a stall, an outage) failed it, but the host must learn the session is
   * another runtime's now (`ownership_lost`), not a summary failure it could retry here. Asked only
   * on the failure path: `confirm` is a clock read within the lease period, a renewal past it.
   */
  private async ownershipLostInstead(error: unknown, sessionId: string, aborted: boolean): Promise<unknown> {
    if (aborted || (error instanceof OpenworkError && error.code === 'ownership_lost')) return error;
    try {
      await this.services.confirmOwnership?.(sessionId);
    } catch (lost) {
      if (lost instanceof OpenworkError && lost.code === 'ownership_lost') return lost;
    }
    return error;
  }

  private async summarize(
    session: SessionServices,
    parent: SpanData,
    request: ModelRequest,
    signal: AbortSignal | undefined,
    countAttempt: () => void,
  ): Promise<{ text: string; usage: { inputTokens: number; outputTokens: number } | null }> {
    const services = this.services;
    let lastReason = '';
    for (let n = 1; n <= this.options.attempts; n += 1) {
      if (signal?.aborted) throw signal.reason;
      countAttempt();
      const startedAt = isoNow(services.clock);
      const attemptSpan = modelCallSpan({
        id: `${parent.id}.summary${n}`,
        traceId: parent.traceId,
        sessionId: parent.sessionId,
        turnId: parent.turnId,
        parentSpanId: parent.id,
        startedAt,
        model: session.model,
        attributes: { summaryAttempt: n, maxOutputTokens: SUMMARY_MAX_OUTPUT_TOKENS, toolDefinitionCount: 0, requestMessageCount: request.messages.length },
      });
      services.trace.record({
        type: 'span_started',
        span: attemptSpan,
        payloads: [{ slot: 'request', body: request.messages }, { slot: 'system_context', body: request.system }],
        content: { system: request.system, inputMessages: request.messages },
      });
      const outcome = await this.attempt(session, request, signal);
      services.trace.record({
        type: 'span_ended',
        span: {
          ...attemptSpan,
          status: outcome.ok ? 'succeeded' : (outcome.classification as SpanData['status']),
          endedAt: isoNow(services.clock, startedAt),
          inputTokens: outcome.usage?.inputTokens ?? null,
          outputTokens: outcome.usage?.outputTokens ?? null,
          errorCode: outcome.ok ? null : outcome.classification,
          errorMessage: outcome.ok ? null : outcome.reason,
          attributes: { ...attemptSpan.attributes, finishReason: outcome.finishReason ?? 'unknown', summaryChars: outcome.text.length },
        },
        payloads: [{ slot: 'response', body: { text: outcome.text, finishReason: outcome.finishReason ?? null } }],
        content: { outputBlocks: [{ type: 'text', text: outcome.text }] },
      });
      if (outcome.ok) return { text: outcome.summary, usage: outcome.usage };
      if (outcome.classification === 'cancelled') throw signal?.reason ?? new Error('the compaction was cancelled');
      lastReason = outcome.reason;
      if (n < this.options.attempts) await sleep(this.options.retryDelayMs, signal, this.options.timers);
    }
    throw new CompactionError(`the summary failed ${this.options.attempts} times (SummaryRetriesExhausted): ${lastReason}`);
  }

  private async attempt(
    session: SessionServices,
    request: ModelRequest,
    outer: AbortSignal | undefined,
  ): Promise<
    | { ok: true; summary: string; text: string; usage: { inputTokens: number; outputTokens: number } | null; finishReason?: string }
    | { ok: false; classification: SummaryFailureClass | 'cancelled'; reason: string; text: string; usage: { inputTokens: number; outputTokens: number } | null; finishReason?: string }
  > {
    const controller = new AbortController();
    const onOuter = () => controller.abort(outer?.reason);
    outer?.addEventListener('abort', onOuter, { once: true });
    let timedOut = false;
    // The attempt's time limit is the delay chart's `after` transition on the injected timers.
    const limit = startWait(this.options.attemptTimeoutMs, this.options.timers);
    void limit.ended.then(() => {
      timedOut = true;
      controller.abort(new Error('summary attempt timed out'));
    });
    let text = '';
    let completions = 0;
    let finishReason: string | undefined;
    let usage: { inputTokens: number; outputTokens: number } | null = null;
    const timeout = () => ({ ok: false as const, classification: 'timeout' as const, reason: `the summary attempt exceeded ${this.options.attemptTimeoutMs} ms`, text, usage, finishReason });
    try {
      const textStream = new StorableTextStream();
      for await (const raw of session.model.stream(request, { signal: controller.signal })) {
        // Issue 13.3: the same checks as a turn's model call; nothing may follow the completion.
        if (completions > 0) return { ok: false, classification: 'deterministic', reason: `model_protocol_error: the summary stream sent ${describeEvent(raw)} after its completed event`, text, usage, finishReason };
        let event: ModelStreamEvent;
        try {
          event = checkModelStreamEvent(raw, text !== '');
        } catch (error) {
          return { ok: false, classification: 'deterministic', reason: `model_protocol_error: ${errorMessage(error)}`, text, usage, finishReason };
        }
        if (event.type === 'text_delta') text += (event.newBlock && text !== '' ? textStream.end() + TEXT_BLOCK_SEPARATOR : '') + textStream.push(event.delta);
        else if (event.type === 'tool_call') return { ok: false, classification: 'degenerate', reason: 'the summary response requested a tool', text, usage, finishReason };
        else if (event.type === 'completed') {
          completions += 1;
          text += textStream.end();
          finishReason = event.finishReason;
          usage = { inputTokens: event.usage.inputTokens, outputTokens: event.usage.outputTokens };
        }
      }
      // A stream that simply stops once aborted by the time limit timed out; it did not fail.
      if (completions === 0) return timedOut ? timeout() : { ok: false, classification: 'transient', reason: 'the summary stream ended without a completed response', text, usage, finishReason };
      const checked = validateSummary(text, finishReason, false);
      return checked.ok
        ? { ok: true, summary: checked.summary, text, usage, finishReason }
        : { ok: false, classification: checked.classification, reason: checked.reason, text, usage, finishReason };
    } catch (error) {
      if (outer?.aborted) return { ok: false, classification: 'cancelled', reason: 'cancelled', text, usage, finishReason };
      if (timedOut) return timeout();
      if (error instanceof ModelError && error.code === 'context_overflow') return { ok: false, classification: 'input_overflow', reason: error.message, text, usage, finishReason };
      return { ok: false, classification: 'transient', reason: errorMessage(error), text, usage, finishReason };
    } finally {
      limit.cancel();
      outer?.removeEventListener('abort', onOuter);
    }
  }

  /**
   * Rewind (reference §3.10): a `rewind` checkpoint reusing the target's replay and summary, runtime
   * state re-derived from every current raw message, install boundary at the current last message.
   * No model request, no deleted row, no replayed tool, no undone file.
   */
  async rewind(sessionId: string, compactionId: string): Promise<CompactionResult> {
    const services = this.services;
    const session = services.session(sessionId);
    const startedAt = isoNow(services.clock);
    const t0 = services.clock.now();
    const span: SpanData = {
      id: `cmpspan_${randomUUID()}`,
      traceId: `trace-${randomUUID()}`,
      sessionId,
      turnId: null,
      parentSpanId: null,
      kind: 'compaction',
      name: 'session.compact',
      status: 'running',
      startedAt,
      attemptCount: 0,
      attributes: { schemaVersion: 1, trigger: 'rewind', targetCompactionId: compactionId },
    };
    services.trace.record({ type: 'span_started', span });
    const end = (patch: Partial<SpanData>) =>
      services.trace.record({ type: 'span_ended', span: { ...span, ...patch, endedAt: isoNow(services.clock, startedAt), attributes: { ...span.attributes, ...(patch.attributes ?? {}) } } });
    try {
      const target = await services.storage.getCheckpoint(compactionId);
      if (!target || target.sessionId !== sessionId) {
        throw new OpenworkError('checkpoint_not_found', `checkpoint ${compactionId} does not exist in session ${sessionId}`);
      }
      if (target.checkpointFormatVersion !== 1 || target.summaryFormatVersion !== 1 || !target.lastUserMessageId) {
        throw new CompactionError(`checkpoint ${compactionId} cannot be rewound to (unsupported format or no replay anchor)`);
      }
      const before = prepare(session, services, buildSystemContext('x', ''), session.chat.view()).estimate.conversationTokens;
      const [allMessages, checkpoints] = await Promise.all([services.storage.listMessages(sessionId), services.storage.listCheckpoints(sessionId)]);
      const replay = allMessages.find((m) => m.id === target.lastUserMessageId);
      if (!replay) throw new CompactionError(`the replayed message ${target.lastUserMessageId} is missing`);
      const runtimeState = collectRuntimeState(allMessages, checkpoints.at(-1)?.runtimeState ?? target.runtimeState, undefined);
      const checkpoint = await services.storage.insertCheckpoint({
        id: `cmp_${randomUUID()}`,
        sessionId,
        kind: 'rewind',
        sourceMessageCount: target.sourceMessageCount,
        lastUserMessageId: target.lastUserMessageId,
        resolvedModelName: target.resolvedModelName,
        summary: target.summary,
        runtimeState,
        runtimeReminder: renderReminder(runtimeState),
        triggerTurnId: null,
        parentCompactionId: target.id,
        inputTokens: target.inputTokens,
        outputTokens: target.outputTokens,
      });
      try {
        this.hooks.beforeInstall?.(checkpoint);
        session.chat.replace(checkpointItems(checkpoint, replay));
      } catch (error) {
        throw new ReloadRequiredError(checkpoint.id, error);
      }
      const after = prepare(session, services, buildSystemContext('x', ''), session.chat.view()).estimate.conversationTokens;
      end({
        status: 'succeeded',
        attributes: { checkpointId: checkpoint.id, conversationTokensBefore: before, conversationTokensAfter: after, reclaimedConversationTokens: Math.max(before - after, 0), prepareMs: services.clock.now() - t0 },
      });
      return { kind: 'rewind', summarized: false, prunedThroughSequence: null, checkpoint, conversationTokensBefore: before, conversationTokensAfter: after };
    } catch (error) {
      end({ status: 'failed', errorCode: error instanceof OpenworkError ? error.code : 'compaction_error', errorMessage: errorMessage(error) });
      throw error;
    }
  }
}
