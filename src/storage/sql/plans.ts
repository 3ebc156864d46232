/**
 * @module storage/sql/plans
 * The `turn_plans` rows of a session, read when it loads.
 *
 * Each exported function is the `SessionStorage` method of the same name (its contract is in
 * `storage.ts`), taking the storage object's `SqlContext` first.
 */
import type { PlanStep, TurnPlanRecord } from '../../protocol/plan.js';
import { iso, strOrNull } from '../sql.js';
import type { SqlContext } from './context.js';

export function loadSessionTurnPlans(ctx: SqlContext, sessionId: string): Promise<TurnPlanRecord[]> {
  return ctx.run('load plans', async () => {
    const { rows } = await ctx.db.query(
      `SELECT p.turn_id, p.explanation, p.steps, p.updated_at FROM turn_plans p JOIN turns t ON t.id = p.turn_id
         WHERE t.session_id = $1 ORDER BY t.sequence`,
      [sessionId],
    );
    return rows.map((r) => ({
      turnId: String(r.turn_id),
      explanation: strOrNull(r.explanation),
      steps: r.steps as PlanStep[],
      updatedAt: iso(r.updated_at),
    }));
  });
}
