/**
 * @module services/agents/mailbox
 * Agent messages (reference §5.6): what a sub-agent delivers to its parent's mailbox, and the
 * `<agent_message>` envelope written as a user-role `agent_message` message when drained.
 */
import type { NewMessage } from '../../protocol/content.js';
import { estimateTokens } from '../context/estimate.js';

export const AGENT_MESSAGE_MAX_TOKENS = 4_000;

export type AgentMessageKind = 'final_answer' | 'interrupted' | 'failed';

export interface AgentMessage {
  /** Deterministic: `agent-msg:{child_session_id}:{child_turn_id}:{kind}`; re-delivery is a no-op. */
  id: string;
  taskName: string;
  kind: AgentMessageKind;
  body: string;
}

export function agentMessageId(childSessionId: string, childTurnId: string, kind: AgentMessageKind): string {
  return `agent-msg:${childSessionId}:${childTurnId}:${kind}`;
}

export function renderAgentEnvelope(message: Pick<AgentMessage, 'taskName' | 'kind' | 'body'>): string {
  return `<agent_message>\n<task>${message.taskName}</task>\n<kind>${message.kind}</kind>\n<body>\n${message.body}\n</body>\n</agent_message>`;
}

export function agentEnvelopeTokens(message: AgentMessage): number {
  return estimateTokens(renderAgentEnvelope(message));
}

export function agentMessageToNewMessage(message: AgentMessage): NewMessage {
  return {
    id: message.id,
    role: 'user',
    kind: 'agent_message',
    content: [{ type: 'text', text: renderAgentEnvelope(message) }],
  };
}
