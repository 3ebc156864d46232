/**
 * @module services/tool-call-actors
 * The effects of a tool call: validation (with the tool span start), authorisation, execution, the
 * plan commit and the result write. Provided to `toolCallMachine` by the core, and to the Turn as
 * `runToolCall`, one actor for the whole of a call that needs nobody.
 */
import { fromCallback, fromPromise } from 'xstate';
import type { ZodError } from 'zod';
import { errorMessage } from '../errors.js';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../protocol/json-depth.js';
import { storableValue } from '../protocol/storable-text.js';
import type { PermissionCard } from '../protocol/updates.js';
import type { AgentToolInput, AgentToolOutput, ExecuteInput, PlanCommitInput, PlanCommitOutput, RecordInput } from '../machines/tool-call/ports.js';
import type { AgentToolName } from './agents/control.js';
import type { AuthorizationOutput, ToolCallEvent, ToolCallInput, ValidatedCall } from '../machines/types.js';
import type { TurnEvent } from '../machines/turn/ports.js';
import { toolRunEffect } from '../machines/turn/effects.js';
import { validatePlanArgs } from './plan/update-plan.js';
import { cancelledAfterText, invalidInputText, PLAN_UPDATED_TEXT, toolNotFoundText } from '../protocol/model-texts.js';
import { validateUserInputArgs } from './user-input/request-user-input.js';
import type { RuntimeServices } from './runtime.js';
import { completeCard, normalizeToolResult } from './tools/define.js';
import { commitToolResult, toolResultMessage } from './tools/result.js';
import { cancelledResult, failedResult, succeededResult, type ToolResult } from '../protocol/tool-result.js';
import { boundResultText, cutResultText, MAX_RESULT_BYTES, spillPath } from './tools/output.js';
import { ProgressBudget } from './updates/progress-budget.js';
import { isoNow } from './clock.js';
import type { SpanContent, SpanData } from './trace/signals.js';
import { MAX_TOOL_ARGUMENTS_CHARS, oversizedArgumentsChars } from './model/stream-events.js';
import { yieldIfDue } from './host-slice.js';

/** What the model is told of arguments over the size limit. */
function oversizedArgumentsText(chars: number): string {
  return `the arguments were ${chars} characters, over the limit of ${MAX_TOOL_ARGUMENTS_CHARS}; nothing was run. Send smaller calls`;
}

export const DEFAULT_CARD_DECISIONS: PermissionCard['decisions'] = ['allow_once', 'deny', 'allow_for_turn', 'allow_for_session'];

function invalid(message: string): ToolResult {
  return failedResult('invalid_arguments', invalidInputText(message));
}

function zodText(error: ZodError): string {
  return error.issues.map((i) => `${i.path.length > 0 ? i.path.join('.') : '(root)'}: ${i.message}`).join('; ');
}

export function toolSpanId(toolCallId: string): string {
  return `span.${toolCallId}`;
}

/** The span of one tool call as it starts: `tool.call`, running, under the model call that asked for it. */
export function toolSpan(input: { sessionId: string; turnId: string; toolCallId: string; providerCallId: string; toolName: string; parentSpanId: string | null; startedAt: string }): SpanData {
  return {
    id: toolSpanId(input.toolCallId),
    traceId: input.turnId,
    sessionId: input.sessionId,
    turnId: input.turnId,
    parentSpanId: input.parentSpanId,
    kind: 'tool_call',
    name: 'tool.call',
    status: 'running',
    startedAt: input.startedAt,
    providerCallId: input.providerCallId,
    requestedToolName: input.toolName,
    attributes: { schemaVersion: 1 },
  };
}

function spanStatus(result: ToolResult): SpanData['status'] {
  return result.status;
}

/** What a running tool reports to the chart that runs it. */
type ToolRunEvent = Extract<ToolCallEvent, { type: 'tool.progress' | 'tool.finished' }>;

export function createToolCallActors(services: RuntimeServices) {
  /** The tool span is started by validation and ended where the result is stored (or refused). */
  const endToolSpan = (toolCallId: string, patch: Partial<SpanData>, content?: SpanContent) => services.spans.end(toolSpanId(toolCallId), patch, undefined, content);
  /** Validation of a call (seed 000 §5): the tool span starts, then JSON, name, schema (the chart applies the doom loop). */
  const validate = (input: ToolCallInput): ValidatedCall => {
    const { call } = input;
    const span = toolSpan({
      sessionId: input.sessionId,
      turnId: input.turnId,
      toolCallId: input.toolCallId,
      providerCallId: call.callId,
      toolName: call.name,
      parentSpanId: input.parentSpanId,
      startedAt: isoNow(services.clock),
    });
    services.spans.start(span, undefined, { toolArguments: call.arguments });

    // Arguments over the size limit reached here only as a marker (services/model/stream-events).
    const oversized = oversizedArgumentsChars(call.arguments);
    if (oversized !== null) return { kind: 'invalid', result: invalid(oversizedArgumentsText(oversized)), resolvedName: null };
    let args: unknown;
    try {
      args = call.arguments.trim() === '' ? {} : JSON.parse(call.arguments);
    } catch (error) {
      return { kind: 'invalid', result: invalid(errorMessage(error)), resolvedName: null };
    }
    // Attack round 3: arguments nested 100,000 deep overflowed the stack in the doom-loop guard.
    if (nestsDeeperThan(args, MAX_JSON_DEPTH)) {
      return { kind: 'invalid', result: invalid(`the arguments nest deeper than ${MAX_JSON_DEPTH} levels of arrays and objects; nothing was run`), resolvedName: null };
    }
    const session = services.session(input.sessionId);
    const resolved = session.toolset.resolve(call.name);
    if (!resolved) {
      return { kind: 'invalid', result: failedResult('tool_not_found', toolNotFoundText(call.name)), resolvedName: null };
    }
    if (resolved.kind === 'registered') {
      const parsed = resolved.tool.parameters.safeParse(args);
      if (!parsed.success) return { kind: 'invalid', result: invalid(zodText(parsed.error)), resolvedName: call.name };
      args = parsed.data;
    } else if (resolved.name === 'request_user_input') {
      const checked = validateUserInputArgs(args);
      if (!checked.ok) return { kind: 'invalid', result: invalid(checked.message), resolvedName: call.name };
      args = checked.request;
    }
    // The doom-loop rule (seed 000 §4) is the Turn chart's guard on this answer (machines/tool-call/doom-loop.ts).
    return resolved.kind === 'control' ? { kind: 'control', args } : { kind: 'registered', args };
  };

  /**
   * Authorisation of a validated registered call (permissions.md §1): execute, a rule's denial, or a card.
   * The parsed arguments come beside the call's input rather than spread into a copy of it: V8 (Node 20)
   * gives every `{ ...input, args }` a map of its own, so each read of it missed its inline caches and
   * each call left a map behind for the old-space collector (docs/benchmarks.md, perf-jit).
   */
  const authorize = async (input: ToolCallInput, args: unknown): Promise<AuthorizationOutput> => {
    const session = services.session(input.sessionId);
    const resolved = session.toolset.resolve(input.call.name);
    if (resolved?.kind !== 'registered') return { kind: 'execute' };
    const decision = await session.authorizer.authorize(resolved.tool, args, {
      sessionId: input.sessionId,
      turnId: input.turnId,
      workingDirectory: session.workingDirectory,
      permissionMode: input.permissionMode,
      nonInteractive: input.nonInteractive,
    });
    switch (decision.kind) {
      case 'execute':
        return { kind: 'execute' };
      case 'deny':
        return { kind: 'deny', text: decision.text, source: decision.source };
      case 'card':
        return { kind: 'card', card: completeCard(decision.card, resolved.tool.name, session.workingDirectory, DEFAULT_CARD_DECISIONS), at: services.clock.now() };
      default: {
        const never: never = decision;
        throw new Error(`unknown authorization ${JSON.stringify(never)}`);
      }
    }
  };

  /**
   * Runs a call's tool (`executeTool`, and the Turn's `runToolCall` when its chart sends
   * `tool.execute`): it reports `tool.progress` while the tool runs and `tool.finished` once, with
   * every failure of the tool as a result. `cancel` aborts the tool (the chart's `stopping` asks for
   * it and its `after` transition bounds the wait); `stop` aborts it if it has not finished and drops
   * whatever it reports later. Throws only if the session is gone (`services.session`).
   */
  const execute = (input: ExecuteInput, report: (event: ToolRunEvent) => void): { cancel(): void; stop(): void } => {
    const session = services.session(input.sessionId);
    const resolved = session.toolset.resolve(input.toolName);
    const controller = new AbortController();
    let settled = false;
    const finish = (result: ToolResult) => {
      if (settled) return;
      settled = true;
      report({ type: 'tool.finished', result });
    };
    const run = {
      cancel() {
        if (!controller.signal.aborted) controller.abort(new Error('the turn was cancelled'));
      },
      stop() {
        if (!settled) controller.abort(new Error('the tool call actor stopped'));
        settled = true;
      },
    };
    if (resolved?.kind !== 'registered') {
      queueMicrotask(() => finish(failedResult('tool_not_found', toolNotFoundText(input.toolName))));
      return run;
    }
    // The fallback cut (reference §11.2): no result text reaches the model past 32,000 bytes.
    const boundResult = (result: ToolResult): ToolResult => {
      if (Buffer.byteLength(result.text) <= MAX_RESULT_BYTES) return result;
      const text = services.toolResultSpillRoot
        ? boundResultText(result.text, spillPath(services.toolResultSpillRoot, input.sessionId, input.toolCallId))
        : cutResultText(result.text);
      return { ...result, text, ...(result.error ? { error: { ...result.error, message: text } } : {}) };
    };
    const started = services.clock.now();
    const approvalDecision = input.approval.decision === 'deny' ? 'none' : input.approval.decision;
    // Progress is capped per call before it becomes an update (issue 12.9): the ring keeps 512 of them.
    const progress = new ProgressBudget(
      (item) => {
        // Progress is live output; it is made storable like the result it previews.
        if (!settled) report({ type: 'tool.progress', progress: storableValue(item) });
      },
      () => services.clock.now(),
    );
    const executeTool = () =>
      resolved.tool.execute(input.args, {
        sessionId: input.sessionId,
        turnId: input.turnId,
        toolCallId: input.toolCallId,
        providerCallId: input.providerCallId,
        workingDirectory: session.workingDirectory,
        permissionMode: input.permissionMode,
        signal: controller.signal,
        progress: (item) => progress.push(item),
        approval: { decision: approvalDecision, ...(input.approval.card ? { card: input.approval.card } : {}) },
      });
    // Ownership first (integrity-outage): after an outage or a stall longer than the lease, another
    // core may have taken the session and closed this turn, and no fence can take a tool's run
    // back. Within the lease period this is a look at a clock (nothing to wait for); past it, the
    // run waits for a renewal, and a lease that cannot be confirmed fails the call unrun.
    const confirming = services.confirmOwnership?.(input.sessionId);
    let unconfirmed: unknown;
    (confirming === undefined
      ? Promise.resolve().then(executeTool)
      : confirming.then(
          () => (settled || controller.signal.aborted ? Promise.reject(controller.signal.reason as Error) : executeTool()),
          (error: unknown) => {
            unconfirmed = error;
            throw error;
          },
        )
    )
      // Reading what the tool returned is part of its run: a result that cannot be read (a
      // JavaScript tool that returned nothing) fails the call as a throw would, instead of
      // rejecting where nobody listens (an unhandled rejection, and a turn that never ended).
      .then((result) => boundResult(normalizeToolResult(result)))
      .then(
        (result) => {
          progress.finish();
          finish(result);
        },
        (error: unknown) => {
          progress.finish();
          if (unconfirmed !== undefined) {
            finish(failedResult('execution_failed', `the tool did not run: ${errorMessage(unconfirmed)}`));
            return;
          }
          if (controller.signal.aborted) {
            finish(cancelledResult(cancelledAfterText(services.clock.now() - started)));
            return;
          }
          finish(failedResult('execution_failed', errorMessage(error)));
        },
      );
    return run;
  };

  /**
   * Writes a call's decided result (`recordToolResult`, and the Turn's `runToolCall` when its chart
   * sends `tool.record`) and ends the tool span; answers the result as stored.
   */
  const record = async (input: RecordInput): Promise<ToolResult> => {
    // Issue 13.2: whatever the tool produced is stored with U+FFFD in place of what cannot be, and
    // that stored text is what the span and the update say (commitToolResult does the same).
    const result = storableValue(input.result);
    const approval = input.approval;
    const attributes: Record<string, unknown> = {
      permissionDecision:
        result.status === 'denied' ? 'deny' : result.status === 'cancelled' && approval.decision === 'none' ? 'cancelled' : 'allow',
      permissionDecisionSource: approval.source,
      sandboxDenied: result.sandboxDenied ?? false,
      // Reference §4.14: the permission facts a trace reader needs to tell the categories apart.
      sessionMode: input.permissionMode,
      sessionModeOrigin: input.permissionModeOrigin,
      ...(input.executed ? { sandboxMode: input.permissionMode } : {}),
      escalationPaths: approval.card?.kind === 'escalation' ? (approval.card.requestedPaths ?? []).map((p) => ({ path: p.path, access: p.access, scope: p.scope })) : [],
      escalationJustification: approval.card?.kind === 'escalation' ? (approval.card.reason ?? '') : '',
      dangerMatch: approval.card?.dangerMatch ?? '',
    };
    const permissionWaitMs =
      approval.requestedAt !== null && approval.decidedAt !== null ? Math.max(0, approval.decidedAt - approval.requestedAt) : null;
    const end = (resultPersisted: boolean) =>
      endToolSpan(input.toolCallId, {
        status: spanStatus(result),
        resolvedToolName: input.resolvedName,
        permissionWaitMs,
        errorCode: input.spanErrorCode ?? result.error?.code ?? null,
        errorMessage: result.error?.message ?? null,
        attributes: { ...attributes, resultPersisted },
      }, { toolResult: result.text });
    try {
      await commitToolResult(services, input);
    } catch (error) {
      end(false);
      throw error;
    }
    end(true);
    return result;
  };

  return {
    /**
     * The whole of a call the Turn runs itself, over `tools.run` (issue 14 point 3), run in the
     * `tool` slot of the Turn's effects actor (machines/turn/effects.ts):
     * it validates at once and reports `tool.validated`; then it does only what the chart sends it,
     * each step's outcome reported back as an event: `tool.authorize` (with the parsed arguments) →
     * `tool.authorized`, either failure being `tool.check_failed`; `tool.execute` → the tool's
     * `tool.progress` and `tool.finished` (`tool.execute_failed` if the session is gone);
     * `toolcall.cancel` aborts the running tool; `tool.record` → `tool.recorded` or
     * `tool.record_failed`. The chart decides every branch; the actor saves the execute and record
     * actors and their start, resolve and done events.
     */
    runToolCall: toolRunEffect(({ input, sendBack, receive }) => {
      let stopped = false;
      let running: { cancel(): void; stop(): void } | null = null;
      const report = (event: TurnEvent) => {
        if (!stopped) sendBack(event);
      };
      receive((event) => {
        switch (event.type) {
          case 'tool.authorize':
            authorize(input, event.args).then(
              (output) => report({ type: 'tool.authorized', output }),
              (error: unknown) => report({ type: 'tool.check_failed', error }),
            );
            return;
          case 'tool.execute':
            try {
              running = execute(event.input, report);
            } catch (error) {
              report({ type: 'tool.execute_failed', error });
            }
            return;
          case 'toolcall.cancel':
            running?.cancel();
            return;
          case 'tool.record':
            // The chart records only once it is done with the tool: one that has not confirmed its
            // stop within the grace is aborted and its late result dropped, as the execute actor's
            // stop did when the chart left `executing`.
            running?.stop();
            running = null;
            record(event.input).then(
              (result) => report({ type: 'tool.recorded', result }),
              (error: unknown) => report({ type: 'tool.record_failed', error }),
            );
            return;
        }
      });
      // Not inside the step that starts this actor: a command sent as the Turn enters `validating`
      // (a cancel) is handled before the validation's outcome, as with an invoked promise.
      // The host's other sessions run first when this stretch is long (trust-stall: many large calls).
      Promise.resolve()
        .then(yieldIfDue)
        .then(() => validate(input))
        .then(
          (output) => report({ type: 'tool.validated', output }),
          (error: unknown) => report({ type: 'tool.check_failed', error }),
        );
      return () => {
        stopped = true;
        running?.stop();
      };
    }),

    executeTool: fromCallback<ToolCallEvent, ExecuteInput>(({ input, sendBack, receive }) => {
      const run = execute(input, sendBack);
      // The chart's `executing.stopping` asks the tool to stop; its `after` transition, not this
      // actor, decides when a tool that has not confirmed its stop ends outcome_unknown.
      receive((event) => {
        if (event.type === 'toolcall.cancel') run.cancel();
      });
      return () => run.stop();
    }),

    commitPlanUpdate: fromPromise<PlanCommitOutput, PlanCommitInput>(async ({ input }) => {
      // Parsed arguments may hold a NUL that the JSON text escaped (`\u0000`); the plan row is jsonb.
      const checked = storableValue(validatePlanArgs(input.args));
      if (!checked.ok) {
        return { ok: false, result: failedResult('invalid_arguments', checked.message) };
      }
      const result = succeededResult(PLAN_UPDATED_TEXT);
      const attributes = { permissionDecision: 'allow', permissionDecisionSource: 'control_tool', sessionMode: input.permissionMode, sessionModeOrigin: input.permissionModeOrigin };
      const updatedAt = new Date(services.clock.now()).toISOString();
      const message = toolResultMessage(services.ids.next('msg'), input.providerCallId, 'update_plan', result);
      try {
        const stored = await services.storage.commitPlanUpdate(input.turnId, { explanation: checked.explanation, steps: checked.steps, updatedAt }, message);
        services.session(input.sessionId).chat.append([stored]);
      } catch (error) {
        endToolSpan(input.toolCallId, {
          status: 'failed',
          resolvedToolName: 'update_plan',
          errorCode: 'persistence_error',
          errorMessage: errorMessage(error),
          attributes: { ...attributes, resultPersisted: false },
        });
        throw error;
      }
      endToolSpan(input.toolCallId, {
        status: 'succeeded',
        resolvedToolName: 'update_plan',
        attributes: { ...attributes, resultPersisted: true },
      });
      return { ok: true, result, plan: { explanation: checked.explanation, steps: checked.steps, updatedAt } };
    }),

    runAgentTool: fromPromise<AgentToolOutput, AgentToolInput>(async ({ input, signal }) => {
      const control = services.agentControl(input.sessionId);
      if (!control) {
        return { result: failedResult('tool_not_found', toolNotFoundText(input.toolName)) };
      }
      // Ownership first, as before a tool's run (trust-lease): a spawn, a follow-up or an interrupt
      // acts on children that the root's lease does not fence (a child is a session of its own, with
      // a lease of its own), so a core cut off past its lease period must not steer them once
      // another core took the root over. Within the lease period this is a look at a clock.
      try {
        await services.confirmOwnership?.(input.sessionId);
      } catch (error) {
        return { result: failedResult('execution_failed', `the tool did not run: ${errorMessage(error)}`) };
      }
      return control.execute(input.toolName as AgentToolName, input.args, {
        sessionId: input.sessionId,
        toolCallId: input.toolCallId,
        spawnSpanId: toolSpanId(input.toolCallId),
        signal,
      });
    }),

    recordToolResult: fromPromise<ToolResult, RecordInput>(({ input }) => record(input)),
  };
}
