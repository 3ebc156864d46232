/**
 * @module machines/session/events
 * The Session machine's event protocol: the commands and facts it takes, and what it emits (the
 * answer to each command and the sequenced updates). The session handle speaks this protocol.
 */
import type { CommandErrorCode } from '../../errors.js';
import type { NewMessage } from '../../protocol/content.js';
import type { PermissionDecision, PermissionMode } from '../../protocol/input.js';
import type { AgentMessage } from '../../protocol/agent-message.js';
import type { RateLimitSnapshot } from '../../protocol/rate-limits.js';
import type { SessionUpdate } from '../../protocol/updates.js';
import type { UserInputAnswers } from '../../protocol/user-input.js';
import type { PublishEvent } from '../publish.js';
import type { SessionInput } from './ports.js';

/** A command the session's state refuses; `activeTurnId` names the turn a `busy` answer is busy with. */
export type CommandErrorReply = { ok: false; code: CommandErrorCode; message: string; activeTurnId?: string };
/** The answer to one command. */
export type CommandReply = { ok: true; turnId?: string } | CommandErrorReply;

/** Everything the Session machine takes: host commands, a child's lifecycle, and its Turn's facts. */
export type SessionEvent =
  | {
      type: 'session.start_turn';
      commandId: string;
      turnId: string;
      clientRequestId: string;
      messages: NewMessage[];
      disabledSkillNames: string[];
      /** The turn's final answer is judged against an output schema after it is stored (`TurnInput.answerJudged`). */
      answerJudged?: boolean;
    }
  | { type: 'session.cancel_turn'; commandId: string; turnId: string }
  | { type: 'session.resolve_permission'; commandId: string; turnId: string; toolCallId: string; decision: PermissionDecision; at: number }
  | { type: 'session.answer_user_input'; commandId: string; turnId: string; toolCallId: string; answers: UserInputAnswers }
  | { type: 'session.steer_turn'; commandId: string; turnId: string; message: NewMessage }
  | { type: 'session.deliver_agent_message'; commandId: string; message: AgentMessage }
  | { type: 'session.set_permission_mode'; commandId: string; mode: PermissionMode }
  | { type: 'session.begin_maintenance'; commandId: string; kind: 'compact' | 'rewind' }
  | { type: 'session.end_maintenance'; reloadRequired: boolean }
  /** An update of a compaction or rewind, which belongs to no turn. */
  | { type: 'session.maintenance_update'; update: SessionUpdate }
  | { type: 'session.shutdown'; commandId: string }
  /** Spawns a sub-agent's Session actor under this (root) session with a per-agent system id. */
  | { type: 'session.spawn_child'; childId: string; systemId: string; input: SessionInput }
  | { type: 'session.stop_child'; childId: string }
  /**
   * The updates one macrostep of the active turn or of one of its tool calls announced, in order,
   * sent here directly to be sequenced one by one (machines/publish.ts).
   */
  | PublishEvent
  | { type: 'turn.granted'; scope: 'turn' | 'session'; environmentId: string; grantKey: string }
  | { type: 'turn.rate_limits_reported'; snapshot: RateLimitSnapshot };

/** What the Session machine emits: command answers and sequenced updates. */
export type SessionEmitted =
  | { type: 'session.replied'; commandId: string; reply: CommandReply }
  /** Updates just sequenced, in order: the last is `lastSequence`, each before it one less. */
  | { type: 'session.published'; lastSequence: number; turnId: string | null; updates: readonly SessionUpdate[] };
