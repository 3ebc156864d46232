/**
 * @module storage/sql/correction
 * The startup correction: turns and spans still `running` from a process that ended are marked
 * interrupted and `outcome_unknown`.
 *
 * Each exported function is the `SessionStorage` method of the same name (its contract is in
 * `storage.ts`), taking the storage object's `SqlContext` first.
 */
import type { CorrectionReport } from '../storage.js';
import type { SqlContext } from './context.js';

export function markRunningInterrupted(ctx: SqlContext): Promise<CorrectionReport> {
  return ctx.run('startup correction', () =>
    ctx.db.transaction(async (tx) => {
      const turns = await tx.query(
        `UPDATE turns SET status = 'interrupted', ended_at = GREATEST(now(), started_at),
             error_code = COALESCE(error_code, 'process_restart'),
             error_message = COALESCE(error_message, 'the process ended while the turn was running'),
             updated_at = now()
           WHERE status = 'running'`,
      );
      const spans = await tx.query(
        `UPDATE trace_spans SET status = 'outcome_unknown', ended_at = GREATEST(now(), started_at),
             error_code = COALESCE(error_code, 'process_restart')
           WHERE status = 'running'`,
      );
      return { turns: turns.rowCount, spans: spans.rowCount };
    }),
  );
}
