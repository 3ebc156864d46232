/**
 * @module services/turn-actors
 * The effects of the Turn machine, in the write order of reference §9.3: turn start, inbox drain,
 * request assembly, model-call counters, the model stream, the assistant message, cancelled
 * remainders (`cancelled-calls.ts`) and the end of the turn. Provided to `turnMachine` by the core.
 */
import { isoNow } from './clock.js';
import { fromPromise } from 'xstate';
import { ModelError, errorMessage } from '../errors.js';
import type { ContentBlock, NewMessage, StoredMessage } from '../protocol/content.js';
import type {
  BeginTurnInput,
  CallModelInput,
  CompactInput,
  CompactOutput,
  DrainInput,
  DrainOutput,
  FinishInput,
  PersistAssistantInput,
  TurnEvent,
} from '../machines/turn/ports.js';
import { ModelCallSetupFailure } from '../machines/turn/ports.js';
import { modelCallEffect } from '../machines/turn/effects.js';
import type { FinishTurn } from '../storage/storage.js';
import { agentMessageToNewMessage } from './agents/mailbox.js';
import { assembleRequest, type PreparedModelCall } from './context/assemble.js';
import { nextSlice, sliceDue } from './host-slice.js';
import { requestPointers } from './context/request-pointers.js';
import { captureWorldState, diffWorldState, retainedSections, worldStateNewMessage } from './context/world-state.js';
import type { Compactor } from './compaction/compaction.js';
import type { RuntimeServices } from './runtime.js';
import { recordCancelledCallsActor } from './cancelled-calls.js';
import { modelCallSpan, type SpanContent, type SpanData } from './trace/signals.js';
import { StorableTextStream } from '../protocol/storable-text.js';
import { checkModelStreamEvent, deltaPieces, describeEvent, MAX_RESPONSE_CHARS, MAX_TOOL_CALLS_PER_RESPONSE } from './model/stream-events.js';
import { outputProblem } from './model/output-schema.js';

/** `error_message` of a turn closed as `interrupted` by the next start of its session (issue 13.1). */
export const UNRECORDED_END_MESSAGE = 'the end of this turn could not be recorded; the next turn of the session closed it';

export function createTurnActors(services: RuntimeServices, compactor: Compactor) {
  /**
   * This process's turns whose end is not recorded yet, per session and keyed by turn (issue 13.1).
   * An entry is made before the begin is written and goes once an end write succeeds. `end` is the
   * end decided but refused by the database; it is kept only for a turn whose begin was written.
   * A turn whose begin never confirmed has no end queued: its row may not exist, or may exist if
   * the commit landed but its answer was lost. The row of a listed turn that is still `running`
   * would hold the one-running-turn index against the session's next turn, so that turn's start
   * writes every kept end first and closes the rest as `interrupted`. Only this process's own turns
   * are listed: another process's running turn is never touched (its owner, or the startup
   * correction, ends it).
   */
  const unrecorded = new Map<string, Map<string, { begun: boolean; end: FinishTurn | null }>>();

  /** Writes the kept ends of a session's earlier turns; throws (the new turn fails) while the database refuses. */
  const settleUnrecorded = async (sessionId: string) => {
    const pending = unrecorded.get(sessionId);
    if (!pending) return;
    for (const [turnId, entry] of pending) {
      if (entry.end) await services.storage.finishTurn(turnId, entry.end);
      else await services.storage.interruptTurn(turnId, { errorCode: 'persistence_error', errorMessage: UNRECORDED_END_MESSAGE });
      pending.delete(turnId);
    }
    unrecorded.delete(sessionId);
  };

  /**
   * After the statement of a final answer that also ends the turn failed (its outcome unknown even
   * after the storage's own repeats, or a repeat that failed for another reason): the turn's stored
   * status decides. Only that statement ends a turn `completed` while the turn runs, so a stored
   * `completed` means it committed, and the runtime reports what the database says instead of a
   * failure the host would see contradicted (integrity3). Null when the turn is not completed, or the
   * database cannot tell now (the failure stands).
   */
  const answerStoredDespite = async (sessionId: string, turnId: string, messageId: string, afterSequence: number): Promise<StoredMessage | null> => {
    try {
      const turn = await services.storage.getTurn(turnId);
      if (turn?.status !== 'completed') return null;
      const after = await services.storage.listMessages(sessionId, { afterSequence });
      return after.find((m) => m.id === messageId) ?? null;
    } catch {
      return null;
    }
  };

  const endModelSpan = (spanId: string, patch: Partial<SpanData>, response?: unknown, content?: SpanContent) =>
    // A call that ends without a stored response keeps what it produced in the `response` slot.
    services.spans.end(spanId, patch, response !== undefined ? [{ slot: 'response' as const, body: response }] : undefined, content);

  /**
   * World State before a model call (reference §2.3): capture → render/diff → persist each change →
   * append → advance the baseline. Run by the model-call actor first, so that a model call is one
   * actor; nothing is done when the session samples no World State.
   */
  const sampleWorldState = async (input: CallModelInput) => {
    const session = services.session(input.sessionId);
    const world = session.worldState;
    if (!world) return;
    const capture = await captureWorldState({
      workingDirectory: session.workingDirectory,
      permissionMode: input.permissionMode,
      sandbox: session.sandbox,
      ...(world.skillsCatalog ? { skillsCatalog: () => world.skillsCatalog!(input.disabledSkillNames) } : {}),
      ...(world.renderSandboxPolicy ? { renderSandboxPolicy: world.renderSandboxPolicy } : {}),
    });
    const changes = diffWorldState(capture, world.baseline, retainedSections(session.chat.view()));
    if (changes.length === 0) return;
    const messages = changes.map((c) => worldStateNewMessage(input.turnId, input.modelCallIndex, input.samplingSequence, c));
    const stored = await services.storage.appendTurnMessages(input.turnId, messages);
    session.chat.append(stored);
    for (const change of changes) world.baseline.set(change.section, change.body);
  };

  /**
   * The assistant message's commit (reference §9.3), run by the model actor when the Turn asks for
   * it: the answer as stored, its span ended, and a judged final answer's problem (structured output).
   */
  const persistAnswer = async (input: PersistAssistantInput): Promise<{ messageId: string; outputProblem?: string }> => {
    const draft = input.draft;
    const content: ContentBlock[] = [];
    if (draft.reasoning !== '') content.push({ type: 'reasoning', text: draft.reasoning });
    // One block per output message of the provider, as it came (an empty block says nothing).
    content.push(...draft.textBlocks.filter((b) => b.text !== ''));
    for (const opaque of draft.opaque) content.push({ type: 'provider_opaque', provider: opaque.provider, data: opaque.data });
    content.push(...draft.toolCalls);
    const usage = draft.completion!.usage;
    const message: NewMessage = { id: services.ids.next('msg'), role: 'assistant', kind: 'normal', content };
    try {
      const chat = services.session(input.sessionId).chat;
      // A response the conversation would refuse (duplicate call ids) is never written.
      // The fields the check reads, named: a spread of the message plus a key would give every step's
      // copy a V8 map of its own (docs/benchmarks.md, perf-jit).
      chat.assertAppendable([{ role: message.role, content: message.content, turnId: input.turnId }]);
      let stored;
      try {
        if (sliceDue()) await nextSlice();
        stored = await services.storage.commitAssistantMessage(input.turnId, message, usage, draft.toolCalls.length, input.end ?? undefined);
      } catch (error) {
        // A final answer that ends the turn, reported failed: it may have committed all the same.
        stored = input.end ? await answerStoredDespite(input.sessionId, input.turnId, message.id, chat.lastSequence) : null;
        if (!stored) throw error;
      }
      chat.append([stored]);
    } catch (error) {
      endModelSpan(input.spanId, {
        status: 'failed',
        errorCode: 'persistence_error',
        errorMessage: errorMessage(error),
        inputTokens: usage.inputTokens,
        outputTokens: usage.outputTokens,
      });
      throw error;
    }
    endModelSpan(input.spanId, {
      status: 'succeeded',
      responseMessageId: message.id,
      inputTokens: usage.inputTokens,
      outputTokens: usage.outputTokens,
      cachedInputTokens: usage.cachedInputTokens,
      reasoningTokens: usage.reasoningTokens,
      attributes: { responseToolCallCount: draft.toolCalls.length },
    }, undefined, { outputBlocks: content });
    // A final answer of a turn with structured output is stored as said, then judged: the turn
    // fails with output_invalid when it does not fit (the machine's guard decides).
    const format = draft.toolCalls.length === 0 ? services.session(input.sessionId).outputFormats?.get(input.turnId) : undefined;
    const problem = format ? outputProblem(format, draft.text) : null;
    return problem ? { messageId: message.id, outputProblem: problem } : { messageId: message.id };
  };

  return {
    beginTurn: fromPromise<void, BeginTurnInput>(async ({ input }) => {
      const session = services.session(input.sessionId);
      // Retry the end writes of earlier turns; if the database still refuses, this turn fails too.
      await settleUnrecorded(input.sessionId);
      const entry = { begun: false, end: null };
      unrecorded.set(input.sessionId, new Map([[input.turnId, entry]]));
      const stored = await services.storage.beginTurn({
        turnId: input.turnId,
        sessionId: input.sessionId,
        clientRequestId: input.clientRequestId,
        modelId: session.model.id,
        resolvedProviderId: session.model.providerId,
        resolvedModelName: session.model.model,
        appVersion: services.appVersion,
        messages: input.messages,
        reserveModelCall: input.reserveModelCall,
      });
      entry.begun = true;
      session.chat.append(stored);
    }),

    drainInbox: fromPromise<DrainOutput, DrainInput>(async ({ input }) => {
      if (input.mailbox.length === 0 && input.pendingInput.length === 0) return { mailboxIds: [], inputIds: [] };
      // Mailbox first (reference §5.6), then steering input, both after every result of the last round.
      const messages: NewMessage[] = [...input.mailbox.map(agentMessageToNewMessage), ...input.pendingInput];
      const stored = await services.storage.appendTurnMessages(input.turnId, messages);
      services.session(input.sessionId).chat.append(stored);
      services.mailbox.drained(input.sessionId, input.mailbox.length);
      return { mailboxIds: input.mailbox.map((m) => m.id), inputIds: input.pendingInput.map((m) => m.id) };
    }),

    /**
     * One model call, from World State to the stored answer (issue 14 point 3), run in the `model`
     * slot of the Turn's effects actor (machines/turn/effects.ts): it samples, assembles
     * the request, asks for a threshold compaction or records the call's counters, streams, and
     * reports each step to the Turn as an event. Once the answer is complete (`model.completed`) it
     * stores it when the Turn, in `persisting`, sends `model.persist` with the draft and the end it
     * decided, and reports `model.persisted` or `model.persist_failed`. A failure of the call is
     * `model.failed`. Stopping it aborts a request in flight; a commit in flight finishes.
     */
    callModel: modelCallEffect(({ input, sendBack, receive }) => {
      // The commit is asked once, after the completion: the actor's one last event is its outcome.
      let persistAsked = false;
      receive((command) => {
        if (command.type !== 'model.persist' || persistAsked) return;
        persistAsked = true;
        persistAnswer({ sessionId: input.sessionId, turnId: input.turnId, modelCallIndex: input.modelCallIndex, spanId: input.spanId, draft: command.draft, end: command.end }).then(
          (stored) => sendBack({ type: 'model.persisted', ...stored }),
          (error: unknown) => sendBack({ type: 'model.persist_failed', error }),
        );
      });
      const session = services.session(input.sessionId);
      const controller = new AbortController();
      let started = services.clock.now();
      /** The span starts once the call is recorded, right before the request goes out. */
      let spanStarted = false;
      const startSpan = (prepared: PreparedModelCall) => {
        const request = prepared.request;
        started = services.clock.now();
        const span = modelCallSpan({
          id: input.spanId,
          traceId: input.turnId,
          sessionId: input.sessionId,
          turnId: input.turnId,
          parentSpanId: null,
          startedAt: isoNow(services.clock),
          model: session.model,
          attributes: {
            modelCallIndex: input.modelCallIndex,
            toolChoice: request.tools.length > 0 ? 'auto' : 'none',
            maxOutputTokens: request.maxOutputTokens ?? null,
            requestMessageCount: request.messages.length,
            toolDefinitionCount: request.tools.length,
            requestEstimatedSystemContextTokens: prepared.estimate.systemContextTokens,
            requestEstimatedConversationTokens: prepared.estimate.conversationTokens,
            requestEstimatedToolSurfaceTokens: prepared.estimate.toolSurfaceTokens,
            requestEstimatedInputTokens: prepared.estimate.estimatedInputTokens,
            requestTruncatedToolResults: prepared.projection.truncatedToolResults,
            requestOriginalToolResultTokens: prepared.projection.originalToolResultTokens,
            requestProjectedToolResultTokens: prepared.projection.projectedToolResultTokens,
          },
        });
        services.spans.start(span, [
          // Messages are the one authoritative copy of content: the request slot points at them and
          // carries only what no row holds (synthesized results). Assembly is deterministic, so the
          // exact request is rebuilt from these pointers (reference §9.2 principle 5).
          { slot: 'request', body: requestPointers(prepared) },
          { slot: 'system_context', body: request.system },
          { slot: 'tool_definitions', body: request.tools },
        ], { system: request.system, inputMessages: request.messages });
        spanStarted = true;
      };

      let semantic = false;
      let completions = 0;
      let completion: Extract<TurnEvent, { type: 'model.completed' }> | null = null;
      // Characters of text, reasoning and tool-call arguments this response carried (MAX_RESPONSE_CHARS).
      let responseChars = 0;
      let attempts = 1;
      let firstTokenMs: number | null = null;
      let partial = { text: '', reasoning: '', toolCalls: 0 };
      let finished = false;
      // Issue 13.2: deltas are made storable here, once, so the update, the stored message and the
      // next request carry the same characters.
      const textStream = new StorableTextStream();
      const reasoningStream = new StorableTextStream();
      // A new output message's marks wait for its first storable character (a delta may be held).
      let blockMarks: { newBlock?: true; phase?: string } = {};
      const emitText = (delta: string, marks: { newBlock?: true; phase?: string } = {}) => {
        blockMarks = { ...blockMarks, ...marks };
        if (delta === '') return;
        partial = { ...partial, text: partial.text + delta };
        // One update never carries more than MAX_DELTA_CHARS; the first piece carries the block's marks.
        for (const piece of deltaPieces(delta)) {
          sendBack({ type: 'model.text_delta', delta: piece, ...blockMarks });
          blockMarks = {};
        }
      };
      const emitReasoning = (delta: string) => {
        if (delta === '') return;
        partial = { ...partial, reasoning: partial.reasoning + delta };
        for (const piece of deltaPieces(delta)) sendBack({ type: 'model.reasoning_delta', delta: piece });
      };

      /** The adapter's latest rate-limit headers travel to the session, which merges them (seed 004 §2). */
      const reportRateLimits = () => {
        const snapshot = session.model.rateLimits?.() ?? null;
        if (snapshot) sendBack({ type: 'model.rate_limits_reported', snapshot });
      };

      const fail = (error: unknown) => {
        if (finished) return;
        finished = true;
        const failure =
          error instanceof ModelError
            ? new ModelError(error.code as 'model_error' | 'model_protocol_error' | 'context_overflow', error.message, {
                cause: error.cause,
                details: error.details,
                semanticOutput: error.semanticOutput || semantic,
                retryable: error.retryable,
              })
            : new ModelError('model_error', `model call failed: ${errorMessage(error)}`, { cause: error, semanticOutput: semantic });
        const facts = failure.details;
        endModelSpan(
          input.spanId,
          {
            status: 'failed',
            attemptCount: attempts,
            errorCode: failure.code,
            errorMessage: failure.message,
            attributes: {
              // Reference §11.1: the adapter knows where the exchange broke; semantic output overrides.
              deliveryState: semantic || failure.semanticOutput ? 'semantic_output_emitted' : (facts.deliveryState ?? 'accepted_no_semantic_output'),
              errorPhase: facts.errorPhase ?? (failure.code === 'model_protocol_error' ? 'stream_decode' : 'response_body'),
              ...(facts.httpStatus !== undefined ? { httpStatus: facts.httpStatus } : {}),
              ...(facts.providerCode !== undefined ? { providerCode: facts.providerCode } : {}),
              ttftMs: firstTokenMs,
              streamMs: services.clock.now() - started,
            },
          },
          partial.text || partial.reasoning || partial.toolCalls ? partial : undefined,
        );
        reportRateLimits();
        sendBack({ type: 'model.failed', error: failure });
      };

      /** A failure before the model is asked: the turn ends without a model span (`stage` says where). */
      const failSetup = (stage: 'sample' | 'assemble' | 'record', error: unknown) => {
        if (finished) return;
        finished = true;
        sendBack({ type: 'model.failed', error: new ModelCallSetupFailure(stage, error) });
      };

      /**
       * Sampling, assembly and the call's counters, up to the request going out: the request
       * assembled, or null when the call ended here (it reported why, or was stopped). A function of
       * its own, as is each stream event's handling below, so that V8 compiles the stream loop
       * small instead of one large body (docs/benchmarks.md, Perf-jit2).
       */
      const prepare = async (): Promise<PreparedModelCall | null> => {
        // Not inside the Turn's step that starts this actor: a command sent as the Turn enters
        // `requesting` (a cancel) is handled before anything this actor reports.
        await Promise.resolve();
        if (finished) return null;
        // World State first; its stored changes are part of the conversation the request is
        // assembled from. Sampling is not aborted: a write it started finishes (the Turn waits).
        try {
          await sampleWorldState(input);
        } catch (error) {
          failSetup('sample', error);
          return null;
        }
        if (finished) return null;
        // A call the fact before reserved has no write before its request: `model.call_recorded`
        // (or `model.over_threshold`) below tells the Turn both that World State was sampled and
        // that the request is ready, one Turn macrostep instead of two (issue 14 point 3). A call
        // that writes its counters here reports the sampling first, so that the Turn shows
        // `requesting` while they are written and a stop noted meanwhile waits for that write.
        if (!input.counted) {
          sendBack({ type: 'model.sampled' });
          // A stop noted while World State was sampled ends the call here (the Turn leaves).
          if (finished || controller.signal.aborted) return null;
        }
        // The request is assembled here, from the session's conversation as committed so far, and
        // handed straight to the port: it never enters machine context.
        let prepared: PreparedModelCall;
        try {
          // A tool source (an MCP server) told of a changed catalog: this model call sees the new one.
          await session.toolset.refresh();
          if (finished || controller.signal.aborted) return null;
          if (sliceDue()) await nextSlice();
          if (finished || controller.signal.aborted) return null;
          prepared = assembleRequest({
            system: input.systemContext,
            conversation: session.chat.view(),
            tools: session.toolset.definitions,
            pruneWatermark: session.chat.pruneWatermark,
            spillDir: services.spillDir,
            ...(session.model.maxOutputTokens !== undefined ? { maxOutputTokens: session.model.maxOutputTokens } : {}),
          });
        } catch (error) {
          failSetup('assemble', error);
          return null;
        }
        const estimatedInputTokens = prepared.estimate.estimatedInputTokens;
        const total = estimatedInputTokens + prepared.estimate.reservedOutputTokens;
        if (input.thresholdCompaction && input.compactAtTokens > 0 && total >= input.compactAtTokens) {
          // Compaction first (reference §3.1): the Turn leaves this state, which ends this actor.
          sendBack({ type: 'model.over_threshold', estimatedInputTokens });
          return null;
        }
        try {
          // A call the fact before it reserved (the Turn decided a model call was next) has its
          // counters committed already; a resubmission or an unreserved call writes them here.
          if (!input.counted) await services.storage.recordModelCallStart(input.turnId, input.modelCallIndex);
        } catch (error) {
          failSetup('record', error);
          return null;
        }
        // Ownership before the request goes out, as before a tool's run (trust-lease): past the
        // lease period (a stall since the write before this call) another core may have taken the
        // session over, and a request sent now would spend the session's budget and hand its
        // conversation to the provider on behalf of a core that no longer owns it. Within the
        // period this is a look at a clock, and nothing is awaited.
        const confirming = services.confirmOwnership?.(input.sessionId);
        if (confirming) {
          try {
            await confirming;
          } catch (error) {
            failSetup('record', error);
            return null;
          }
        }
        if (finished || controller.signal.aborted) return null;
        sendBack({ type: 'model.call_recorded', estimatedInputTokens });
        // A stop noted while the counters were written ends the call here (the Turn leaves).
        if (finished || controller.signal.aborted) return null;
        // Assembling a large conversation and serialising it for the provider are each a long
        // stretch; the host's other sessions run between them (trust-stall).
        if (sliceDue()) await nextSlice();
        if (finished || controller.signal.aborted) return null;
        return prepared;
      };

      /** One event of the model's stream; true when the call ended on it (it reported why). */
      const onStreamEvent = (raw: unknown): boolean => {
        // Issue 13.3: the port is a trust boundary; a bad event, or any event after the
        // completion, ends the call as `model_protocol_error` before a tool can run.
        if (completions > 0) {
          fail(new ModelError('model_protocol_error', `the model stream sent ${describeEvent(raw)} after its completed event`, { semanticOutput: semantic }));
          return true;
        }
        const event = checkModelStreamEvent(raw, semantic);
        switch (event.type) {
          case 'text_delta':
          case 'reasoning_delta':
          case 'tool_call':
            if (firstTokenMs === null) firstTokenMs = services.clock.now() - started;
            semantic = true;
            responseChars += event.type === 'tool_call' ? event.arguments.length : event.delta.length;
            if (responseChars > MAX_RESPONSE_CHARS) {
              fail(new ModelError('model_protocol_error', `the model response carried more than ${MAX_RESPONSE_CHARS} characters of text, reasoning and tool-call arguments`, { semanticOutput: true }));
              return true;
            }
            break;
          default:
            break;
        }
        switch (event.type) {
          case 'text_delta':
            // A surrogate held back at the end of the previous message belongs to that message.
            if (event.newBlock) emitText(textStream.end());
            // An empty delta opens no message; a delta held back keeps its message's marks.
            emitText(
              textStream.push(event.delta),
              event.delta === '' ? {} : { ...(event.newBlock ? { newBlock: true as const } : {}), ...(event.phase !== undefined ? { phase: event.phase } : {}) },
            );
            break;
          case 'reasoning_delta':
            emitReasoning(reasoningStream.push(event.delta));
            break;
          case 'tool_call':
            if (partial.toolCalls >= MAX_TOOL_CALLS_PER_RESPONSE) {
              fail(new ModelError('model_protocol_error', `the model response made more than ${MAX_TOOL_CALLS_PER_RESPONSE} tool calls`, { semanticOutput: true }));
              return true;
            }
            partial = { ...partial, toolCalls: partial.toolCalls + 1 };
            sendBack({ type: 'model.tool_call', callId: event.callId, name: event.name, arguments: event.arguments });
            break;
          case 'provider_opaque':
            sendBack({ type: 'model.provider_opaque', provider: event.provider, data: event.data });
            break;
          case 'retry':
            attempts = event.attempt;
            break;
          case 'completed':
            completions += 1;
            // A surrogate held back at the end of the last delta had no low half: release it replaced.
            emitText(textStream.end());
            emitReasoning(reasoningStream.end());
            // Held until the stream has ended well: `model.completed` is this actor's last
            // event, and the Turn leaves on it (issue 14 point 3: no completion event and
            // `done.actor` after it). An event after it still fails the call below.
            completion = {
              type: 'model.completed',
              usage: event.usage,
              ...(event.responseId !== undefined ? { responseId: event.responseId } : {}),
              ...(event.finishReason !== undefined ? { finishReason: event.finishReason } : {}),
            };
            services.spans.patch(input.spanId, {
              providerRequestId: event.responseId ?? null,
              attributes: { finishReason: event.finishReason ?? 'unknown', responseId: event.responseId ?? null, actualModel: event.actualModel ?? null },
            });
            break;
          default: {
            const never: never = event;
            throw new ModelError('model_protocol_error', `unknown model stream event ${JSON.stringify(never)}`);
          }
        }
        return false;
      };

      (async () => {
        const prepared = await prepare();
        // Checked again: a stop may have come in the ticks between `prepare`'s end and here, and
        // a span is started only for a call still running (the stop ends it otherwise).
        if (prepared === null || finished || controller.signal.aborted) return;
        startSpan(prepared);
        // Structured output (services/model/output-schema): the turn's schema rides on each of its model requests.
        const format = session.outputFormats?.get(input.turnId);
        const request = format ? { ...prepared.request, responseFormat: format.responseFormat } : prepared.request;
        for await (const raw of session.model.stream(request, { signal: controller.signal })) {
          // A buffered stream hands over its events in one promise chain: let the host's other
          // sessions run between slices of it (trust-stall).
          if (sliceDue()) await nextSlice();
          if (finished || controller.signal.aborted) return;
          if (onStreamEvent(raw)) return;
        }
        if (finished || controller.signal.aborted) return;
        if (completions === 0) {
          fail(new ModelError('model_protocol_error', 'the model stream ended without a completed response', { semanticOutput: semantic }));
          return;
        }
        finished = true;
        services.spans.patch(input.spanId, {
          attemptCount: attempts,
          attributes: { ttftMs: firstTokenMs, streamMs: services.clock.now() - started, deliveryState: semantic ? 'semantic_output_emitted' : 'accepted_no_semantic_output' },
        });
        reportRateLimits();
        // The Turn goes on to `persisting` on this event and sends `model.persist` (handled above);
        // `finished` makes the teardown a no-op from here on, so a stop never aborts the commit.
        sendBack(completion!);
      })().catch((error: unknown) => {
        if (controller.signal.aborted) return;
        fail(error);
      });

      return () => {
        if (finished) return;
        finished = true;
        controller.abort(new Error('the model call was stopped'));
        // Stopped from outside: the turn's end says whether the user cancelled (reference §11.1);
        // any other stop (shutdown, the session actor stopped) leaves the outcome unknown.
        const deliveryState = semantic ? 'semantic_output_emitted' : 'possibly_sent';
        // Stopped before the request went out: no span was started.
        if (!spanStarted) return;
        services.spans.hold(input.turnId, input.spanId, (userCancel) => ({
          attemptCount: attempts,
          status: userCancel ? 'cancelled' : 'outcome_unknown',
          ...(userCancel ? {} : { errorCode: 'actor_stopped', errorMessage: 'the runtime stopped the model call' }),
          attributes: { deliveryState, errorPhase: 'cancelled', finishReason: 'cancelled' },
        }));
      };
    }),

    compactConversation: fromPromise<CompactOutput, CompactInput>(async ({ input, signal }) => {
      const result = await compactor.run({
        sessionId: input.sessionId,
        kind: input.trigger,
        agentPrompt: services.session(input.sessionId).agentPrompt,
        signal,
        turn: {
          turnId: input.turnId,
          systemContext: input.systemContext,
          plan: input.plan,
          compactAtTokens: input.compactAtTokens,
          triggerModelSpanId: input.triggerModelSpanId,
          triggerErrorCode: input.trigger === 'overflow' ? 'context_overflow' : null,
          ...(input.estimatedInputTokens !== null ? { triggerEstimatedInputTokens: input.estimatedInputTokens } : {}),
        },
      });
      return {
        summarized: result.summarized,
        checkpointId: result.checkpoint?.id ?? null,
        conversationTokensBefore: result.conversationTokensBefore,
        conversationTokensAfter: result.conversationTokensAfter,
      };
    }),

    recordCancelledCalls: recordCancelledCallsActor(services),

    finishTurn: fromPromise<boolean, FinishInput>(async ({ input }) => {
      const outcome = input.outcome;
      services.spans.endHeld(input.turnId, outcome.status === 'cancelled');
      const end: FinishTurn = {
        status: outcome.status,
        errorCode: outcome.status === 'failed' ? outcome.code : null,
        errorMessage: outcome.status === 'failed' ? outcome.message : null,
        planUnfinishedStepCount: input.planUnfinishedStepCount,
        unmadeModelCall: input.unmadeModelCall,
      };
      const entry = unrecorded.get(input.sessionId)?.get(input.turnId);
      if (input.recorded) {
        // Written with the final answer (the chart asked for it): nothing is left to write.
        unrecorded.get(input.sessionId)?.delete(input.turnId);
        void services.trace.flush().catch(() => undefined);
        return true;
      }
      let recorded: boolean;
      try {
        recorded = await services.storage.finishTurn(input.turnId, end);
      } catch (error) {
        // An end refused for want of the lease is not kept: the session is another runtime's now,
        // and whoever took it over closed the turn.
        if ((error as { code?: string } | null)?.code === 'ownership_lost') unrecorded.get(input.sessionId)?.delete(input.turnId);
        else if (entry?.begun) entry.end = end;
        throw error;
      }
      unrecorded.get(input.sessionId)?.delete(input.turnId);
      // Spans still open belong to this turn only if something went wrong; the writer flushes on its own.
      void services.trace.flush().catch(() => undefined);
      return recorded;
    }),
  };
}
