// The inspector page's runtime view of one session, and the pure reducer that builds it from
// SessionUpdate envelopes (seed 000 §7) or from a SessionSnapshot (§8), after reference §8.4-8.5:
// no I/O, no clock, no DOM here; the controller in app.js decides when to replay or take a snapshot.

export const VIEW_VERSION = 2;
export const LOG_LIMIT = 300;
export const COMPACTION_LIMIT = 50;
const PROGRESS_LIMIT = 4000;
const DELTA_TYPES = new Set(['text_delta', 'reasoning_delta', 'tool_call_progress']);

/** The part of a view that belongs to one turn: empty before a turn, and again when the next starts. */
function emptyTurn() {
  return {
    turnId: null,
    clientRequestId: null,
    phase: null,
    startedAtMs: null,
    endedAtMs: null,
    draft: { text: '', reasoning: '' },
    toolCalls: {},
    orderedToolCallIds: [],
    pendingPermission: null,
    pendingQuestion: null,
    plan: null,
    terminal: null,
  };
}

/** An empty view of `sessionId` as seen in actor incarnation `epoch`. */
export function createView(sessionId, epoch) {
  return {
    version: VIEW_VERSION,
    sessionId,
    epoch,
    lastSequence: 0,
    ...emptyTurn(),
    compactions: [],
    log: [],
    sync: { source: 'live', count: 0 },
  };
}

/** A tool call's entry as first seen (by its start, or by its finish when the start was missed). */
function newToolCall(update, fields) {
  return { toolCallId: update.toolCallId, providerCallId: update.providerCallId, toolName: update.toolName, progress: '', ...fields };
}

/**
 * What to do with an envelope (reference §8.5): `ignore` a sequence already applied, `apply` the
 * next one, `gap` when some are missing, `epoch` when it comes from another actor incarnation.
 */
export function classifyEnvelope(view, epoch, envelope) {
  if (epoch !== view.epoch) return 'epoch';
  if (envelope.sequence <= view.lastSequence) return 'ignore';
  if (envelope.sequence === view.lastSequence + 1) return 'apply';
  return 'gap';
}

/** True while the view's turn has not finished. */
export function isTurnActive(view) {
  return view.turnId !== null && (view.terminal === null || view.terminal.turnId !== view.turnId);
}

function tail(text, n) {
  return text.length > n ? `…${text.slice(-n)}` : text;
}

/** A one-line description of an update for the update log. */
export function summarize(update) {
  switch (update.type) {
    case 'turn_started':
      return `client request ${update.clientRequestId}`;
    case 'phase_changed':
      return update.phase;
    case 'text_delta':
    case 'reasoning_delta':
      return JSON.stringify(update.delta);
    case 'draft_cleared':
      return update.reason;
    case 'tool_call_started':
      return `${update.toolName} ${update.arguments}`;
    case 'tool_call_progress':
      return update.progress.kind === 'message' ? update.progress.message : update.progress.chunk.trimEnd();
    case 'tool_call_finished':
      return `${update.toolName} ${update.status}: ${update.text.split('\n')[0]}`;
    case 'permission_requested':
      return `${update.card.toolName}: ${update.card.summary}`;
    case 'permission_resolved':
      return update.decision;
    case 'user_input_requested':
      return update.request.questions.map((q) => q.question).join(' / ');
    case 'user_input_resolved':
      return update.outcome === 'answered' ? `answered: ${Object.values(update.answers ?? {}).join(' / ')}` : update.outcome;
    case 'plan_updated':
      return update.plan.map((s) => `[${s.status}] ${s.step}`).join(', ');
    case 'turn_finished':
      return update.outcome.status === 'failed' ? `failed: ${update.outcome.code}` : update.outcome.status;
    case 'conversation_compacted':
      return `${update.kind}: ${update.conversationTokensBefore} → ${update.conversationTokensAfter} tokens · checkpoint ${update.compactionId}`;
    default:
      return '';
  }
}

function appendLog(log, envelope) {
  const { update, sequence } = envelope;
  const last = log[log.length - 1];
  const sameStream =
    last &&
    DELTA_TYPES.has(update.type) &&
    last.type === update.type &&
    last.to === sequence - 1 &&
    (update.type !== 'tool_call_progress' || last.toolCallId === update.toolCallId);
  if (sameStream) {
    const text = update.type === 'tool_call_progress' ? summarize(update) : update.delta;
    const merged = { ...last, to: sequence, count: last.count + 1, text: tail(last.text + text, 80) };
    merged.summary = `${JSON.stringify(merged.text)}`;
    return [...log.slice(0, -1), merged];
  }
  const entry = {
    from: sequence,
    to: sequence,
    type: update.type,
    turnId: envelope.turnId,
    count: 1,
    summary: summarize(update),
    text: update.type === 'text_delta' || update.type === 'reasoning_delta' ? update.delta : update.type === 'tool_call_progress' ? summarize(update) : '',
    toolCallId: update.toolCallId ?? null,
  };
  const next = [...log, entry];
  return next.length > LOG_LIMIT ? next.slice(next.length - LOG_LIMIT) : next;
}

function patchTool(view, toolCallId, patch) {
  const current = view.toolCalls[toolCallId];
  if (!current) return view;
  return { ...view, toolCalls: { ...view.toolCalls, [toolCallId]: { ...current, ...patch(current) } } };
}

/** Applies the envelope that follows `view.lastSequence`. Pure: returns a new view. */
export function applyUpdate(view, envelope) {
  const update = envelope.update;
  let next = { ...view, lastSequence: envelope.sequence, log: appendLog(view.log, envelope) };
  switch (update.type) {
    case 'turn_started':
      return {
        ...next,
        ...emptyTurn(),
        turnId: envelope.turnId,
        clientRequestId: update.clientRequestId,
        phase: 'starting',
        startedAtMs: envelope.occurredAtMs,
      };
    case 'phase_changed':
      return { ...next, phase: update.phase };
    case 'text_delta':
      return { ...next, draft: { ...next.draft, text: next.draft.text + update.delta } };
    case 'reasoning_delta':
      return { ...next, draft: { ...next.draft, reasoning: next.draft.reasoning + update.delta } };
    case 'draft_cleared':
      return { ...next, draft: { text: '', reasoning: '' } };
    case 'tool_call_started':
      return {
        ...next,
        toolCalls: {
          ...next.toolCalls,
          [update.toolCallId]: newToolCall(update, { arguments: update.arguments, status: 'validating', result: null }),
        },
        orderedToolCallIds: next.orderedToolCallIds.includes(update.toolCallId)
          ? next.orderedToolCallIds
          : [...next.orderedToolCallIds, update.toolCallId],
      };
    case 'tool_call_progress': {
      const chunk = update.progress.kind === 'message' ? `${update.progress.message}\n` : update.progress.chunk;
      return patchTool(next, update.toolCallId, (c) => ({
        status: c.status === 'finished' ? c.status : 'executing',
        progress: tail(c.progress + chunk, PROGRESS_LIMIT),
      }));
    }
    case 'tool_call_finished': {
      const result = { status: update.status, text: update.text, errorCode: update.error ? update.error.code : null };
      if (!next.toolCalls[update.toolCallId]) {
        next = {
          ...next,
          toolCalls: {
            ...next.toolCalls,
            [update.toolCallId]: newToolCall(update, { arguments: '', status: 'finished', result }),
          },
          orderedToolCallIds: [...next.orderedToolCallIds, update.toolCallId],
        };
        return next;
      }
      return patchTool(next, update.toolCallId, () => ({ status: 'finished', result }));
    }
    case 'permission_requested':
      return patchTool(
        { ...next, pendingPermission: { turnId: envelope.turnId, toolCallId: update.toolCallId, card: update.card } },
        update.toolCallId,
        () => ({ status: 'waiting_permission' }),
      );
    case 'permission_resolved': {
      const cleared =
        next.pendingPermission && next.pendingPermission.toolCallId === update.toolCallId ? { ...next, pendingPermission: null } : next;
      return patchTool(cleared, update.toolCallId, (c) => ({
        status: c.status === 'finished' ? c.status : update.decision === 'deny' || update.decision === 'cancelled' ? 'denied' : 'executing',
        decision: update.decision,
      }));
    }
    case 'user_input_requested':
      return patchTool(
        { ...next, pendingQuestion: { turnId: envelope.turnId, toolCallId: update.toolCallId, request: update.request } },
        update.toolCallId,
        () => ({ status: 'waiting_user_input' }),
      );
    case 'user_input_resolved': {
      const cleared = next.pendingQuestion && next.pendingQuestion.toolCallId === update.toolCallId ? { ...next, pendingQuestion: null } : next;
      return patchTool(cleared, update.toolCallId, (c) => ({ status: c.status === 'finished' ? c.status : 'recording', answers: update.answers ?? null }));
    }
    case 'plan_updated':
      return { ...next, plan: { explanation: update.explanation, steps: update.plan, updatedAt: update.updatedAt } };
    case 'turn_finished':
      return {
        ...next,
        pendingPermission: null,
        pendingQuestion: null,
        terminal: { turnId: envelope.turnId, outcome: update.outcome },
        endedAtMs: envelope.occurredAtMs,
      };
    case 'conversation_compacted': {
      // In a turn (threshold, overflow) or between turns (manual, rewind): the live turn is untouched.
      const compaction = {
        compactionId: update.compactionId,
        kind: update.kind,
        tokensBefore: update.conversationTokensBefore,
        tokensAfter: update.conversationTokensAfter,
        sequence: envelope.sequence,
        turnId: envelope.turnId,
        atMs: envelope.occurredAtMs,
      };
      return { ...next, compactions: [...next.compactions, compaction].slice(-COMPACTION_LIMIT) };
    }
    default:
      // An update type this page does not know: the sequence still advances (reference §8.5).
      return next;
  }
}

/** Replaces the runtime part of the view with a SessionSnapshot; the log keeps a marker. */
export function applySnapshot(view, sessionId, epoch, snapshot) {
  const base = createView(sessionId, epoch);
  const sameEpoch = view && view.epoch === epoch;
  const keptLog = sameEpoch ? view.log : [];
  const marker = {
    from: snapshot.lastUpdateSequence,
    to: snapshot.lastUpdateSequence,
    type: 'snapshot',
    turnId: snapshot.runtime.turnId ?? null,
    count: 1,
    summary: `rebuilt from the snapshot at sequence ${snapshot.lastUpdateSequence} (${snapshot.runtime.type})`,
    text: '',
    toolCallId: null,
  };
  // The snapshot does not list compactions (the checkpoints endpoint does); those seen are kept.
  const next = {
    ...base,
    lastSequence: snapshot.lastUpdateSequence,
    compactions: sameEpoch && Array.isArray(view.compactions) ? view.compactions : [],
    log: [...keptLog, marker].slice(-LOG_LIMIT),
  };
  const runtime = snapshot.runtime;
  switch (runtime.type) {
    case 'idle':
      return next;
    case 'running': {
      const toolCalls = {};
      for (const call of runtime.toolCalls) {
        toolCalls[call.toolCallId] = {
          toolCallId: call.toolCallId,
          providerCallId: call.providerCallId,
          toolName: call.toolName,
          arguments: call.arguments,
          status: call.status,
          progress: '',
          result: call.result ? { status: call.result.status, text: call.result.text, errorCode: null } : null,
        };
      }
      const approval = runtime.pendingApprovals[0];
      const question = (runtime.pendingUserInput ?? [])[0];
      return {
        ...next,
        turnId: runtime.turnId,
        clientRequestId: runtime.clientRequestId,
        phase: runtime.phase,
        draft: { text: runtime.draft.text, reasoning: runtime.draft.reasoning },
        toolCalls,
        orderedToolCallIds: runtime.toolCalls.map((c) => c.toolCallId),
        pendingPermission: approval ? { turnId: runtime.turnId, toolCallId: approval.toolCallId, card: approval.card } : null,
        pendingQuestion: question ? { turnId: runtime.turnId, toolCallId: question.toolCallId, request: question.request } : null,
        plan: runtime.plan,
      };
    }
    case 'terminal':
      return {
        ...next,
        turnId: runtime.turnId,
        clientRequestId: runtime.clientRequestId,
        phase: runtime.outcome.status,
        plan: runtime.plan,
        terminal: { turnId: runtime.turnId, outcome: runtime.outcome },
      };
    default:
      return next;
  }
}
