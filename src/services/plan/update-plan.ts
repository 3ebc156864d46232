/**
 * @module services/plan/update-plan
 * The `update_plan` control tool (reference §6): its definition, prompt rules and validation.
 * The plan is committed with its tool result in one transaction by the tool-call machine's actor.
 */
import { z } from 'zod';
import { MAX_PLAN_STEPS, MAX_STEP_CHARS, updatePlanArgsSchema, type PlanStep } from '../../protocol/plan.js';
import type { ControlToolSpec } from '../tools/registry.js';

export const UPDATE_PLAN_DESCRIPTION = [
  'Maintain a checklist for the current task.',
  'Use it for multi-step work; skip it for simple requests.',
  'Each call replaces the whole plan, so always send the full list.',
  'Mark a step in_progress before you start it and completed right after you finish it.',
  'At most one step may be in_progress. Mark every step completed before you finish.',
].join(' ');

export const UPDATE_PLAN_PROMPT_RULES = `## Task checklists
- Skip the checklist for simple tasks.
- For complex, multi-stage or repeatedly verified work, write the plan first with update_plan.
- Mark a step in_progress before starting it and completed right after finishing it; do not batch updates.
- At most one step may be in_progress at a time.
- Mark every step completed before you finish.
- Do not add filler steps such as "read the code" or "answer the user".
- After a successful update keep working; do not paste the plan into the chat.`;

export const updatePlanControlTool: ControlToolSpec = {
  name: 'update_plan',
  definition: {
    name: 'update_plan',
    description: UPDATE_PLAN_DESCRIPTION,
    parameters: {
      type: 'object',
      additionalProperties: false,
      required: ['plan'],
      properties: {
        explanation: { type: 'string', description: 'Optional one-line note on why the plan changed.' },
        plan: {
          type: 'array',
          maxItems: MAX_PLAN_STEPS,
          items: {
            type: 'object',
            additionalProperties: false,
            required: ['step', 'status'],
            properties: {
              step: { type: 'string' },
              status: { type: 'string', enum: ['pending', 'in_progress', 'completed'] },
            },
          },
        },
      },
    },
  },
  promptRules: UPDATE_PLAN_PROMPT_RULES,
};

export { PLAN_UPDATED_TEXT } from '../../protocol/model-texts.js';

export type PlanValidation =
  | { ok: true; explanation: string | null; steps: PlanStep[] }
  | { ok: false; message: string };

function zodMessage(error: z.ZodError): string {
  return error.issues
    .map((issue) => `${issue.path.length > 0 ? issue.path.join('.') : '(root)'}: ${issue.message}`)
    .join('; ');
}

/** Parses and checks the arguments of one call (reference §6.2 rules 1-11 and the limits). */
export function validatePlanArgs(args: unknown): PlanValidation {
  const parsed = updatePlanArgsSchema.safeParse(args);
  if (!parsed.success) {
    return { ok: false, message: `failed to parse update_plan arguments: ${zodMessage(parsed.error)}` };
  }
  const { plan, explanation } = parsed.data;
  if (plan.length > MAX_PLAN_STEPS) return { ok: false, message: `plan must not exceed ${MAX_PLAN_STEPS} steps` };
  let inProgress: number | undefined;
  for (const [index, step] of plan.entries()) {
    if (step.step.trim() === '') return { ok: false, message: `plan step ${index} must not be blank` };
    if ([...step.step].length > MAX_STEP_CHARS) {
      return { ok: false, message: `plan step ${index} exceeds ${MAX_STEP_CHARS} characters` };
    }
    if (step.status === 'in_progress') {
      if (inProgress !== undefined) {
        return {
          ok: false,
          message: `at most one step may be in_progress, but steps ${inProgress} and ${index} are both in_progress`,
        };
      }
      inProgress = index;
    }
  }
  return { ok: true, explanation: explanation ?? null, steps: plan };
}

/** NULL/0/N semantics of `turns.plan_unfinished_step_count` (reference §6.10). */
export function unfinishedStepCount(steps: readonly PlanStep[] | null | undefined): number | null {
  if (!steps) return null;
  return steps.filter((s) => s.status !== 'completed').length;
}
