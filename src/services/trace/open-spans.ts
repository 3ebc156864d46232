/**
 * @module services/trace/open-spans
 * The spans of model and tool calls between their start and their end, kept beside the trace
 * recorder (issue 14 point 3). An actor starts a span here and whichever actor ends the call ends it
 * by id: the end carries the same fields as the start, and no actor file keeps a map of its own.
 */
import { isoNow, type Clock } from '../clock.js';
import type { TraceRecorder } from './recorder.js';
import type { SpanContent, SpanData, SpanPayload } from '../../protocol/trace-signals.js';

export class OpenSpans {
  private readonly open = new Map<string, SpanData>();
  /** Spans of calls stopped from outside, per turn, until the turn's end says why (issue 13.6). */
  private readonly held = new Map<string, Map<string, (userCancel: boolean) => Partial<SpanData>>>();

  constructor(
    private readonly trace: TraceRecorder,
    private readonly clock: Clock,
  ) {}

  /** Records the start and remembers the span until its end; `content` only reaches span sinks. */
  start(span: SpanData, payloads?: SpanPayload[], content?: SpanContent): void {
    this.open.set(span.id, span);
    this.trace.record({ type: 'span_started', span, ...(payloads ? { payloads } : {}), ...(content ? { content } : {}) });
  }

  /** Facts learnt while the call runs (the completion's response id, timings) that the end keeps. */
  patch(id: string, patch: Partial<SpanData>): void {
    const span = this.open.get(id);
    if (!span) return;
    this.open.set(id, { ...span, ...patch, attributes: { ...span.attributes, ...(patch.attributes ?? {}) } });
  }

  /**
   * Records the end of an open span with `patch` over its start; an unknown or already ended span
   * is left alone, so that two paths racing to end a call write one end.
   */
  end(id: string, patch: Partial<SpanData>, payloads?: SpanPayload[], content?: SpanContent): void {
    const span = this.open.get(id);
    if (!span) return;
    this.open.delete(id);
    // A clock stepped back never ends a span before it started.
    const endedAt = isoNow(this.clock, span.startedAt);
    this.trace.record({
      type: 'span_ended',
      span: { ...span, ...patch, endedAt, attributes: { ...span.attributes, ...(patch.attributes ?? {}) } },
      ...(payloads ? { payloads } : {}),
      ...(content ? { content } : {}),
    });
  }

  /**
   * Ends every span of `turnId` still open with `patch` (its held ones first, as not cancelled by
   * the user): the turn's actor failed, and no actor is left to end its calls' spans.
   */
  endTurn(turnId: string, patch: Partial<SpanData>): void {
    this.endHeld(turnId, false);
    for (const [id, span] of [...this.open]) if (span.turnId === turnId) this.end(id, patch);
  }

  /** Whether a span of `turnId` matching `test` is open (a model call the crashed turn's end must not take back). */
  hasOpen(turnId: string, test: (span: SpanData) => boolean): boolean {
    for (const span of this.open.values()) if (span.turnId === turnId && test(span)) return true;
    return false;
  }

  /**
   * A call stopped from outside cannot tell why; its span waits for the turn's end, which knows
   * (`endHeld`), and `finish` gives the end for either reason. Without an end in this task (the
   * whole session actor stopped), the span ends as not cancelled by the user, from a microtask.
   */
  hold(turnId: string, id: string, finish: (userCancel: boolean) => Partial<SpanData>): void {
    const held = this.held.get(turnId) ?? new Map<string, (userCancel: boolean) => Partial<SpanData>>();
    this.held.set(turnId, held);
    held.set(id, finish);
    queueMicrotask(() => this.endHeld(turnId, false));
  }

  /** Ends the held spans of a turn: `userCancel` says the user cancelled it. */
  endHeld(turnId: string, userCancel: boolean): void {
    const held = this.held.get(turnId);
    if (!held) return;
    this.held.delete(turnId);
    for (const [id, finish] of held) this.end(id, finish(userCancel));
  }
}
