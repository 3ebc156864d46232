/**
 * @module services/context/chat-state
 * The Conversation of one session (reference §2.4): the committed messages in order, appended only
 * after their database write commits. It is the single writer of the in-memory history and is kept
 * out of machine context, where a growing list would cost O(n) per step.
 */
import { OpenworkError } from '../../errors.js';
import type { StoredMessage, ToolCallBlock } from '../../protocol/content.js';

export class ChatStateError extends OpenworkError {
  constructor(message: string) {
    super('chat_state_error', message);
  }
}

export class ChatState {
  private readonly items: StoredMessage[] = [];
  /** `${turnId}:${callId}` of tool calls that have no result yet. */
  private readonly openCalls = new Set<string>();

  constructor(messages: readonly StoredMessage[] = []) {
    for (const message of messages) {
      if ((message.role as string) === 'system') throw new ChatStateError(`persisted system message ${message.id}`);
      this.track(message);
      this.items.push(message);
    }
  }

  private track(message: StoredMessage): void {
    if (message.role === 'assistant') {
      for (const block of message.content) {
        if (block.type === 'tool_call') this.openCalls.add(`${message.turnId}:${block.callId}`);
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
    const open = new Set(this.openCalls);
    for (const message of messages) {
      if ((message.role as string) === 'system') throw new ChatStateError('system messages never enter the conversation');
      if (message.role === 'tool') {
        const key = `${message.turnId}:${message.providerCallId}`;
        if (!open.has(key)) throw new ChatStateError(`tool result ${message.providerCallId} does not answer an open tool call`);
        open.delete(key);
      }
      if (message.role === 'assistant') {
        const ids = message.content.filter((b): b is ToolCallBlock => b.type === 'tool_call').map((b) => b.callId);
        if (new Set(ids).size !== ids.length) throw new ChatStateError('tool call ids must be unique within a response');
        for (const id of ids) open.add(`${message.turnId}:${id}`);
      }
    }
  }

  /** Appends committed messages, all or none; a tool result must answer an open call of its turn. */
  append(messages: readonly StoredMessage[]): void {
    this.assertAppendable(messages);
    for (const message of messages) {
      this.track(message);
      this.items.push(message);
    }
  }

  /** The committed conversation, re-read for every model call and never cached by callers. */
  view(): readonly StoredMessage[] {
    return this.items;
  }

  get length(): number {
    return this.items.length;
  }

  get lastSequence(): number {
    return this.items[this.items.length - 1]?.sequence ?? 0;
  }
}
