/**
 * @module storage/sql/rolled-back
 * The server failures after which a statement is known to have written nothing and may simply run
 * again (faults-review): Postgres chose it as a deadlock victim (40P01) or refused it for a
 * serialization conflict (40001, under `default_transaction_isolation = serializable` or
 * `repeatable read`, which a host may set on its database). Either way the server rolled the whole
 * statement back, and the lock it waited for is now free, so a fact statement (one atomic statement,
 * `step-sql.ts`) runs again instead of failing the turn with `persistence_error`. A statement that
 * timed out (57014) is not on this list: it was slow, and running it again would only double the wait;
 * nor is a lost connection, after which a write's outcome is unknown: `outcome-unknown.ts` runs those
 * again with a repeat that recognises a first attempt that committed.
 */
import { sqlStateOf } from './sql-state.js';

const ROLLED_BACK_WHOLE = new Set(['40P01', '40001']);

/** True when the server reported that it rolled the statement back whole as a deadlock victim or serialization failure. */
export function rolledBackWhole(error: unknown): boolean {
  const state = sqlStateOf(error);
  return state !== undefined && ROLLED_BACK_WHOLE.has(state);
}
