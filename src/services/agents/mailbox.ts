/**
 * @module services/agents/mailbox
 * Agent messages (reference §5.6): what a sub-agent delivers to its parent's mailbox, and the
 * `<agent_message>` envelope written as a user-role `agent_message` message when drained.
 */
import type { AgentMessage, AgentMessageKind } from '../../protocol/agent-message.js';
import type { NewMessage } from '../../protocol/content.js';
import { estimateTokens } from '../context/estimate.js';

// The message shape moved down to the protocol; this keeps the old import path working.
export type { AgentMessage, AgentMessageKind } from '../../protocol/agent-message.js';

export const AGENT_MESSAGE_MAX_TOKENS = 4_000;

export function agentMessageId(childSessionId: string, childTurnId: string, kind: AgentMessageKind): string {
  return `agent-msg:${childSessionId}:${childTurnId}:${kind}`;
}

export function renderAgentEnvelope(message: Pick<AgentMessage, 'taskName' | 'kind' | 'body'>): string {
  return `<agent_message>\n<task>${message.taskName}</task>\n<kind>${message.kind}</kind>\n<body>\n${message.body}\n</body>\n</agent_message>`;
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
  return { id: agentMessageId(childSessionId, childTurnId, kind), taskName, kind, body };
}

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
