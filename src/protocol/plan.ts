/**
 * @module protocol/plan
 * The update_plan data model (reference §6.2): wire names are the same in schema, DB, events and reminder.
 */
import { z } from 'zod';

export const MAX_PLAN_STEPS = 128;
export const MAX_STEP_CHARS = 1024;

export const planStepStatusSchema = z.enum(['pending', 'in_progress', 'completed']);
export type PlanStepStatus = z.infer<typeof planStepStatusSchema>;

export const planStepSchema = z.strictObject({ step: z.string(), status: planStepStatusSchema });
export type PlanStep = z.infer<typeof planStepSchema>;

export const updatePlanArgsSchema = z.strictObject({
  explanation: z.string().optional(),
  plan: z.array(planStepSchema),
});
export type UpdatePlanArgs = z.infer<typeof updatePlanArgsSchema>;

/** The current plan of a turn as the snapshot and `plan_updated` carry it. */
export interface TurnPlanSnapshot {
  explanation: string | null;
  steps: PlanStep[];
  updatedAt: string;
}

export interface TurnPlanRecord extends TurnPlanSnapshot {
  turnId: string;
}
