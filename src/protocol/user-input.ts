/**
 * @module protocol/user-input
 * The `request_user_input` exchange (seed 004 TurnState `pending_user_input`): the model asks the
 * user one to three short questions, the turn waits, and the host answers them through
 * `SessionHandle.answerUserInput`. The questions are the tool call's validated arguments; the
 * answers become its result.
 */
import { z } from 'zod';
import { isStorableText, STORABLE_MESSAGE } from './storable-text.js';

export const MAX_USER_INPUT_QUESTIONS = 3;
export const MAX_USER_INPUT_OPTIONS = 6;
export const MAX_QUESTION_CHARS = 2_000;
export const MAX_ANSWER_CHARS = 8_000;

export const userInputOptionSchema = z
  .object({
    label: z.string().trim().min(1).max(80),
    description: z.string().max(400).optional(),
  })
  .strict();

export const userInputQuestionSchema = z
  .object({
    /** Stable key of the answer: snake_case, unique within the request. */
    id: z.string().regex(/^[a-z][a-z0-9_]{0,31}$/, 'id must be snake_case, 1-32 characters'),
    /** A short label a host can show above the question. */
    header: z.string().trim().min(1).max(40).optional(),
    question: z.string().trim().min(1).max(MAX_QUESTION_CHARS),
    /** Suggested answers; the user may still answer in their own words. */
    options: z.array(userInputOptionSchema).min(2).max(MAX_USER_INPUT_OPTIONS).optional(),
  })
  .strict();
export type UserInputQuestion = z.infer<typeof userInputQuestionSchema>;

/** The request's shape alone (what the model is shown as the tool's JSON Schema). */
export const userInputRequestShape = z
  .object({ questions: z.array(userInputQuestionSchema).min(1).max(MAX_USER_INPUT_QUESTIONS) })
  .strict();

export const userInputRequestSchema = userInputRequestShape.superRefine((request, ctx) => {
    const seen = new Set<string>();
    for (const [index, q] of request.questions.entries()) {
      if (seen.has(q.id)) ctx.addIssue({ code: 'custom', path: ['questions', index, 'id'], message: `duplicate question id ${q.id}` });
      seen.add(q.id);
    }
  });
export type UserInputRequest = z.infer<typeof userInputRequestSchema>;

/** One answer per question id. */
export const userInputAnswersSchema = z.record(z.string(), z.string().trim().min(1).max(MAX_ANSWER_CHARS).refine(isStorableText, STORABLE_MESSAGE));
export type UserInputAnswers = z.infer<typeof userInputAnswersSchema>;

/** What the turn holds while it waits (the snapshot's `pendingUserInput`). */
export interface PendingUserInput {
  toolCallId: string;
  request: UserInputRequest;
}

/**
 * Checks answers against the questions they answer: every question answered, nothing else.
 * Returns a message for the host, or null when they fit.
 */
export function answersMismatch(request: UserInputRequest, answers: UserInputAnswers): string | null {
  const ids = new Set(request.questions.map((q) => q.id));
  const unknown = Object.keys(answers).filter((id) => !ids.has(id));
  if (unknown.length > 0) return `no question has the id ${unknown.join(', ')}`;
  const missing = [...ids].filter((id) => !(id in answers));
  if (missing.length > 0) return `unanswered question ${missing.join(', ')}`;
  return null;
}

/** The tool result the model reads: the answers keyed by question id, in question order. */
export function answersResultText(request: UserInputRequest, answers: UserInputAnswers): string {
  const ordered: Record<string, string> = {};
  for (const q of request.questions) ordered[q.id] = answers[q.id]!;
  return JSON.stringify({ answers: ordered });
}
