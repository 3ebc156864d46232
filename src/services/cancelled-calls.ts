/**
 * @module services/cancelled-calls
 * The Turn's `recordCancelledCalls` actor: the calls of a batch left after a terminal are stored as
 * cancelled (never run), each with its tool span, so every call of the assistant message has its
 * result.
 */
import { fromPromise } from 'xstate';
import type { CancelledCallsInput } from '../machines/turn/ports.js';
import { REMAINING_CALL_TEXT } from '../protocol/model-texts.js';
import { cancelledResult } from '../protocol/tool-result.js';
import { isoNow } from './clock.js';
import type { RuntimeServices } from './runtime.js';
import { toolSpan } from './tool-call-actors.js';
import { commitToolResult } from './tools/result.js';

/** The actor, over the runtime's storage, spans and clock. */
export function recordCancelledCallsActor(services: RuntimeServices) {
  return fromPromise<void, CancelledCallsInput>(async ({ input }) => {
    for (const { toolCallId, call } of input.calls) {
      const startedAt = isoNow(services.clock);
      const span = toolSpan({ sessionId: input.sessionId, turnId: input.turnId, toolCallId, providerCallId: call.callId, toolName: call.name, parentSpanId: input.parentSpanId, startedAt });
      services.spans.start(span);
      let persisted = false;
      try {
        await commitToolResult(services, { sessionId: input.sessionId, turnId: input.turnId, providerCallId: call.callId, toolName: call.name, result: cancelledResult(REMAINING_CALL_TEXT) });
        persisted = true;
      } finally {
        services.spans.end(span.id, {
          status: 'cancelled',
          errorCode: 'cancelled',
          attributes: { permissionDecision: 'cancelled', permissionDecisionSource: 'system', resultPersisted: persisted },
        });
      }
    }
  });
}
