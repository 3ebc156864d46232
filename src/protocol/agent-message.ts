/**
 * @module protocol/agent-message
 * What a sub-agent delivers to its parent's mailbox (reference §5.6). The Session and Turn machines
 * carry these in their context, so the shape sits below both; the envelope the model reads is
 * rendered by `services/agents/mailbox.ts`.
 */

/** How the child's turn ended, as the parent's model is told. */
export type AgentMessageKind = 'final_answer' | 'interrupted' | 'failed';

/** One message from a sub-agent, waiting in its parent's mailbox. */
export interface AgentMessage {
  /** Deterministic: `agent-msg:{child_session_id}:{child_turn_id}:{kind}`; re-delivery is a no-op. */
  id: string;
  taskName: string;
  kind: AgentMessageKind;
  body: string;
}
