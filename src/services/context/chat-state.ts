/**
 * @module services/context/chat-state
 * The Conversation of one session (reference §2.4): committed messages appended only after their
 * write commits, the synthetic items a compaction installs, and the prune watermark. It is the
 * single writer of the in-memory history and lives outside machine context, where a growing list
 * would cost O(n) per step.
 */
import { OpenworkError } from '../../errors.js';
import type { StoredMessage } from '../../protocol/content.js';
import type { CheckpointRecord } from '../../storage/storage.js';

export class ChatStateError extends OpenworkError {
  constructor(message: string) {
    super('chat_state_error', message);
  }
}

export type SyntheticReason = 'last_user_request_replay' | 'compaction_summary' | 'system_reminder';

/** One item of the Conversation: a committed message, or an item a checkpoint projects. */
export interface ConversationItem {
  message: StoredMessage;
  /** Set for items a compaction installed; the replay keeps the real message's id and sequence. */
  synthetic?: { reason: SyntheticReason; compactionId: string };
}

/** The constant prefix of the summary item (reference §3.7). */
export const SUMMARY_PREFIX =
  'The earlier Conversation was compacted into the following continuation summary. Treat it as prior conversation context, preserve its uncertainty, and continue from it:';

/** The three items a checkpoint projects: the replayed last user request, the summary, the reminder. */
export function checkpointItems(checkpoint: CheckpointRecord, replay: StoredMessage): ConversationItem[] {
  const synthetic = (reason: SyntheticReason, text: string, suffix: string): ConversationItem => ({
    message: {
      id: `compaction:${checkpoint.id}:${suffix}`,
      sessionId: checkpoint.sessionId,
      turnId: null,
      sequence: checkpoint.replacedThroughMessageSequence,
      role: 'user',
      kind: 'normal',
      content: [{ type: 'text', text }],
      createdAt: checkpoint.createdAt,
    },
    synthetic: { reason, compactionId: checkpoint.id },
  });
  return [
    { message: replay, synthetic: { reason: 'last_user_request_replay', compactionId: checkpoint.id } },
    synthetic('compaction_summary', `${SUMMARY_PREFIX}\n\n${checkpoint.summary}`, 'summary'),
    synthetic('system_reminder', checkpoint.runtimeReminder, 'reminder'),
  ];
}

export class ChatState {
  private items: ConversationItem[] = [];
  /** `${turnId}:${callId}` of tool calls that have no result yet. */
  private readonly openCalls = new Set<string>();
  /**
   * Every call id of the latest turn that made tool calls, answered or not: a call id is unique in
   * its turn (reference §2.4; the store's `uq_messages_tool_result`), so a later response of the same
   * turn that reuses one is refused before it is stored, and before its tool runs. Kept across a
   * compaction's `replace`, which may drop the turn's earlier messages from the Conversation.
   */
  private usedCallTurn: string | null = null;
  private readonly usedCallIds = new Set<string>();
  private watermark: number | null;

  constructor(items: readonly ConversationItem[] = [], pruneWatermark: number | null = null) {
    this.watermark = pruneWatermark;
    this.install(items);
  }

  /** Builds the Conversation a loaded session starts with (reference §3.10 load). */
  static fromLoaded(loaded: {
    messages: readonly StoredMessage[];
    checkpoint: CheckpointRecord | null;
    replayMessage: StoredMessage | null;
    pruneWatermark: number | null;
  }): ChatState {
    const head = loaded.checkpoint && loaded.replayMessage ? checkpointItems(loaded.checkpoint, loaded.replayMessage) : [];
    return new ChatState([...head, ...loaded.messages.map((message) => ({ message }))], loaded.pruneWatermark);
  }

  private install(items: readonly ConversationItem[]): void {
    this.items = [];
    this.openCalls.clear();
    for (const item of items) {
      if ((item.message.role as string) === 'system') throw new ChatStateError(`persisted system message ${item.message.id}`);
      if (!item.synthetic) this.track(item.message);
      this.items.push(item);
    }
  }

  private track(message: StoredMessage): void {
    if (message.role === 'assistant') {
      for (const block of message.content) {
        if (block.type !== 'tool_call') continue;
        this.openCalls.add(`${message.turnId}:${block.callId}`);
        if (message.turnId !== this.usedCallTurn) {
          this.usedCallTurn = message.turnId;
          this.usedCallIds.clear();
        }
        this.usedCallIds.add(block.callId);
      }
    } else if (message.role === 'tool' && message.providerCallId) {
      this.openCalls.delete(`${message.turnId}:${message.providerCallId}`);
    }
  }

  /**
   * Throws `ChatStateError` if `messages` could not be appended, without changing anything. Called
   * before a message is written, so that the database never holds what the conversation refuses.
   */
  assertAppendable(messages: ReadonlyArray<Pick<StoredMessage, 'role' | 'content' | 'turnId' | 'providerCallId'>>): void {
    // What the messages before the one at hand opened and closed is kept apart from `openCalls`
    // instead of in a copy of it, and only while more messages follow: a step appends one message,
    // and copying the set for it was the chat state's whole allocation (issue 14, perf-alloc).
    let opened: Set<string> | null = null;
    let closed: Set<string> | null = null;
    /** Call ids the batch's earlier assistant messages used, answered in the batch or not. */
    let used: Set<string> | null = null;
    const last = messages.length - 1;
    for (let i = 0; i <= last; i += 1) {
      const message = messages[i]!;
      if ((message.role as string) === 'system') throw new ChatStateError('system messages never enter the conversation');
      if (message.role === 'tool') {
        const key = `${message.turnId}:${message.providerCallId}`;
        const open = opened?.has(key) || (this.openCalls.has(key) && !closed?.has(key));
        if (!open) throw new ChatStateError(`tool result ${message.providerCallId} does not answer an open tool call`);
        if (i < last) {
          opened?.delete(key);
          (closed ??= new Set()).add(key);
        }
      }
      if (message.role === 'assistant') {
        let first: string | null = null;
        let ids: Set<string> | null = null;
        for (const block of message.content) {
          if (block.type !== 'tool_call') continue;
          if (first === null) {
            first = block.callId;
            continue;
          }
          ids ??= new Set([first]);
          if (ids.has(block.callId)) throw new ChatStateError('tool call ids must be unique within a response');
          ids.add(block.callId);
        }
        if (ids) for (const id of ids) this.refuseReusedCall(message.turnId, id, used);
        else if (first !== null) this.refuseReusedCall(message.turnId, first, used);
        if (first !== null && i < last) {
          opened ??= new Set();
          used ??= new Set();
          for (const id of ids ?? [first]) {
            opened.add(`${message.turnId}:${id}`);
            used.add(`${message.turnId}:${id}`);
          }
        }
      }
    }
  }

  /** Throws when `callId` was used before in its turn: by a committed message, or earlier in the batch (`used`). */
  private refuseReusedCall(turnId: string | null, callId: string, used: Set<string> | null): void {
    if ((turnId === this.usedCallTurn && this.usedCallIds.has(callId)) || used?.has(`${turnId}:${callId}`)) {
      throw new ChatStateError(`tool call id ${JSON.stringify(callId)} was already used in this turn; tool call ids must be unique within a turn`);
    }
  }

  /** Appends committed messages, all or none; a tool result must answer an open call of its turn. */
  append(messages: readonly StoredMessage[]): void {
    this.assertAppendable(messages);
    for (const message of messages) {
      this.track(message);
      this.items.push({ message });
    }
  }

  /** Atomically replaces the Conversation (a compaction or rewind installing its projection). */
  replace(items: readonly ConversationItem[]): void {
    this.install(items);
  }

  /** The Conversation, re-read for every model call and never cached by callers. */
  view(): readonly ConversationItem[] {
    return this.items;
  }

  get pruneWatermark(): number | null {
    return this.watermark;
  }

  /** The watermark only moves forward (reference §3.2). */
  setPruneWatermark(value: number): void {
    this.watermark = Math.max(this.watermark ?? 0, value);
  }

  get length(): number {
    return this.items.length;
  }

  get lastSequence(): number {
    for (let i = this.items.length - 1; i >= 0; i -= 1) {
      const item = this.items[i]!;
      if (!item.synthetic) return item.message.sequence;
    }
    return 0;
  }
}
