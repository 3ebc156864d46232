/**
 * @module session-handle/replay
 * `replayConversation`: a read-only rebuild of a session's model-visible conversation (reference
 * §3.10), from the live projection, a checkpoint, or the stored messages through a sequence.
 */
import { CommandError, InputError } from '../errors.js';
import { checkpointItems, type ConversationItem } from '../services/context/chat-state.js';
import type { RuntimeServices } from '../services/runtime.js';
import type { CheckpointRecord, SessionStorage } from '../storage/storage.js';

/**
 * A read-only rebuild of the model-visible conversation (reference §3.10): the latest projection,
 * a checkpoint's own three items, or the conversation as it stood through a message sequence.
 */
export async function replayConversation(
  storage: SessionStorage,
  services: RuntimeServices,
  sessionId: string,
  selector: { latest: true } | { compactionId: string } | { throughMessageSequence: number },
): Promise<ConversationItem[]> {
  if ('latest' in selector) return [...services.session(sessionId).chat.view()];
  const checkpoints = await storage.listCheckpoints(sessionId);
  const messages = await storage.listMessages(sessionId);
  const byId = new Map(messages.map((m) => [m.id, m]));
  const itemsOf = (cp: CheckpointRecord) => {
    const replay = cp.lastUserMessageId ? byId.get(cp.lastUserMessageId) : undefined;
    if (!replay) throw new CommandError('checkpoint_not_found', `checkpoint ${cp.id} has no replay anchor`);
    return checkpointItems(cp, replay);
  };
  if ('compactionId' in selector) {
    const cp = checkpoints.find((c) => c.id === selector.compactionId);
    if (!cp) throw new CommandError('checkpoint_not_found', `checkpoint ${selector.compactionId} does not exist in this session`);
    return itemsOf(cp);
  }
  const target = selector.throughMessageSequence;
  if (!Number.isInteger(target) || target < 0) throw new InputError('invalid_request', 'throughMessageSequence must be a non-negative integer');
  const base = [...checkpoints].reverse().find((c) => c.replacedThroughMessageSequence <= target);
  const head = base ? itemsOf(base) : [];
  const from = base?.replacedThroughMessageSequence ?? 0;
  return [...head, ...messages.filter((m) => m.sequence > from && m.sequence <= target).map((message) => ({ message }))];
}
