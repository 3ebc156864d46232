/**
 * @module services/user-input/request-user-input
 * The `request_user_input` control tool: its definition, prompt rules and argument check. It is
 * offered only to root sessions of a core created with `userInput: true`, because a host that
 * never shows the questions would leave the turn waiting forever; sub-agents never ask.
 */
import { z } from 'zod';
import { userInputRequestSchema, userInputRequestShape, type UserInputRequest } from '../../protocol/user-input.js';
import { toolDefinition } from '../tools/define.js';
import type { ControlToolSpec } from '../tools/registry.js';

export const REQUEST_USER_INPUT_DESCRIPTION = [
  'Ask the user one to three short questions and wait for the answers.',
  'Use it only when you cannot go on without a decision or a fact that only the user has;',
  'do not use it to ask for permission to run a tool (that is asked for you) or to report progress.',
  'Offer options when the likely answers are few; the user may still answer in their own words.',
  'The result is JSON: {"answers": {"<question id>": "<answer>"}}.',
].join(' ');

export const REQUEST_USER_INPUT_PROMPT_RULES = `## Asking the user
- When you cannot go on without a decision only the user can make, call request_user_input instead of guessing.
- Ask at most three short, concrete questions at once; give options when the choice is between a few answers.
- Do not ask about anything you can find out yourself with the tools you have.`;

export const requestUserInputControlTool: ControlToolSpec = {
  name: 'request_user_input',
  definition: toolDefinition({ name: 'request_user_input', description: REQUEST_USER_INPUT_DESCRIPTION, parameters: userInputRequestShape }),
  promptRules: REQUEST_USER_INPUT_PROMPT_RULES,
};

export type UserInputValidation = { ok: true; request: UserInputRequest } | { ok: false; message: string };

/** Parses the model's arguments; a bad request is the model's error, answered as a failed call. */
export function validateUserInputArgs(args: unknown): UserInputValidation {
  const parsed = userInputRequestSchema.safeParse(args);
  if (parsed.success) return { ok: true, request: parsed.data };
  return { ok: false, message: `failed to parse request_user_input arguments: ${zodMessage(parsed.error)}` };
}

function zodMessage(error: z.ZodError): string {
  return error.issues.map((issue) => `${issue.path.length > 0 ? issue.path.join('.') : '(root)'}: ${issue.message}`).join('; ');
}
