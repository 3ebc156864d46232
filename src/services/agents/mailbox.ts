/**
 * @module services/agents/mailbox
 * Agent messages (reference §5.6): what a sub-agent delivers to its parent's mailbox, and the
 * `<agent_message>` envelope written as a user-role `agent_message` message when drained.
 */
import type { AgentMessage, AgentMessageKind } from '../../protocol/agent-message.js';
import type { NewMessage } from '../../protocol/content.js';
import { estimateTokens } from '../context/estimate.js';
import { escapeFraming } from '../context/framing.js';

// The message shape moved down to the protocol; this keeps the old import path working.
export type { AgentMessage, AgentMessageKind } from '../../protocol/agent-message.js';

export const AGENT_MESSAGE_MAX_TOKENS = 4_000;

export function agentMessageId(childSessionId: string, childTurnId: string, kind: AgentMessageKind): string {
  return `agent-msg:${childSessionId}:${childTurnId}:${kind}`;
}

/**
 * A body as the envelope carries it (attack round 6): the `<` that would open or close a framing
 * tag becomes `&lt;` (`escapeFraming`, the one escape for untrusted text in runtime framing), so a
 * child's answer cannot end its envelope and go on as the user's text, open another explorer's
 * envelope, or pass for the runtime's own text. Other text, code included, is unchanged.
 */
export function envelopeBody(body: string): string {
  return escapeFraming(body);
}

export function renderAgentEnvelope(message: Pick<AgentMessage, 'taskName' | 'kind' | 'body'>): string {
  return `<agent_message>\n<task>${message.taskName}</task>\n<kind>${message.kind}</kind>\n<body>\n${envelopeBody(message.body)}\n</body>\n</agent_message>`;
}

export function agentEnvelopeTokens(message: AgentMessage): number {
  return estimateTokens(renderAgentEnvelope(message));
}

export const COMPLETED_WITHOUT_ANSWER = 'Sub-agent completed without a persisted final response.';
export const INTERRUPTED_BODY = 'Sub-agent turn was interrupted.';
export const RESTART_BODY = 'Sub-agent was interrupted by a process restart and is no longer available. Spawn a new explorer if this result is still needed.';

/**
 * The message a child's terminal turn becomes (reference §5.6 and §5.8). The live path and the
 * reconciliation use this one mapping, so the deterministic id is the same on both paths (the
 * reference's known cancelled/interrupted mismatch is not carried over).
 */
export function terminalAgentMessage(
  childSessionId: string,
  childTurnId: string,
  taskName: string,
  outcome:
    | { status: 'completed'; finalText: string }
    | { status: 'failed'; code: string; message: string }
    | { status: 'cancelled' }
    | { status: 'interrupted' },
): AgentMessage {
  const kind: AgentMessageKind = outcome.status === 'completed' ? 'final_answer' : outcome.status === 'failed' ? 'failed' : 'interrupted';
  const body =
    outcome.status === 'completed'
      ? outcome.finalText.trim() === ''
        ? COMPLETED_WITHOUT_ANSWER
        : outcome.finalText
      : outcome.status === 'failed'
        ? `${outcome.code}: ${outcome.message}`
        : outcome.status === 'cancelled'
          ? INTERRUPTED_BODY
          : RESTART_BODY;
  const message: AgentMessage = { id: agentMessageId(childSessionId, childTurnId, kind), taskName, kind, body };
  const tokens = agentEnvelopeTokens(message);
  // An answer (or failure text) too long for an envelope (reference §5.6: >= 4,000 tokens is never
  // enqueued) becomes a short notice under the same id and kind (trust-leftovers point 4): the parent
  // learns the child finished and why its text is missing, instead of waiting out `wait_agent`; and
  // the reconciliation finds the id delivered, so it never fails the parent's next `startTurn`.
  return tokens >= AGENT_MESSAGE_MAX_TOKENS ? { ...message, body: undeliverableBody(kind, tokens) } : message;
}

/** The notice that replaces an undeliverable body; it starts with the stable code `agent_delivery_failed`. */
export function undeliverableBody(kind: AgentMessageKind, tokens: number): string {
  const what = kind === 'final_answer' ? 'final answer' : 'failure message';
  return (
    `${AGENT_DELIVERY_FAILED}: the sub-agent finished, but its ${what} is about ${tokens} tokens and an agent message must stay under ` +
    `${AGENT_MESSAGE_MAX_TOKENS}, so its text was not delivered. Ask it for a shorter answer with followup_task.`
  );
}

export const AGENT_DELIVERY_FAILED = 'agent_delivery_failed';

export function agentMessageKindOfStatus(status: 'completed' | 'failed' | 'cancelled' | 'interrupted'): AgentMessageKind {
  return status === 'completed' ? 'final_answer' : status === 'failed' ? 'failed' : 'interrupted';
}

export function agentMessageToNewMessage(message: AgentMessage): NewMessage {
  return {
    id: message.id,
    role: 'user',
    kind: 'agent_message',
    content: [{ type: 'text', text: renderAgentEnvelope(message) }],
  };
}
