/**
 * @module services/context/conversation-history
 * The `conversation_history` tool (reference §3.10): an exact, paginated slice of the raw messages
 * a compaction checkpoint covers, for when the summary lacks a detail. Read-only; bound to the
 * calling session.
 */
import { z } from 'zod';
import { isOpenworkError } from '../../errors.js';
import type { SessionStorage } from '../../storage/storage.js';
import { defineTool } from '../tools/define.js';
import { failedResult } from '../../protocol/tool-result.js';

export const CONVERSATION_HISTORY_DESCRIPTION = [
  'Read an exact, paginated slice of the raw messages covered by a compaction checkpoint of this conversation.',
  'Omit compactionId for the latest checkpoint. Follow nextAfterSequence while hasMore is true.',
  'Use it only when the continuation summary lacks an exact detail you need.',
  'It never replays tools and never changes any state.',
].join(' ');

export function conversationHistoryTool(storage: Pick<SessionStorage, 'readTranscript'>) {
  return defineTool({
    name: 'conversation_history',
    description: CONVERSATION_HISTORY_DESCRIPTION,
    parameters: z.strictObject({
      compactionId: z.string().min(1).optional(),
      afterSequence: z.number().int().min(0).optional(),
      limit: z.number().int().min(1).max(50).optional(),
    }),
    async execute(args, ctx) {
      try {
        const page = await storage.readTranscript(ctx.sessionId, args);
        return JSON.stringify({
          compactionId: page.compactionId,
          throughMessageSequence: page.throughMessageSequence,
          hasMore: page.hasMore,
          nextAfterSequence: page.nextAfterSequence,
          messages: page.messages.map((m) => ({ sequence: m.sequence, role: m.role, kind: m.kind, content: m.content })),
        });
      } catch (error) {
        if (isOpenworkError(error) && (error.code === 'checkpoint_not_found' || error.code === 'invalid_request')) {
          return failedResult('invalid_arguments', error.message);
        }
        throw error;
      }
    },
  });
}
